"""Deferred moves, the readable twin of ``npulab._worker``: here nothing is deferred.

In the Cython twin, a functional launch runs the cube path's byte moves (npulab._layouts,
npulab._drains), the zeroing of buffers given back to the pool and half of each mmad product
on a worker thread, in the order they were issued, while Python goes on issuing; whatever reads
those bytes waits for them first (``sync``). The meaning is what this module does: every move
runs at once, in program order, so

* ``PENDING`` is always empty and ``sync()`` has nothing to wait for;
* ``deferred_moves()`` changes nothing and ``deferring()`` is False;
* ``product_into`` is numpy's matmul of the whole (the Cython twin may split it in two halves
  of rows, which agree to float32 rounding).

Same names and signatures as the Cython twin; :mod:`npulab.twins` says which one a launch uses,
and tests/formats/test_worker.py holds a deferred launch to an immediate one.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError

#: the arrays queued moves touch: always empty (nothing is ever queued here)
PENDING: list = []


def sync() -> None:
    """Wait until every queued move has run: none ever is."""


class deferred_moves:
    """``with deferred_moves():``: the block whose moves the Cython twin defers; here they run
    at once."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def deferring() -> bool:
    """True inside ``deferred_moves()`` when moves are deferred: never, here."""
    return False


def queued() -> int:
    """How many moves were queued for a worker so far: none."""
    return 0


def product_into(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out[...] = a @ b`` for float32 matrices (out C-contiguous): numpy's matmul."""
    if a.dtype != np.float32 or b.dtype != np.float32 or out.dtype != np.float32 or a.ndim != 2 \
            or b.ndim != 2 or out.ndim != 2 or a.shape[1] != b.shape[0] or out.shape[0] != a.shape[0] \
            or out.shape[1] != b.shape[1] or not out.flags.c_contiguous:
        raise ShapeError("product_into: expected float32 (m, k) @ (k, n) into a C-contiguous (m, n)")
    np.matmul(a, b, out=out)
    return out


def zero_bytes(buf: np.ndarray, n: int) -> None:
    """``buf[:n] = 0`` for a C-contiguous uint8 array (a buffer given back to the pool)."""
    if buf.dtype != np.uint8 or not buf.flags.c_contiguous or n < 0 or n > buf.shape[0]:
        raise ShapeError(f"zero_bytes: {n} bytes of a {buf.dtype} array of {buf.shape[0]}")
    buf[:n] = 0


__all__ = ["PENDING", "sync", "deferred_moves", "deferring", "queued", "product_into", "zero_bytes"]
