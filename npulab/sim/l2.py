"""The L2 replay over cache lines: which lines of each GM access L2 already held.

This is the readable twin of ``npulab._l2`` (the specification; :mod:`npulab.sim.gm` calls the
one its launch's side of :mod:`npulab.twins` names, and tests/sim/test_l2.py runs one body on
both). An access is the GM bytes one copy reads or writes, as rows: ``rows`` rows of ``row``
bytes, row ``r`` from byte ``lo + r * step`` of GM buffer ``buf`` (an integer id). L2 holds
``capacity_lines`` lines of ``line_bytes`` each, least recently used out first:

* a **read** looks up every line its rows touch (a line two rows share counts once): a line L2
  holds is a hit, whoever put it there, so a read that overlaps part of an earlier read's lines
  hits for those lines and misses for the rest; a miss fetches the whole line from HBM;
* a **write** allocates its lines too (write-back, write-allocate: the bytes stay in L2, dirty,
  and a later read of them hits). It fetches nothing: what it writes reaches HBM when the line
  is evicted, and :mod:`npulab.sim.gm` charges the write for its bytes at once;
* the HBM bytes of one fetch are shared by every read the line serves before it is evicted (the
  cores that read one tile at about the same time share one fetch), so a read is charged
  ``sum over its lines of fetched bytes / reads that line served``.

A line's key is ``buf << 44 | line index``: one GM buffer's lines never meet another's.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

#: bits of a line index in a line's key (the buffer id above them)
LINE_BITS = 44


def replay(buf, lo, row, step, rows, is_write, line_bytes: int, capacity_lines: int):
    """Replay the accesses in the order given (equal-length integer sequences; ``is_write``
    0 or 1). Returns ``(hbm, hits, misses)``: float64 HBM bytes each read is charged (0 for a
    write), int64 lines each access found in L2, int64 lines it did not."""
    n = len(buf)
    lru: OrderedDict = OrderedDict()     # line key -> fetch id, least recently used first
    fetched: list[int] = []              # bytes each fetch brought from HBM (0: a write's line)
    readers: list[int] = []              # reads each fetch served
    touched: list[list[int]] = [[] for _ in range(n)]     # the fetch of every line a read used
    hits = np.zeros(n, np.int64)
    misses = np.zeros(n, np.int64)
    for a in range(n):
        write = bool(is_write[a])
        base = int(buf[a]) << LINE_BITS
        last = -1                        # the last line this access has looked up
        for r in range(int(rows[a]) if row[a] > 0 else 0):
            start = int(lo[a]) + r * int(step[a])
            first, end = start // line_bytes, (start + int(row[a]) - 1) // line_bytes
            for line in range(max(first, last + 1), end + 1):
                key = base | line
                f = lru.get(key)
                if f is not None:
                    lru.move_to_end(key)
                    hits[a] += 1
                else:
                    misses[a] += 1
                    f = len(fetched)
                    fetched.append(0 if write else line_bytes)
                    readers.append(0)
                    lru[key] = f
                    if len(lru) > capacity_lines:
                        lru.popitem(last=False)
                if not write:
                    readers[f] += 1
                    touched[a].append(f)
            last = max(last, end)
    hbm = np.zeros(n, np.float64)
    for a in range(n):
        h = 0.0
        for f in touched[a]:
            h += fetched[f] / readers[f]
        hbm[a] = h
    return hbm, hits, misses


__all__ = ["replay", "LINE_BITS"]
