"""The race checker: do two pipes touch the same bytes without an order between them?

Happens-before on one core comes from three things, as on the hardware:
program order within a pipe; the scalar unit, which finishes each scalar instruction before it
issues the next instruction of any pipe; and flags (a wait joins what its set had seen).
Each pipe keeps a vector clock; an access remembers (pipe, epoch); an earlier access j is
ordered before a later access i exactly when ``epoch_j <= clock_i[pipe_j]``.
Instructions are replayed in the scheduler's ``order``, which respects every dependency.
"""
from __future__ import annotations

from .isa import NUM_PIPES, Kind, Pipe

S, SET, WAIT, BARRIER_ALL = int(Pipe.S), int(Kind.SET), int(Kind.WAIT), int(Kind.BARRIER_ALL)
PAGE = 4096


def _join(a, b):
    return [x if x >= y else y for x, y in zip(a, b)]


def find_race(pipe, kind, match, order, accesses):
    """Return the first race as ``(j, i, buffer, lo, hi)`` (j earlier), or None.

    accesses: {instruction index: [(buffer name, lo, hi, is_write), ...]}, byte ranges [lo, hi).
    """
    n = len(pipe)
    # scalar clock a non-scalar instruction inherits at issue: the last S/barrier before it
    last_s = [-1] * n
    prev = -1
    for i in range(n):
        last_s[i] = prev
        if pipe[i] == S or kind[i] == BARRIER_ALL:
            prev = i
    clock_of = {}                                   # clocks of S, SET and barrier instructions
    pipe_clock = [[0] * NUM_PIPES for _ in range(NUM_PIPES)]
    shadow: dict[tuple, list] = {}                  # (buffer, page) -> [(j, pipe, epoch, lo, hi, w)]
    for i in order:
        i = int(i)
        k = kind[i]
        p = S if k == BARRIER_ALL else pipe[i]
        vc = pipe_clock[p]
        if k == BARRIER_ALL:
            for q in range(NUM_PIPES):
                vc = _join(vc, pipe_clock[q])
        if p != S and last_s[i] >= 0:
            vc = _join(vc, clock_of[last_s[i]])
        if k == WAIT and match[i] >= 0:
            vc = _join(vc, clock_of[int(match[i])])
        vc = list(vc)
        vc[p] += 1
        pipe_clock[p] = vc
        if p == S or k == SET or k == BARRIER_ALL:
            clock_of[i] = vc
        for buf, lo, hi, write in accesses.get(i, ()):
            seen = set()
            for page in range(lo // PAGE, (hi - 1) // PAGE + 1):
                entries = shadow.setdefault((buf, page), [])
                keep = []
                for e in entries:
                    j, pj, ej, elo, ehi, ew = e
                    if elo < hi and lo < ehi:
                        ordered = ej <= vc[pj]
                        if (write or ew) and pj != p and not ordered and j not in seen:
                            return j, i, buf, max(lo, elo), min(hi, ehi)
                        seen.add(j)
                        if ordered and lo <= elo and ehi <= hi and (write or (not ew and pj == p)):
                            continue                # superseded by this access
                    keep.append(e)
                keep.append((i, p, vc[p], lo, hi, write))
                shadow[(buf, page)] = keep
    return None


def find_block_race(accesses, block_of):
    """The first pair of GM accesses of *different* blocks of one launch that overlap, at least
    one of them a write, or None. The blocks of a launch run at the same time on different
    cores with no order between them (the simulator may run two on one core one after the
    other; a kernel cannot count on that), so such a pair is a race whatever the schedule.

    accesses: iterable of (buffer, lo, hi, is_write, core, instruction), byte ranges [lo, hi)
    of GM (GmTraffic.block_accesses); block_of(core, instruction): the block that issued it.
    Returns ``((core, block, instruction, is_write) of the lower block, (...) of the other,
    buffer, lo, hi)``.
    """
    by_buf: dict[str, list] = {}
    for buf, lo, hi, write, core, i in accesses:
        if hi > lo:
            by_buf.setdefault(buf, []).append((lo, hi, block_of(core, i), bool(write), core, i))
    for buf in sorted(by_buf):
        items = by_buf[buf]
        if not any(it[3] for it in items) or len({it[2] for it in items}) < 2:
            continue
        items.sort()
        # sweep by start; of the intervals still open keep, per (block, is_write), the one that
        # reaches furthest: any earlier interval overlapping this one, that one overlaps too
        live: dict[tuple, tuple] = {}
        for lo, hi, block, write, core, i in items:
            for (b, w), (ohi, olo, ocore, oi) in list(live.items()):
                if ohi <= lo:
                    del live[(b, w)]
                elif b != block and (w or write):
                    a, c = sorted([(b, ocore, oi, w), (block, core, i, write)])
                    return ((a[1], a[0], a[2], a[3]), (c[1], c[0], c[2], c[3]), buf,
                            max(lo, olo), min(hi, ohi))
            if live.get((block, write), (-1,))[0] < hi:
                live[(block, write)] = (hi, lo, core, i)
    return None
