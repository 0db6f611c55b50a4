"""The fused matmul problem (ops-nn's FusedMatMul, catlass's MatmulEpilogue): y = OP(x1 @ x2 +
bias), OP a vector activation the cube's FixPipe cannot apply, as the user states it. Checked
once, when made; the tiling (:mod:`.tiling`) is derived from it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import ShapeError
from ..matmul import MatmulProblem

#: what the AIVs apply after the matmul (ops-nn FusedMatMul's fusedOpType values for GELU)
FUSED_OP_TYPES = {"gelu_erf": "gelu_erf", "gelu_tanh": "gelu_tanh"}


@dataclass(frozen=True)
class FusedMatmulProblem:
    """y (M, N) float16 = OP(A (M, K) @ B (K, N) (+ bias (N,) in fp32)), A, B float16."""
    m: int
    n: int
    k: int
    fused_op_type: str = "gelu_erf"
    has_bias: bool = False
    dtype: str = "float16"

    def __post_init__(self):
        if self.fused_op_type not in FUSED_OP_TYPES:
            raise ShapeError(f"fused_matmul: fused_op_type must be one of {sorted(FUSED_OP_TYPES)}, got "
                             f"{self.fused_op_type!r}")
        if np.dtype(self.dtype) != np.float16:
            raise ShapeError(f"fused_matmul: {self.fused_op_type} fuses float16 inputs (ops-nn's FusedMatMul "
                             f"takes gelu with float16 or bfloat16 only), got {np.dtype(self.dtype)}")
        object.__setattr__(self, "dtype", "float16")
        object.__setattr__(self, "has_bias", bool(self.has_bias))
        self.matmul                          # the shape checks of the matmul itself

    @property
    def matmul(self) -> MatmulProblem:
        """The cube's part: C = A @ B (+ bias), drained by FixPipe to the workspace in fp16."""
        return MatmulProblem(1, self.m, self.n, self.k, self.dtype, has_bias=self.has_bias)

    @property
    def activation(self) -> str:
        """The vector formula the AIVs run (kernels.activation)."""
        return FUSED_OP_TYPES[self.fused_op_type]

    @property
    def macs(self) -> int:
        return self.m * self.n * self.k


__all__ = ["FUSED_OP_TYPES", "FusedMatmulProblem"]
