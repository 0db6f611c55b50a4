"""Matmul + GELU as one mix kernel on a split chip (ops-nn FusedMatMul; catlass MatmulEpilogue on
Atlas A2), in three modules as ops-nn splits an operator:

* :mod:`~.problem`: :class:`FusedMatmulProblem`, what the user asks for;
* :mod:`~.tiling`: the cube's tiles (the matmul's tiling function), the GM workspace, the AIVs'
  UB chunks, ``can_implement``;
* :mod:`~.kernel`: the kernel (AIC part, AIV part, the cross-core flags between them) and its
  launch.
"""
from .kernel import AIC_DONE, AIV_DONE, fused_matmul_kernel, launch_fused_matmul
from .problem import FUSED_OP_TYPES, FusedMatmulProblem
from .tiling import WS_SLOTS, FusedMatmulTiling, can_implement, make_fused_tiling

__all__ = ["FusedMatmulProblem", "FUSED_OP_TYPES", "FusedMatmulTiling", "WS_SLOTS", "can_implement",
           "make_fused_tiling", "AIC_DONE", "AIV_DONE", "fused_matmul_kernel", "launch_fused_matmul"]
