"""The race checker: do two pipes touch the same bytes without an order between them?

Happens-before on one core comes from three things, as on the hardware:
program order within a pipe; the scalar unit, which finishes each scalar instruction before it
issues the next instruction of any pipe; and flags (a wait joins what its set had seen). Between
the AIC and AIV cores of a split chip, cross-core flags order GM accesses the same way: a cross
wait joins what the sets whose rise it took had seen (:func:`find_race_cores`).
Each pipe keeps a vector clock; an access remembers (pipe, epoch); an earlier access j is
ordered before a later access i exactly when ``epoch_j <= clock_i[pipe_j]``.
Instructions are replayed in the scheduler's ``order``, which respects every dependency.
"""
from __future__ import annotations

from .isa import NUM_PIPES, Kind, Pipe

S, SET, WAIT, BARRIER_ALL = int(Pipe.S), int(Kind.SET), int(Kind.WAIT), int(Kind.BARRIER_ALL)
CROSS_SET = int(Kind.CROSS_SET)
PAGE = 4096


def _join(a, b):
    return [x if x >= y else y for x, y in zip(a, b)]


def find_race(pipe, kind, match, order, accesses):
    """Return the first race as ``(j, i, buffer, lo, hi)`` (j earlier), or None.

    accesses: {instruction index: [(buffer name, lo, hi, is_write), ...]}, byte ranges [lo, hi).
    """
    race = find_race_cores([(pipe, kind, match, order, accesses)], {})
    return None if race is None else (race[0][1], race[1][1]) + race[2:]


def _merged(streams, joins):
    """Every core's scheduler ``order``, merged so that a cross wait comes after the sets its
    rise came from: (core, instruction) pairs (one core's order as it is)."""
    if len(streams) == 1:
        return [(0, int(i)) for i in streams[0][3]]
    heads = [0] * len(streams)
    done = set()
    out = []
    while True:
        moved = False
        for c, (_, _, _, order, _) in enumerate(streams):
            while heads[c] < len(order):
                i = int(order[heads[c]])
                if any(src not in done for src in joins.get((c, i), ())):
                    break
                done.add((c, i))
                out.append((c, i))
                heads[c] += 1
                moved = True
        if not moved:
            return out


def find_race_cores(streams, joins):
    """Races on the cores of one launch that cross-core flags connect: ``streams`` holds each
    core's (pipe, kind, match, order, accesses), ``joins`` {(core, cross wait): [(core, cross
    set), ...]} the sets whose rise each cross wait took. A cross wait joins what those sets had
    seen, as a wait joins its set on one core. GM ("GM:..." buffers) is shared by the cores;
    every other buffer is the core's own. Returns ``((core, j), (core, i), buffer, lo, hi)``,
    the earlier access first, or None."""
    ncores = len(streams)
    width = NUM_PIPES * ncores
    # an instruction's id over all the cores: its core's offset + its index
    off = [0] * ncores
    for c in range(1, ncores):
        off[c] = off[c - 1] + len(streams[c - 1][0])
    where_of = [0] * (off[-1] + len(streams[-1][0]))
    for c in range(ncores):
        where_of[off[c]:off[c] + len(streams[c][0])] = [c] * len(streams[c][0])
    xjoin = {off[c] + i: [off[s] + j for s, j in src] for (c, i), src in joins.items()}
    last_s = []
    for pipe, kind, _, _, _ in streams:
        # scalar clock a non-scalar instruction inherits at issue: the last S/barrier before it
        ls = [-1] * len(pipe)
        prev = -1
        for i in range(len(pipe)):
            ls[i] = prev
            if pipe[i] == S or kind[i] == BARRIER_ALL:
                prev = i
        last_s.append(ls)
    clock_of = {}                                   # clocks of S, SET, CROSS_SET, barriers (by id)
    pipe_clock = [[0] * width for _ in range(width)]
    shadow: dict[tuple, list] = {}                  # (buffer, page) -> [(id, pipe, epoch, lo, hi, w)]
    for c, i in _merged(streams, joins):
        pipe, kind, match, _, accesses = streams[c]
        k = kind[i]
        base, o = c * NUM_PIPES, off[c]
        p = base + (S if k == BARRIER_ALL else pipe[i])
        vc = pipe_clock[p]
        if k == BARRIER_ALL:
            for q in range(base, base + NUM_PIPES):
                vc = _join(vc, pipe_clock[q])
        if p != base + S and last_s[c][i] >= 0:
            vc = _join(vc, clock_of[o + last_s[c][i]])
        if k == WAIT and match[i] >= 0:
            vc = _join(vc, clock_of[o + int(match[i])])
        if xjoin:
            for src in xjoin.get(o + i, ()):
                vc = _join(vc, clock_of[src])
        vc = list(vc)
        vc[p] += 1
        pipe_clock[p] = vc
        if p == base + S or k == SET or k == CROSS_SET or k == BARRIER_ALL:
            clock_of[o + i] = vc
        for buf, lo, hi, write in accesses.get(i, ()):
            where = buf if ncores == 1 or buf.startswith("GM:") else (c, buf)
            seen = set()
            for page in range(lo // PAGE, (hi - 1) // PAGE + 1):
                entries = shadow.setdefault((where, page), [])
                keep = []
                for e in entries:
                    j, pj, ej, elo, ehi, ew = e
                    if elo < hi and lo < ehi:
                        ordered = ej <= vc[pj]
                        if (write or ew) and pj != p and not ordered and j not in seen:
                            cj = where_of[j]
                            return (cj, j - off[cj]), (c, i), buf, max(lo, elo), min(hi, ehi)
                        seen.add(j)
                        if ordered and lo <= elo and ehi <= hi and (write or (not ew and pj == p)):
                            continue                # superseded by this access
                    keep.append(e)
                keep.append((o + i, p, vc[p], lo, hi, write))
                shadow[(where, page)] = keep
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
