"""The matmul problem, as the user states it (catlass's Arguments): C (batch, M, N) = op(A) x
op(B) (+ bias) (ReLU), op(X) = X transposed when ``trans_x``. Checked once, when made; the
tiling (:mod:`npulab.kernels.matmul.tiling`) is derived from it and never copies its fields.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...arch import CUBE_DTYPES, OUT_DTYPE
from ...errors import ShapeError
from ..tiling_data import CubeProblem


@dataclass(frozen=True)
class MatmulProblem(CubeProblem):
    """batch matrices C = op(A) (M, K) x op(B) (K, N) of one dtype (float16, float32 or int8)."""
    batch: int
    m: int
    n: int
    k: int
    dtype: str
    trans_a: bool = False       # A is stored (K, M)
    trans_b: bool = False       # B is stored (N, K)
    has_bias: bool = False      # + bias (N values of the accumulator dtype) in FixPipe
    relu: bool = False          # ReLU in FixPipe, after the bias

    def __post_init__(self):
        dt = np.dtype(self.dtype)
        if dt not in CUBE_DTYPES:
            raise ShapeError(f"matmul: dtype {dt} is not supported; expected float16, float32 or int8")
        for name in ("batch", "m", "n", "k"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)) or v < 1:
                label = name if name == "batch" else name.upper()
                raise ShapeError(f"matmul: {label}={v!r} must be a positive integer")
            object.__setattr__(self, name, int(v))
        object.__setattr__(self, "dtype", dt.name)
        for name in ("trans_a", "trans_b", "has_bias", "relu"):
            object.__setattr__(self, name, bool(getattr(self, name)))

    @classmethod
    def of(cls, shape, dtype, **flags) -> "MatmulProblem":
        """From ``shape`` = (M, N, K) or (batch, M, N, K)."""
        shape = tuple(shape)
        if len(shape) == 3:
            shape = (1,) + shape
        if len(shape) != 4:
            raise ShapeError(f"matmul: shape must be (M, N, K) or (batch, M, N, K), got {shape!r}")
        return cls(*shape, dtype, **flags)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.m, self.n, self.k)

    gemm_shape = shape

    @property
    def out_dtype(self) -> np.dtype:
        return OUT_DTYPE[self.np_dtype]

    @property
    def macs(self) -> int:
        return self.batch * self.m * self.n * self.k

    def key(self) -> str:
        """The problem in a tiling-cache key: ``batch x M x N x K | dtype``. A tiling of the GEMM
        serves every epilogue and layout of it (the flags change what FixPipe does on the way
        out, not the tiles)."""
        return f"{self.batch}x{self.m}x{self.n}x{self.k}|{self.dtype}"


__all__ = ["MatmulProblem"]
