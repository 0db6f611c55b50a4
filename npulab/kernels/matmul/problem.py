"""The matmul problem, as the user states it (catlass's Arguments): C (batch, M, N) = op(A) x
op(B) (+ bias) (ReLU), op(X) = X transposed when ``trans_x``. Checked once, when made; the
tiling (:mod:`npulab.kernels.matmul.tiling`) is derived from it and never copies its fields.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...arch import ACC_DTYPE, CUBE_DTYPES, OUT_DTYPE
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
    c_dtype: str | None = None  # C's dtype: None is the input's (int32 for int8); the accumulator's
                                # (float32 from float16) writes L0C out unconverted, as pto-isa's GEMM

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
        if self.c_dtype is not None:
            allowed = {OUT_DTYPE[dt].name, ACC_DTYPE[dt].name}
            try:
                c = np.dtype(self.c_dtype).name
            except TypeError:
                c = repr(self.c_dtype)
            if c not in allowed:
                raise ShapeError(f"matmul: C of {c} from {dt.name} inputs is not possible; expected one of "
                                 f"{', '.join(sorted(allowed))}")
            object.__setattr__(self, "c_dtype", None if c == OUT_DTYPE[dt].name else c)

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
        return np.dtype(self.c_dtype) if self.c_dtype else OUT_DTYPE[self.np_dtype]

    @property
    def macs(self) -> int:
        return self.batch * self.m * self.n * self.k

    def key(self) -> str:
        """The problem in a tiling-cache key: ``batch x M x N x K | dtype`` (``-> C's dtype`` when
        it is the accumulator's). A tiling of the GEMM serves every epilogue and layout of it
        (the flags change what FixPipe does on the way out, not the tiles); a wider C doubles
        the bytes written, which can change the best tiles."""
        out = f"->{self.c_dtype}" if self.c_dtype else ""
        return f"{self.batch}x{self.m}x{self.n}x{self.k}|{self.dtype}{out}"


__all__ = ["MatmulProblem"]
