"""Teaching kernels, complete and runnable, that the labs run beside the package's operators (as
ops-nn keeps ``examples/add_example`` beside its operator folders): each is smaller than the real
operator so that one idea stands out, and its docstring says which lab uses it and what it
leaves out.

====================  ==========================================================================
module                kernel
====================  ==========================================================================
``gm_copy``           y = x GM to GM through the UB, a plan of cores and copy size (lab 00's challenge)
``poly``              y = p(x) with the Compute stage passed in (lab 01's challenge: passes a tile)
``row_scale``         z[r, :] = x[r, :] * gamma over whole rows (lab 03: a 2-D tiling)
``row_scale_2d``      the same with rows and columns cut over the cores (lab 03's challenge)
``silu``              SiLU single and double buffered (lab 04: queue slots and overlap)
``mish``              Mish, a vector-heavy activation (lab 04: how many slots pay)
``swiglu_gate``       SwiGLU's gate silu(a) * b, two inputs (lab 04's stall and challenge)
``img2col``           load_3d run over an index map, L0A read back (lab 06: img2col arithmetic)
``rms_norm_chunked``  RMSNorm of rows too long for the UB, in chunks (lab 07's challenge)
====================  ==========================================================================

The labs' scaffolds that run a learner's code (the K loop of lab 05, the epilogue of lab 08)
and the kernels written wrong on purpose (lab 02's racy Add) are exercise material and stay in
:mod:`npulab.labs`.
"""
from __future__ import annotations

from .img2col import img2col_on_npu
from .rms_norm_chunked import KernelRmsNormChunked, chunk_tiling, chunk_ub_bytes, launch_rms_norm_chunked
from .row_scale import KernelRowScale, RowScaleTiling, launch_row_scale, row_bytes, row_demand
from .silu import (SiluDouble, SiluSingle, SiluStages, SiluTiling, launch_silu, silu_kernel, silu_tiling,
                   ub_tile)

__all__ = ["img2col_on_npu", "KernelRowScale", "RowScaleTiling", "launch_row_scale", "row_bytes",
           "row_demand", "KernelRmsNormChunked", "chunk_tiling", "chunk_ub_bytes", "launch_rms_norm_chunked",
           "SiluStages", "SiluSingle", "SiluDouble", "SiluTiling", "silu_kernel",
           "silu_tiling", "launch_silu", "ub_tile"]
