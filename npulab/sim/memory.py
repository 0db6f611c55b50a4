"""On-chip buffers of one AI core, and the allocation log the occupancy views draw.

A :class:`Buffer` is a flat byte array (in functional mode) plus two records:

* ``reservations``: regions handed out by ``Pipe.init_buffer`` (a queue's slots or a TBuf),
  bump-allocated as TPipe does, released when the block ends;
* ``log``: one :class:`AllocRecord` per tensor lifetime inside those regions: taken by
  ``alloc_tensor`` and given back by ``free_tensor``. Its times are instruction indices of the
  core's stream; the Trace turns them into cycles after scheduling.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import AlignmentError, BufferOverflowError
from ..formats import PENDING as _PENDING, sync as _sync
from ..arch import round_up


@dataclass(slots=True)
class AllocRecord:
    """One tensor lifetime: live from instruction ``taken`` ends until ``released`` ends.
    ``released`` is -1 while the tensor is live (and stays -1 for a TBuf, live to the end)."""
    buffer: str
    owner: str
    offset: int
    size: int
    taken: int
    released: int = -1


@dataclass
class Reservation:
    owner: str
    offset: int
    size: int


def fmt_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'; exact bytes below 1 KiB."""
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}" if n == int(n) else f"{n:.1f} {unit}"
    raise AssertionError


# Functional-mode byte arrays, recycled from launch to launch: a fresh 1 MiB L1 per core per
# launch costs page faults on first touch that outweigh a small kernel's work. Every array in
# the pool is all zeros; a buffer gives its array back zeroed up to the highest byte it ever
# reserved (nothing writes past its reservations).
_POOL: dict[int, list[np.ndarray]] = {}
_POOL_KEEP = 64                     # arrays kept per capacity (one launch of the largest chip)


class Buffer:
    """One physical buffer (UB, L1, L0A, L0B or L0C) of one core. ``data`` (functional mode)
    is the flat byte array, zeros at the start of a launch, taken on first use."""

    def __init__(self, name: str, core: int, capacity: int, align: int, functional: bool):
        self.name, self.core, self.capacity, self.align = name, core, capacity, align
        self.functional = functional
        self._data = None
        self.reservations: list[Reservation] = []
        self.log: list[AllocRecord] = []
        self.top = 0
        self.high = 0                # highest byte ever reserved: the part of data written

    @property
    def data(self) -> np.ndarray | None:
        if _PENDING:                 # moves still queued for the worker (formats.sync)
            _sync()
        return self.array()

    def array(self) -> np.ndarray | None:
        """``data`` without waiting for queued moves: for the deferred moves themselves, which
        the worker runs in order."""
        d = self._data
        if d is None and self.functional:
            free = _POOL.get(self.capacity)
            d = self._data = free.pop() if free else np.zeros(self.capacity, dtype=np.uint8)
        return d

    def recycle(self, zero_bytes) -> None:
        """The launch is over: drop deferred work, zero what was used (with ``zero_bytes``, the
        launch's formats.worker's), give the array back. (A LocalTensor view kept past its
        launch no longer shows this core's bytes.)"""
        d = self._data
        if d is None:
            return
        self._data = None
        chains = getattr(self, "_mmad_chains", None)
        if chains:
            chains.clear()
        zero_bytes(d, self.high)     # queued behind the moves still writing d, when deferring
        self.high = 0
        free = _POOL.setdefault(self.capacity, [])
        if len(free) < _POOL_KEEP:
            free.append(d)

    @property
    def used(self) -> int:
        return self.top

    def reserve(self, nbytes: int, owner: str) -> int:
        """Bump-allocate ``nbytes`` (rounded up to the buffer's alignment) for ``owner``."""
        if nbytes <= 0:
            raise BufferOverflowError(f"{owner}: asked for {nbytes} bytes of {self.name}; "
                                      f"a buffer needs a positive size")
        size = round_up(nbytes, self.align)
        if self.top + size > self.capacity:
            holders = ", ".join(f"'{r.owner}' {fmt_bytes(r.size)}" for r in self.reservations) or "nobody"
            free = self.capacity - self.top
            raise BufferOverflowError(
                f"{self.name} overflow on core {self.core}: '{owner}' asks for {fmt_bytes(size)} "
                f"({size} B) but {self.name} holds {fmt_bytes(self.capacity)} ({self.capacity} B) "
                f"and only {fmt_bytes(free)} ({free} B) are free; the rest is held by {holders}. "
                f"Fix: use a smaller tile or fewer buffers (buffer_num).")
        offset = self.top
        self.top += size
        if self.top > self.high:
            self.high = self.top
        self.reservations.append(Reservation(owner, offset, size))
        return offset

    def check_aligned(self, offset: int, what: str) -> None:
        if offset % self.align:
            raise AlignmentError(
                f"{what}: address {offset} of {self.name} is not {self.align}-byte aligned; "
                f"{self.name} addresses must be multiples of {self.align} B (32-byte blocks). "
                f"Fix: start the slice at a multiple of {self.align} bytes.")

    def release_all(self) -> None:
        """The block ended: its TPipe and every region go away (the log stays)."""
        self.reservations.clear()
        self.top = 0
