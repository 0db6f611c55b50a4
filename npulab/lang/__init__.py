"""The kernel language: Ascend C in Python, names in snake_case.

A vector kernel reads like its Ascend C original::

    pipe = TPipe()
    in_x = Queue(VECIN, "in_x"); pipe.init_buffer(in_x, 2, TILE * 2)
    x = in_x.alloc_tensor(np.float16); data_copy(x, x_gm[i * TILE:], TILE); in_x.enque(x)
    x = in_x.deque(); ...; in_x.free_tensor(x)

and runs with ``launch(kernel, block_dim, *args, chip="910")``. A cube kernel drains L0C through
FixPipe (``fixpipe``) on the chips that have one (910B, the teaching chip), and through UB
(``data_copy_l0c2ub``, the vector unit, ``data_copy_nz2nd``) on the 910 and 310 (``output_path``).

The vector ``min``, ``max`` and ``abs`` (Ascend C ``Min``, ``Max``, ``Abs``) are ``lang.min``
and so on; ``from npulab.lang import *`` leaves them out, so Python's own ``min``, ``max`` and
``abs`` keep working in the kernel's loops.
"""
from .context import get_block_idx, get_block_num, running_chip
from .copy import data_copy, data_copy_pad, data_copy_strided
from .cube import data_copy_nd2nz, fixpipe, load_data, mmad
from .conv_load import fixpipe_channelwise, load_3d  # noqa: F401 (img2col path)
from .drain_ub import data_copy_l0c2ub, data_copy_nz2nd, output_path
from .launch import LaunchResult, launch
from .pipe import Queue, TBuf, TPipe
from .sync import (PIPE_ALL, PIPE_FIX, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_S, PIPE_V,
                   pipe_barrier, set_flag, wait_flag)
from .tensor import A1, A2, B1, B2, CO1, CO2, VECCALC, VECIN, VECOUT, GlobalTensor, LocalTensor, Position
from . import vector_rows  # noqa: F401 (npulab.lang.vector_rows: the 2-D forms)
from .vector import (abs, add, adds, cast, div, duplicate, exp, ln, max, maxs, min, mins, mul, muls,
                     reciprocal, reduce_max, reduce_sum, relu, sqrt, sub)
from .vector import fused_mul_add, fused_mul_add_const, gather, mul_add_dst
from .vector_rows import (add_per_col, add_per_row, div_per_col, div_per_row, fused_mul_add_per_col,
                          fused_mul_add_per_row, max_per_col, max_per_row, min_per_col, min_per_row, mul_per_col,
                          mul_per_row, reduce_max_rows, reduce_sum_rows, sub_per_col, sub_per_row)

__all__ = [
    "get_block_idx", "get_block_num", "running_chip", "data_copy", "data_copy_pad", "LaunchResult", "launch",
    "TPipe", "Queue", "TBuf", "PIPE_ALL", "PIPE_FIX", "PIPE_M", "PIPE_MTE1", "PIPE_MTE2", "PIPE_MTE3",
    "PIPE_S", "PIPE_V", "pipe_barrier", "set_flag", "wait_flag", "A1", "A2", "B1", "B2", "CO1", "CO2",
    "VECCALC", "VECIN", "VECOUT", "GlobalTensor", "LocalTensor", "Position", "add", "adds",
    "cast", "div", "duplicate", "exp", "ln", "maxs", "mins", "mul", "muls",
    "reciprocal", "reduce_max", "reduce_sum", "relu", "sqrt", "sub",
    "data_copy_nd2nz", "load_data", "mmad", "fixpipe", "data_copy_strided", "data_copy_l0c2ub",
    "data_copy_nz2nd", "output_path",
    "reduce_sum_rows", "reduce_max_rows", "add_per_row", "sub_per_row", "mul_per_row", "div_per_row",
    "add_per_col", "sub_per_col", "mul_per_col", "max_per_col", "gather",
    "div_per_col", "max_per_row", "min_per_row", "min_per_col",
    "fused_mul_add", "fused_mul_add_const", "mul_add_dst", "fused_mul_add_per_row", "fused_mul_add_per_col",
]
from .mix import (cross_core_set_flag, cross_core_wait_flag, get_sub_block_idx, get_sub_block_num,  # noqa: E402
                  is_aic, is_aiv)

__all__ += ["is_aic", "is_aiv", "get_sub_block_idx", "get_sub_block_num", "cross_core_set_flag",
            "cross_core_wait_flag"]
