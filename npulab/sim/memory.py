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


@dataclass
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


class Buffer:
    """One physical buffer (UB, L1, L0A, L0B or L0C) of one core."""

    def __init__(self, name: str, core: int, capacity: int, align: int, functional: bool):
        self.name, self.core, self.capacity, self.align = name, core, capacity, align
        self.data = np.zeros(capacity, dtype=np.uint8) if functional else None
        self.reservations: list[Reservation] = []
        self.log: list[AllocRecord] = []
        self.top = 0

    @property
    def used(self) -> int:
        return self.top

    def reserve(self, nbytes: int, owner: str) -> int:
        """Bump-allocate ``nbytes`` (rounded up to the buffer's alignment) for ``owner``."""
        if nbytes <= 0:
            raise BufferOverflowError(f"{owner}: asked for {nbytes} bytes of {self.name}; "
                                      f"a buffer needs a positive size")
        size = -(-nbytes // self.align) * self.align
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
