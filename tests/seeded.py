"""Seeded test inputs: the same values on every run, other values for every case (each case
names its draw with a key, which seeds the generator)."""
from __future__ import annotations

import zlib

import numpy as np


def _rng(key: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(key.encode()))


def rand(shape, dtype, key: str, scale: float = 1.0) -> np.ndarray:
    """Values of ``dtype``: normal x ``scale`` for floats, all of -128..127 for int8, and
    -3000..2999 for int32 (an int8 op's bias, added in the int32 accumulator)."""
    dt = np.dtype(dtype)
    if dt == np.int8:
        return _rng(key).integers(-128, 128, size=shape).astype(np.int8)
    if dt == np.int32:
        return _rng(key).integers(-3000, 3000, size=shape).astype(np.int32)
    return (_rng(key).standard_normal(shape) * scale).astype(dt)


def bias_for(n: int, dtype, key: str) -> np.ndarray:
    """A bias for an op on ``dtype`` inputs: int32 for int8 ones, else ``dtype``."""
    return rand(n, np.int32 if np.dtype(dtype) == np.int8 else dtype, key)


def positive(shape, dtype, key: str) -> np.ndarray:
    """Values in 0.5 .. 2 (variances)."""
    return _rng(key).uniform(0.5, 2.0, shape).astype(dtype)
