"""img2col read back from the simulator: ``load_3d`` run over a map whose every element holds
its own NCHW index, and the img2col matrix it writes into L0A read back out. The ground truth of
lab 06's exercise 1 (img2col index arithmetic) and the data of its picture
(:func:`npulab.plot.plot_img2col`).

It is a probe, far simpler than the conv kernel (:mod:`npulab.kernels.conv`): one core and one
block tile holding the whole output (so at most 2,048 map elements, which fp16 holds exactly),
fp16 only, a 2-D map with a square kernel, plain NC1HWC0 (never C04), and no weights, mmad or
FixPipe: the kernel stops once L0A holds the matrix, and the host peeks at L0A, which a real
kernel cannot.
"""
from __future__ import annotations

import numpy as np

from ... import formats as F
from ...arch import DEFAULT_CHIP, ceil_div, round_up
from ...errors import ArgumentError
from ...lang import A1, A2, Queue, TPipe, launch
from ...lang.conv_load import Fmatrix, data_copy_strided, load_3d
from ..conv import make_problem, map_copies, pack_input, tile_boxes

MAX_ELEMENTS = 2048              # fp16 holds every integer up to 2048 exactly


def _problem_2d(x_shape, k, stride, pad, dtype=np.float16, cout=16, c04=False):
    """The conv problem; plain NC1HWC0 unless ``c04`` (the default tiling would pick the C04
    format for a map of at most 4 channels)."""
    n, c, h, w = x_shape
    return make_problem((n, c, 1, h, w), (cout, c, 1, k, k), dtype, (1, stride, stride),
                        ((0, 0), (pad, pad), (pad, pad)), c04=c04)


def img2col_on_npu(x_shape, k: int, stride: int, pad: int) -> np.ndarray:
    """The (M, K) img2col matrix of an fp16 NCHW map of ``x_shape``, as ``load_3d`` writes it
    into L0A: each entry is the NCHW flat index of the input element it holds, -1 for padding
    (outside the map, or the zero channels that pad C to C1 x C0). Simulated on one core of the
    910 (the map moves GM -> L1 in NC1HWC0, load_3d expands it into L0A, the host reads L0A)."""
    t = _problem_2d(x_shape, k, stride, pad)
    n, c, h, w = x_shape
    x = (np.arange(n * c * h * w) + 1).reshape(n, c, 1, h, w).astype(np.float16)   # exact up to 2048
    if n * c * h * w > MAX_ELEMENTS:
        raise ArgumentError(f"img2col_on_npu: at most {MAX_ELEMENTS} map elements (fp16 holds the "
                            f"indices exactly)")
    m, kk = t.m, t.k
    boxes, c1_elems = tile_boxes(t.geom, t.batch, m, t.c0, 0)
    seen = []

    def kernel(x_gm):
        pipe = TPipe()
        a1q, a2q = Queue(A1, "map_l1"), Queue(A2, "img2col_l0a")
        pipe.init_buffer(a1q, 1, t.c1 * c1_elems * 2)
        pipe.init_buffer(a2q, 1, round_up(m, 16) * kk * 2)
        a1 = a1q.alloc_tensor(np.float16)
        for dst, src, count, length, ss, ds in map_copies(t, boxes, t.c1, c1_elems):
            data_copy_strided(a1[dst:], x_gm[src:], count, length, ss, ds)     # NC1HWC0 slab -> L1
        a1q.enque(a1)
        a1 = a1q.deque()
        a2 = a2q.alloc_tensor(np.float16)
        load_3d(a2, a1, Fmatrix(t.geom, t.c0, t.c1, c1_elems, 0, boxes), m, kk)  # img2col -> L0A (ZZ)
        seen.append(a2.numpy()[:round_up(m, 16) * kk].copy())                # the host peeks at L0A
        a2q.free_tensor(a2)
        a1q.free_tensor(a1)

    launch(kernel, 1, pack_input(x, t).reshape(-1), chip=DEFAULT_CHIP)
    zz = seen[0].reshape(ceil_div(m, 16), kk // t.c0, 16, t.c0)
    return F.zz_to_nd(zz, m, kk).astype(np.int64) - 1


__all__ = ["MAX_ELEMENTS", "img2col_on_npu"]
