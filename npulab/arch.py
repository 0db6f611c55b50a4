"""Facts of the DaVinci AI core that every layer shares, written down once.

The chip files (:mod:`npulab.chips`) hold what differs from chip to chip: core counts, clocks,
buffer sizes, bandwidths. What is the same on every Ascend chip npulab models is here:

* **data movement**: every DMA moves whole 32-byte blocks (:data:`BLOCK_BYTES`), and UB and L1
  addresses are multiples of one (data/FACTS.md, "Alignment");
* **fractals**: the cube reads 16-row fractals (:data:`FRACTAL_ROWS`) of 32 bytes a row, so a
  fractal row holds :func:`c0_of` elements: 16 fp16, 32 int8, 8 fp32 (data/FACTS.md, "Data
  formats");
* **the cube**: the operand dtypes it takes (:data:`CUBE_DTYPES`), what L0C accumulates each in
  (:data:`ACC_DTYPE`), a matmul's output dtype (:data:`OUT_DTYPE`), the largest m, n, k of one
  ``mmad`` (:data:`MAX_MNK`, Mmad.md);
* **the vector kernels' float dtypes** (:data:`VECTOR_DTYPES`);
* **the on-chip buffers** of an AI core, in the order the views draw them (:data:`BUFFERS`);
* **the chip** every function uses when none is named (:data:`DEFAULT_CHIP`);
* the integer arithmetic of tiling: :func:`ceil_div` and :func:`round_up`.
"""
from __future__ import annotations

import numpy as np

from .errors import ShapeError

#: bytes: the unit every DMA moves; UB and L1 tensors start on one
BLOCK_BYTES = 32
#: rows of a fractal (and columns of the 16 x 16 accumulator fractal in L0C)
FRACTAL_ROWS = 16
#: bytes of one 16 x C0 fractal (16 rows of 32 bytes)
FRACTAL_BYTES = FRACTAL_ROWS * BLOCK_BYTES
#: Mmad.md: m, n and k of one mmad are at most 4095
MAX_MNK = 4095

F16, F32, I8, I32 = (np.dtype(t) for t in (np.float16, np.float32, np.int8, np.int32))

#: operand dtypes of the cube (matmul and convolution kernels)
CUBE_DTYPES = (F16, F32, I8)
#: what L0C accumulates each cube dtype in (Mmad.md: fp32 for fp16 and fp32, int32 for int8)
ACC_DTYPE = {F16: F32, F32: F32, I8: I32}
#: a matmul's output dtype for each operand dtype (int8 keeps the exact int32 accumulator)
OUT_DTYPE = {F16: F16, F32: F32, I8: I32}
#: input dtypes of the float vector kernels (norms, activations, softmax, pooling, Add)
VECTOR_DTYPES = (F16, F32)

#: the on-chip buffers of one AI core, in the order the views draw them (the chip files name
#: their sizes in lower case: ``[buffers] l1 = ...``)
BUFFERS = ("L1", "L0A", "L0B", "L0C", "UB")

#: the chip a function runs on when the caller names none
DEFAULT_CHIP = "910"


def c0_of(dtype) -> int:
    """Elements in one 32-byte fractal row: K0 / C0 of the fractal (16 fp16, 32 int8, 8 fp32).
    Raises ShapeError for a dtype that is not 1, 2 or 4 bytes wide."""
    item = np.dtype(dtype).itemsize
    if item not in (1, 2, 4):
        raise ShapeError(f"fractal formats hold 1-, 2- or 4-byte elements, got {np.dtype(dtype)}")
    return BLOCK_BYTES // item


def ceil_div(a, b):
    """ceil(a / b) for a >= 0, b > 0, in integer arithmetic (floats give the float ceiling)."""
    return -(-a // b)


def round_up(a, b):
    """``a`` rounded up to a multiple of ``b``."""
    return -(-a // b) * b


__all__ = ["BLOCK_BYTES", "FRACTAL_ROWS", "FRACTAL_BYTES", "MAX_MNK", "F16", "F32", "I8", "I32",
           "CUBE_DTYPES", "ACC_DTYPE", "OUT_DTYPE", "VECTOR_DTYPES", "BUFFERS", "DEFAULT_CHIP",
           "c0_of", "ceil_div", "round_up"]
