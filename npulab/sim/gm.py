"""GM traffic: the shared HBM bandwidth and the L2 cache in front of it.

Every copy that reads or writes GM is recorded here when it is issued, and its duration is
settled when the launch finishes, because what one copy costs depends on all the others:

* **HBM sustains less than its pins.** A DRAM loses cycles to refresh, bank conflicts and
  read/write turnarounds: the chip sustains ``gm_bytes_per_cycle x gm_efficiency`` (each chip
  file gives the fraction and its source; data/FACTS.md, "GM and L2").
* **Cores share GM.** With ``a`` cores active, each core gets that sustained rate ``/ a`` (the
  cores of the launch: AIV cores for a vector-only kernel on a split chip, see ``cores_for``).
* **A core's reads and writes share its part while both are under way.** Reads (MTE2) and
  writes (MTE3, FixPipe) split the part in proportion to the bytes each direction moves on
  that core, but only while the other direction is moving bytes too: once every core is
  scheduled, each copy is given the split part for the fraction of its time the other
  direction overlapped it and the whole part for the rest, and the core is scheduled again,
  until nothing changes (:meth:`GmTraffic.refine`; the overlap a copy is charged only grows
  from pass to pass, so no pass moves bytes faster than the share). The first schedule
  guesses from program order: a read issued before the core's first write (filling the
  pipeline) and a write issued after its last read (draining it) start with the whole part,
  the others with the split part; the passes then charge every copy for the overlap it
  really met, a read-ahead that runs beside a write included. A streaming kernel such as Add
  therefore reaches the GM roofline and never passes it, and a kernel that must read a large
  first tile before it can write anything is not charged as if part of its bandwidth were
  reserved for writes that have not started. (Chosen simplification: cores still split HBM
  evenly, whatever the others are doing.)
* **L2 holds lines.** Every copy records the bytes it touches as rows (GM buffer, first byte,
  bytes a row, bytes from row to row, rows). Reads and writes are replayed, in an interleaved
  order (the j-th GM copy of every core at about the same time, cores in index order), through
  an LRU cache of ``l2_bytes`` in lines of ``l2_line_bytes`` (:mod:`npulab.sim.l2`, with its
  Cython twin ``npulab._l2``). A read hits for every line L2 holds, whoever left it there, so a
  read that overlaps part of an earlier read gets those lines from L2 and fetches the rest; a
  miss fetches a whole line from HBM (a read of part of a line pays for all of it). Writes are
  write-back, write-allocate: their lines stay in L2 and a later read of them hits (they reach
  HBM when evicted; each write is charged its bytes at once). The HBM bytes of one fetch are
  shared by every read the line serves. A read then occupies MTE2 for

      max(bytes / min(MTE2 rate, the core's L2 share),  hbm bytes / the core's read share)

  cycles (``dur``), the L2 share being ``l2_bytes_per_cycle`` over the active cores (each
  core's L2 read port), so a matmul whose block swizzle makes tiles hit in L2 is bound by L2,
  not HBM. On a chip with no L2 (``l2_bytes = 0``) every line misses. ``stats`` counts lines:
  ``l2_hits`` and ``l2_misses`` are the lines reads found and fetched.
* **L2 hits cost L2's energy.** A copy is charged GM's energy per byte when it is issued; once
  the replay knows which bytes L2 served, those are charged ``l2_byte_pj`` instead, and the HBM
  bytes of the lines a read fetched cost ``gm_byte_pj`` each (more than it reads when it uses
  part of a line).
* **Start-up is latency, not occupancy.** Every copy is then in flight for its pipe's start-up
  cycles (``lat``, set here too; a read that L2 served wholly for ``l2_hit_startup_cycles``
  instead, as an L2 hit answers sooner than HBM): the pipe moves the next copy's bytes
  meanwhile, so back-to-back copies pay the latency once, not once each
  (:mod:`npulab.sim.timeline`).
"""
from __future__ import annotations

import math

import numpy as np

from .. import _l2, twins
from . import l2
from .isa import Pipe

#: :meth:`GmTraffic.refine` stops when no copy's duration changed by more than this fraction
SETTLED = 0.01


class GmTraffic:
    """The GM reads and writes of one launch."""

    def __init__(self, device):
        self.device = device
        self.reads: list[tuple] = []      # (seq on its core, core index, instruction, rows, nbytes)
        self.writes: list[tuple] = []     # (core index, instruction, pipe, nbytes)
        self.write_rows: list[tuple] = []  # (seq on its core, core index, instruction, rows)
        self._seq: dict[int, int] = {}
        self.stats = {"l2_hits": 0, "l2_misses": 0, "hbm_read_bytes": 0, "gm_write_bytes": 0}

    def _next(self, core) -> int:
        s = self._seq.get(core.index, 0)
        self._seq[core.index] = s + 1
        return s

    def read(self, core, index: int, nbytes: int, rows: tuple) -> None:
        """Instruction ``index`` of ``core`` (an MTE2 copy) reads ``nbytes`` of GM (what the DMA
        moves); ``rows`` are the bytes it reads, (GM name, first byte, bytes a row, bytes from
        row to row, rows), so that L2 finds the lines earlier copies left there."""
        self.reads.append((self._next(core), core.index, index, rows, int(nbytes)))

    def write(self, core, index: int, pipe: Pipe, nbytes: int, rows: tuple) -> None:
        """Instruction ``index`` of ``core`` writes ``nbytes`` to GM on ``pipe`` (MTE3 or FIX).
        ``rows``: the bytes written, as :meth:`read`'s; they take L2 lines (write-allocate) and
        the race check between blocks reads them."""
        self.writes.append((core.index, index, pipe, int(nbytes)))
        self.write_rows.append((self._next(core), core.index, index, rows))

    def block_accesses(self):
        """Every GM write and read of the launch, row by row (a row that continues the last one
        merged into it), as (buffer, lo, hi, is_write, core, instruction), for
        races.find_block_race."""
        for _, ci, idx, rows in self.write_rows:
            yield from _spans(rows, True, ci, idx)
        for _, ci, idx, rows, _ in self.reads:
            yield from _spans(rows, False, ci, idx)

    def _replay_l2(self):
        """The L2 replay (:mod:`npulab.sim.l2`, on the launch's side of npulab.twins) of every
        read and write in an interleaved order: the j-th GM copy of every core at about the same
        time, cores in index order. Returns, for every read in recording order, the HBM bytes
        it is charged and whether L2 held every line it read."""
        mem = self.device.chip.memory
        n = len(self.reads)
        total = n + len(self.write_rows)
        if not total:
            return [], []
        seq, core, rows = [], [], []          # columns: the reads, then the writes
        for recorded in (self.reads, self.write_rows):
            if recorded:
                cols = list(zip(*recorded))   # (seq, core, instruction, rows, ...)
                seq += cols[0]
                core += cols[1]
                rows += cols[3]
        names, lo, row, step, nrows = zip(*rows)
        ids = {name: i for i, name in enumerate(dict.fromkeys(names))}
        order = np.lexsort((np.asarray(core, np.int64), np.asarray(seq, np.int64)))   # by seq, then core
        is_write = np.zeros(total, np.int8)
        is_write[n:] = 1
        line = mem.l2_line_bytes
        capacity = mem.l2_bytes // line
        replay = twins.pick(_l2.replay, l2.replay, self.device.twins)
        hbm_o, hits_o, miss_o = replay(*(np.asarray(c, np.int64)[order] for c in
                                         ([ids[x] for x in names], lo, row, step, nrows)),
                                       is_write[order], line, capacity)
        hbm, hits, misses = np.zeros(total), np.zeros(total, np.int64), np.zeros(total, np.int64)
        hbm[order], hits[order], misses[order] = hbm_o, hits_o, miss_o
        self.stats["l2_hits"] = int(hits[:n].sum())
        self.stats["l2_misses"] = int(misses[:n].sum())
        served = (misses[:n] == 0) & (hits[:n] > 0) & (capacity > 0)
        return hbm[:n].tolist(), served.tolist()

    def settle(self) -> dict:
        """Set the duration of every recorded copy; return the traffic statistics."""
        dev = self.device
        chip = dev.chip
        hbm, served = self._replay_l2()
        # the middle of each core's stream: from its first write to its last read
        first_write = {c.index: None for c in dev.cores}
        last_read = {c.index: -1 for c in dev.cores}
        for ci, idx, _, _ in self.writes:
            if first_write[ci] is None or idx < first_write[ci]:
                first_write[ci] = idx
        for read in self.reads:
            last_read[read[1]] = max(last_read[read[1]], read[2])

        def shared_read(ci, idx):
            return first_write[ci] is not None and idx > first_write[ci]

        def shared_write(ci, idx):
            return idx < last_read[ci]

        share = chip.gm_share_bytes_per_cycle(dev.active_cores, dev.core_type)
        l2_share = max(share, chip.memory.l2_bytes_per_cycle / dev.active_cores)
        p = chip.pipes
        rates = {Pipe.MTE3: (p.mte3_bytes_per_cycle, p.mte3_startup_cycles),
                 Pipe.FIX: (p.fix_bytes_per_cycle, p.fix_startup_cycles)}
        # every copy: (core, instruction, is a read, floor cycles, HBM bytes, start-up, shared)
        hit_startup = min(chip.memory.l2_hit_startup_cycles, p.mte2_startup_cycles)
        copies = [(r[1], r[2], True, r[4] / min(p.mte2_bytes_per_cycle, l2_share), h,
                   hit_startup if s else p.mte2_startup_cycles, shared_read(r[1], r[2]))
                  for r, h, s in zip(self.reads, hbm, served)]
        for ci, idx, pipe, nbytes in self.writes:
            rate, startup = rates[Pipe(pipe)]
            copies.append((ci, idx, False, nbytes / rate, nbytes, startup, shared_write(ci, idx)))
        # HBM bytes each direction moves on each core: while both directions move bytes, they
        # split the core's part in this proportion (the two fractions add up to one)
        moved = {d: {c.index: 0.0 for c in dev.cores} for d in (True, False)}
        for ci, _, is_read, _, nbytes, _, _ in copies:
            moved[is_read][ci] += nbytes
        durs = {c.index: c.dur for c in dev.cores}      # writable views of the columns
        lats = {c.index: c.lat for c in dev.cores}

        # the copies whose part depends on what the other direction does meanwhile, per core:
        # (instruction, is a read, floor cycles, HBM bytes, the part's fraction of the share)
        self._shared = {c.index: [] for c in dev.cores}
        self._middle = {c.index: False for c in dev.cores}   # any copy started at the split part
        self._by_core = {c.index: ([], []) for c in dev.cores}   # (read, write) instructions
        self._overlap: dict = {}
        self._share = share
        for ci, idx, is_read, floor, nbytes, startup, shared in copies:
            self._by_core[ci][0 if is_read else 1].append(idx)
            total = moved[True][ci] + moved[False][ci]
            part = moved[is_read][ci] / total if total else 1.0
            # every copy is checked against the schedule (refine): a read issued before the
            # first write can still run while a write does (a read-ahead waits for a buffer)
            self._shared[ci].append((idx, is_read, floor, nbytes, part))
            self._middle[ci] |= shared
            mine = share * part if shared else share
            durs[ci][idx] = int(math.ceil(max(floor, nbytes / mine)))
            lats[ci][idx] = int(startup)
        # energy: a copy was charged GM's energy for every byte at issue; a read is charged it
        # for the HBM bytes of its lines instead (more than it reads when it uses part of a
        # line), and the bytes L2 served cost L2's (writes all reach HBM)
        gm_pj, l2_pj = chip.energy.gm_byte_pj, chip.energy.l2_byte_pj
        energies = {c.index: c.energy for c in dev.cores}
        for read, h in zip(self.reads, hbm):
            nb = read[4]
            if h != nb:
                energies[read[1]][read[2]] += gm_pj * (h - nb) + l2_pj * max(0.0, nb - h)
        self.stats["hbm_read_bytes"] = int(round(sum(hbm)))
        self.stats["gm_write_bytes"] = int(sum(w[3] for w in self.writes))
        return dict(self.stats)

    def refine(self, core, start) -> bool:
        """One more pass for one core, given when its instructions started in the last: a shared
        copy keeps the split part only for the fraction ``f`` of its time that the other
        direction was moving bytes too, and the whole share for the rest, so it takes

            max(floor, bytes / (share * (1 - f + f * part)))

        cycles, ``f`` the largest overlap it met in any pass so far. Sets them and returns
        True (the core is then scheduled again) unless none would change by more than
        :data:`SETTLED` of itself."""
        shared = self._shared.get(core.index)
        if not shared:
            return False
        start = np.asarray(start, dtype=np.float64)
        dur = np.asarray(core.dur, dtype=np.float64)
        rd_i, wr_i = (np.asarray(x, dtype=np.int64) for x in self._by_core[core.index])
        if not self._middle[core.index] and self._overlap.get(core.index) is None and (
                not len(rd_i) or not len(wr_i) or
                (start[rd_i] + dur[rd_i]).max() <= start[wr_i].min() or
                (start[wr_i] + dur[wr_i]).max() <= start[rd_i].min()):
            return False        # every copy has the whole share and no read meets a write
        busy = {True: _union(start[rd_i], start[rd_i] + dur[rd_i]),
                False: _union(start[wr_i], start[wr_i] + dur[wr_i])}
        idx, is_read, floor, nbytes, frac = (np.asarray(col) for col in zip(*shared))
        s0 = start[idx]
        s1 = s0 + dur[idx]
        length = np.maximum(s1 - s0, 1e-9)
        f = np.where(is_read, _covered(busy[False], s0, s1), _covered(busy[True], s0, s1)) / length
        # overlap only grows from round to round: durations only grow after the first, and a
        # copy is never charged less overlap than it met in any schedule (no pass beats the share)
        seen = self._overlap.get(core.index)
        if seen is not None:
            f = np.maximum(f, seen)
        self._overlap[core.index] = f
        cycles = np.ceil(np.maximum(floor, nbytes / (self._share * (1.0 - f + f * frac)))).astype(np.int64)
        return set_unless_settled(core, idx, cycles, dur)


def set_unless_settled(core, idx, cycles, dur) -> bool:
    """Give instructions ``idx`` of ``core`` their new ``cycles`` and return True, unless none
    would move by more than :data:`SETTLED` of its duration in ``dur`` (the passes creep up by
    halving steps): then the schedule just made stands, with the durations it used, and False.
    The settling rule of every refinement pass (this module's and :mod:`npulab.sim.l1port`'s)."""
    old = dur[idx].astype(np.int64)
    if not np.any(np.abs(cycles - old) > np.maximum(1, SETTLED * old)):
        return False
    d = core.dur
    for i, c in zip(idx.tolist(), cycles.tolist()):
        d[i] = c
    return True


def _spans(rows, is_write, ci, idx):
    """The byte ranges of ``rows`` (GM name, first byte, bytes a row, bytes row to row, rows),
    as block_accesses yields them: one range when the rows are packed."""
    buf, lo, row, step, nrows = rows
    if nrows == 1 or step == row:
        yield buf, lo, lo + step * (nrows - 1) + row, is_write, ci, idx
    else:
        for r in range(nrows):
            yield buf, lo + r * step, lo + r * step + row, is_write, ci, idx


def _union(lo, hi):
    """The disjoint union of intervals [lo, hi), as sorted starts, ends and covered length
    before each start."""
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    if not len(lo):
        return np.zeros(0), np.zeros(0), np.zeros(0)
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], np.maximum.accumulate(hi[order])
    new = np.empty(len(lo), bool)
    new[0] = True
    new[1:] = lo[1:] > hi[:-1]
    starts = lo[new]
    ends = np.append(hi[np.flatnonzero(new)[1:] - 1], hi[-1])
    before = np.concatenate(([0.0], np.cumsum(ends - starts)[:-1]))
    return starts, ends, before


def _covered(union, a, b) -> np.ndarray:
    """How much of each [a, b) the union covers."""
    starts, ends, before = union
    if not len(starts):
        return np.zeros(len(a))

    def upto(t):
        k = np.searchsorted(starts, t, side="right") - 1
        kc = np.maximum(k, 0)
        return np.where(k < 0, 0.0, before[kc] + np.minimum(t, ends[kc]) - starts[kc])
    return upto(b) - upto(a)
