"""The matmul family on the cube (MatMul, BatchMatMul, MatMul+BiasAdd(+ReLU), int8), in four
modules as ops-nn splits an operator and catlass a template:

* :mod:`~.problem`: :class:`MatmulProblem`, what the user asks for (catlass Arguments);
* :mod:`~.tiling`: :class:`MatmulTiles` and :class:`MatmulTiling` (catlass Params), the buffer
  demand, ``can_implement``, the block swizzle, named recipes and the default tiling function;
* :mod:`~.kernel`: the kernel (block scheduler, block mmad, epilogue) and its launch;
* :mod:`~.search`: the family of the one tiling search (candidates and estimate).
"""
from .kernel import (BlockEpilogue, BlockMmad, BlockScheduler, block_epilogue, launch_matmul, matmul_kernel,
                     simulate)
from .problem import MatmulProblem
from .search import MATMUL, candidates, estimate_cycles
from .tiling import (BIAS_SLOTS, TILINGS, MatmulTiles, MatmulTiling, best_swizzle, buffer_demand,
                     can_implement, default_tiling, epilogue_of, make_tiling, problems, swizzle_coord,
                     ub_plan_of, wave_bytes)

__all__ = ["MatmulProblem", "MatmulTiles", "MatmulTiling", "TILINGS", "BIAS_SLOTS", "buffer_demand",
           "problems", "can_implement", "make_tiling", "epilogue_of", "ub_plan_of", "swizzle_coord", "wave_bytes",
           "best_swizzle", "default_tiling", "BlockScheduler", "BlockMmad", "BlockEpilogue", "block_epilogue",
           "matmul_kernel", "launch_matmul", "simulate", "MATMUL", "candidates", "estimate_cycles"]
