"""Teaching kernels, complete and runnable, that the labs run beside the package's operators (as
ops-nn keeps ``examples/add_example`` beside its operator folders): each is smaller than the real
operator so that one idea stands out, and its docstring says which lab uses it and what it
leaves out.

=============  ==========================================================================
module         kernel
=============  ==========================================================================
``row_scale``  z[r, :] = x[r, :] * gamma over whole rows (lab 03: a 2-D tiling)
``silu``       SiLU single and double buffered (lab 04: queue slots and overlap)
``img2col``    load_3d run over an index map, L0A read back (lab 06: img2col arithmetic)
``gm_copy``    y = x GM to GM through the UB, a plan of cores and copy size (lab 00's challenge)
``poly``       y = p(x) with the Compute stage passed in (lab 01's challenge: passes a tile)
=============  ==========================================================================

The labs' scaffolds that run a learner's code (the K loop of lab 05, the epilogue of lab 08)
and the kernels written wrong on purpose (lab 02's racy Add) are exercise material and stay in
:mod:`npulab.labs`.
"""
from __future__ import annotations

from .img2col import img2col_on_npu
from .row_scale import KernelRowScale, RowScaleTiling, launch_row_scale, row_bytes, row_demand
from .silu import (SiluDouble, SiluSingle, SiluStages, SiluTiling, launch_silu, silu_kernel, silu_tiling,
                   ub_tile)

__all__ = ["img2col_on_npu", "KernelRowScale", "RowScaleTiling", "launch_row_scale", "row_bytes",
           "row_demand", "SiluStages", "SiluSingle", "SiluDouble", "SiluTiling", "silu_kernel",
           "silu_tiling", "launch_silu", "ub_tile"]
