"""L0C's numerics: the mmads into one accumulating tile, kept as a chain and multiplied out when
something reads the tile.

:func:`npulab.lang.cube.mmad` copies its operands out of L0A/L0B at once (the next load
overwrites them), unpacked and widened, into the chain of the L0C tile it writes
(:func:`mmad_numerics`); :func:`flush_l0c` multiplies the chain out as one float32 product
(float64 for int8, then int32: exact) into the tile's bytes. So a K loop of n mmads costs one
BLAS call instead of n, and the result is the same fp32 (int32) accumulation. Anything that
reads the tile (FixPipe, a ``LocalTensor.numpy()`` view, via the buffer's ``pending_flush``)
flushes it first, so no one ever sees stale bytes. Timing is not here: the instruction mmad
issues carries it.
"""
from __future__ import annotations

import threading

import numpy as np

from .. import formats as F
from ..arch import FRACTAL_ROWS

_F16, _I8 = np.dtype(np.float16), np.dtype(np.int8)


# the host-side scratch of flushed chains, by geometry, for the next chain to reuse (not NPU
# memory: numpy arrays the simulator multiplies in)
_CHAIN_STORE: dict = {}


class _Chain:
    """mmads into one L0C tile not yet multiplied out: their operands, unpacked to ND and
    widened, side by side along K.

    Numerics are deferred so that a K loop of n mmads costs one large matmul instead of n
    small ones (BLAS is far faster on one big product); the result is the same fp32 (int32)
    accumulation. Each mmad copies its operands out of L0A/L0B at once (the next load
    overwrites them): A into the next columns of ``a`` (m16 x K), B into the next rows of ``b``
    (K x n16), both in the wide dtype; the product is ``a @ b``."""

    __slots__ = ("lo", "hi", "m1", "n1", "init", "a", "b", "used", "product_into")

    def __init__(self, lo, hi, m1, n1, init, wide, k, store, product_into):
        self.lo, self.hi, self.m1, self.n1, self.init = lo, hi, m1, n1, init
        self.product_into = product_into   # the launch's (formats.worker): how a @ b is multiplied
        # reuse the arrays of a flushed chain of the same geometry (its K capacity included)
        old = store.pop((m1, n1, wide), None)
        if old is None:
            cap = max(4 * k, 256)
            old = (np.empty((m1 * FRACTAL_ROWS, cap), dtype=wide), np.empty((cap, n1 * FRACTAL_ROWS), dtype=wide))
        self.a, self.b = old
        self.used = 0

    def room(self, k: int) -> int:
        """Make room for k more columns; return the first free one."""
        u = self.used
        if u + k > self.a.shape[1]:
            if F.PENDING:                  # queued moves may still be writing the old arrays
                F.sync()
            cap = max(2 * self.a.shape[1], u + k)
            a = np.empty((self.a.shape[0], cap), dtype=self.a.dtype)
            a[:, :u] = self.a[:, :u]
            b = np.empty((cap, self.b.shape[1]), dtype=self.b.dtype)
            b[:u] = self.b[:u]
            self.a, self.b = a, b
        self.used = u + k
        return u


def _chains(buffer) -> dict:
    chains = getattr(buffer, "_mmad_chains", None)
    if chains is None:
        chains = buffer._mmad_chains = {}
        buffer.pending_flush = lambda lo=0, hi=None: flush_l0c(buffer, lo, hi)
    return chains


_SCRATCH = threading.local()               # per host thread: (m, n) float32 arrays for products


def _product(a, b, product_into):
    """a @ b: float32 chains through ``product_into`` (formats.worker; the Cython worker takes
    half the rows)."""
    if a.dtype != np.float32:
        if F.PENDING:                      # the chain's widening moves may still be queued
            F.sync()
        return a @ b
    shape = (a.shape[0], b.shape[1])
    scratch = getattr(_SCRATCH, "products", None)
    if scratch is None:
        scratch = _SCRATCH.products = {}
    out = scratch.get(shape)
    if out is None:
        out = scratch[shape] = np.empty(shape, dtype=np.float32)
    return product_into(a, b, out)


def flush_l0c(buffer, lo: int = 0, hi: int | None = None) -> None:
    """Multiply out every deferred mmad chain in ``buffer`` (L0C) that overlaps bytes [lo, hi)."""
    chains = getattr(buffer, "_mmad_chains", None)
    if not chains:
        return
    hi = buffer.capacity if hi is None else hi
    for key in [k for k, c in chains.items() if c.lo < hi and lo < c.hi]:
        c = chains.pop(key)
        u = c.used
        prod = _product(c.a[:, :u], c.b[:u], c.product_into)
        _CHAIN_STORE[(c.m1, c.n1, c.a.dtype.type)] = (c.a, c.b)
        exact_int = c.a.dtype == np.float64
        n1, m16 = c.n1, c.m1 * FRACTAL_ROWS
        view = buffer.data[c.lo:c.hi].view(np.int32 if exact_int else np.float32)
        out = view.reshape(n1, m16, FRACTAL_ROWS)
        src = prod.reshape(m16, n1, FRACTAL_ROWS).transpose(1, 0, 2)
        if c.init:
            np.copyto(out, src, casting="unsafe")
        elif exact_int:
            out += src.astype(np.int32)
        else:
            out += src


def mmad_numerics(moves, dst, a, b, m1, n1, k1, k0, k, init, acc):
    """Copy A (ZZ) and B (ZN) out of L0A/L0B, unpacked and widened, into the L0C tile's chain;
    a new chain starts on ``init`` or when the tile's geometry changes. ``moves``: the launch's
    (formats.Moves)."""
    buf = dst.buffer
    chains = _chains(buf)
    lo, hi = dst.offset, dst.offset + m1 * n1 * FRACTAL_ROWS * FRACTAL_ROWS * 4
    chain = chains.get(lo)
    dt = a.dtype
    if init or chain is None or chain.hi != hi or chain.m1 != m1:
        if init and chain is not None and chain.hi <= hi:
            del chains[lo]                 # wholly overwritten: never needs multiplying out
        flush_l0c(buf, lo, hi)             # whatever else overlaps lands first
        chain = chains[lo] = _Chain(lo, hi, m1, n1, init, np.float64 if dt == _I8 else np.float32, k,
                                    _CHAIN_STORE, moves.worker.product_into)
    u = chain.room(k)
    if dt == _F16:                         # the hot case: one widening pass each (formats.drains)
        unpack = moves.drains.unpack_f16_buffer
        unpack(a.buffer.array(), a.offset, chain.a, 0, m1 * FRACTAL_ROWS, u, k, FRACTAL_ROWS, k0, False, False)
        # ZN: (K1, N1) fractals in row-major order, each K0 x 16 stored column by column
        unpack(b.buffer.array(), b.offset, chain.b, u, k, 0, n1 * FRACTAL_ROWS, k0, FRACTAL_ROWS, False, True)
    else:
        az = a.numpy()[:m1 * k1 * FRACTAL_ROWS * k0]
        bz = b.numpy()[:k1 * n1 * FRACTAL_ROWS * k0]
        av = az.reshape(m1, k1, FRACTAL_ROWS, k0).transpose(0, 2, 1, 3).reshape(m1 * FRACTAL_ROWS, k1 * k0)
        bv = bz.reshape(k1, n1, FRACTAL_ROWS, k0).transpose(0, 3, 1, 2).reshape(k1 * k0, n1 * FRACTAL_ROWS)
        np.copyto(chain.a[:, u:u + k], av[:, :k], casting="unsafe")
        np.copyto(chain.b[u:u + k], bv[:k], casting="unsafe")


__all__ = ["mmad_numerics", "flush_l0c"]
