"""The convolution family on the cube (Conv2d/Conv3d through img2col, ConvTranspose2d, grouped
and depthwise, a per-channel epilogue in FixPipe or on the vector unit), one concept a module:

* :mod:`~.problem`: :class:`ConvProblem` and :func:`make_problem`, the user's convolution checked
  once (catlass Arguments), with group enlargement, the C04 format and the strided read;
* :mod:`~.geometry`: the slab of input pixels each M tile reads, and the copies that load it;
* :mod:`~.schedule`: which block computes which block tile (cyclic or teams);
* :mod:`~.tiling`: :class:`ConvTiles` and :class:`ConvTiling` (catlass Params), the buffer
  demand and ``can_implement``;
* :mod:`~.layouts`: NCDHW <-> the kernel's GM layouts (NC1HWC0, FRACTAL_Z);
* :mod:`~.kernel`: the kernel (block conv-mmad, epilogue) and its launch;
* :mod:`~.search`: the family of the one tiling search, and the default tiling function.
"""
from .geometry import map_copies, map_rows_to_load, max_slab, slab_boxes, tile_boxes
from .kernel import (BlockConvEpilogue, BlockConvMmad, block_epilogue, conv_kernel, launch_conv, launch_conv_packed,
                     simulate)
from .layouts import pack_input, pack_vector, pack_weight, unpack_output
from .problem import C04, ConvProblem, conv_output_size, enlarge, make_problem, strided_read, use_c04
from .schedule import block_work, busiest_block, member_rows, slab_elems, team_rows
from .search import CONV, candidates, default_tiling, estimate_cycles
from .tiling import (EPI_SLOTS, ConvTiles, ConvTiling, buffer_demand, can_implement, epilogue_of, problems, tiled,
                     ub_plan_of)

__all__ = ["ConvProblem", "make_problem", "conv_output_size", "use_c04", "enlarge", "strided_read", "C04",
           "tile_boxes", "slab_boxes", "max_slab", "map_copies", "map_rows_to_load", "team_rows",
           "block_work", "member_rows", "busiest_block", "slab_elems", "ConvTiles", "ConvTiling", "tiled",
           "EPI_SLOTS", "buffer_demand", "epilogue_of", "ub_plan_of", "problems", "can_implement", "pack_input", "pack_weight",
           "pack_vector", "unpack_output", "BlockConvMmad", "BlockConvEpilogue", "block_epilogue", "conv_kernel",
           "launch_conv_packed", "launch_conv", "simulate", "CONV", "candidates", "default_tiling",
           "estimate_cycles"]
