"""GM traffic: the shared HBM bandwidth and the L2 cache in front of it.

Every copy that reads or writes GM is recorded here when it is issued, and its duration is
settled when the launch finishes, because what one copy costs depends on all the others:

* **Cores share GM.** With ``a`` cores active, each core gets ``gm_bytes_per_cycle / a`` (the
  cores of the launch: AIV cores for a vector-only kernel on a split chip, see ``cores_for``).
* **A core's reads and writes share its part.** Reads (MTE2) and writes (MTE3, FixPipe) of one
  core split the core's share in proportion to the bytes each direction moves over the whole
  launch. A streaming kernel such as Add therefore reaches the GM roofline and never passes
  it. (Chosen simplification: a kernel that reads everything first and writes everything
  later would, on a real chip, give each phase the whole share.)
* **L2 serves repeats.** Reads are replayed through an LRU cache of ``l2_bytes`` in an
  interleaved order (the j-th read of every core at about the same time, cores in index
  order). A miss fetches from HBM; a later read of the same range before eviction is a hit.
  The HBM bytes of one fetch are shared by every read it serves. A read then occupies MTE2 for

      max(bytes / min(MTE2 rate, the core's L2 share),  hbm bytes / the core's read share)

  cycles (``dur``), so a matmul whose block swizzle makes tiles hit in L2 is bound by L2, not
  HBM. On a chip with no L2 (``l2_bytes = 0``) every read misses.
* **Start-up is latency, not occupancy.** Every copy is then in flight for its pipe's start-up
  cycles (``lat``, set here too): the pipe moves the next copy's bytes meanwhile, so
  back-to-back copies pay the latency once, not once each (:mod:`npulab.sim.timeline`).
"""
from __future__ import annotations

from collections import OrderedDict

from .isa import Pipe


class GmTraffic:
    """The GM reads and writes of one launch."""

    def __init__(self, device):
        self.device = device
        self.reads: list[tuple] = []      # (seq on its core, core index, instruction, key, nbytes)
        self.writes: list[tuple] = []     # (core index, instruction, pipe, nbytes)
        self._seq: dict[int, int] = {}
        self.stats = {"l2_hits": 0, "l2_misses": 0, "hbm_read_bytes": 0, "gm_write_bytes": 0}

    def read(self, core, index: int, nbytes: int, key) -> None:
        """Instruction ``index`` of ``core`` (an MTE2 copy) reads ``nbytes`` of GM; ``key`` names
        the exact bytes (any hashable), so that a repeat of the same range can hit in L2."""
        s = self._seq.get(core.index, 0)
        self._seq[core.index] = s + 1
        self.reads.append((s, core.index, index, key, int(nbytes)))

    def write(self, core, index: int, pipe: Pipe, nbytes: int) -> None:
        """Instruction ``index`` of ``core`` writes ``nbytes`` to GM on ``pipe`` (MTE3 or FIX)."""
        self.writes.append((core.index, index, pipe, int(nbytes)))

    def _replay_l2(self) -> list[float]:
        """HBM bytes of every read, in recording order, after the L2 replay."""
        capacity = self.device.chip.memory.l2_bytes
        lru: OrderedDict = OrderedDict()          # key -> (fetch id, nbytes)
        used = 0
        readers: list[int] = []                   # reads served by each fetch
        fetch_of = [0] * len(self.reads)
        for r in sorted(range(len(self.reads)), key=lambda r: self.reads[r][:2]):
            key, nbytes = self.reads[r][3], self.reads[r][4]
            hit = lru.get(key)
            if hit is not None:
                lru.move_to_end(key)
                readers[hit[0]] += 1
                fetch_of[r] = hit[0]
                continue
            fetch_of[r] = len(readers)
            readers.append(1)
            lru[key] = (fetch_of[r], nbytes)
            used += nbytes
            while used > capacity and lru:
                _, (_, nb) = lru.popitem(last=False)
                used -= nb
        self.stats["l2_misses"] = len(readers)
        self.stats["l2_hits"] = len(self.reads) - len(readers)
        return [read[4] / readers[fetch_of[r]] for r, read in enumerate(self.reads)]

    def settle(self) -> dict:
        """Set the duration of every recorded copy; return the traffic statistics."""
        dev = self.device
        chip = dev.chip
        hbm = self._replay_l2()
        read_bytes = {c.index: 0.0 for c in dev.cores}
        write_bytes = {c.index: 0.0 for c in dev.cores}
        for read, h in zip(self.reads, hbm):
            read_bytes[read[1]] += h
        for ci, _, _, nbytes in self.writes:
            write_bytes[ci] += nbytes
        share = chip.gm_share_bytes_per_cycle(dev.active_cores, dev.core_type)
        l2_share = max(share, chip.memory.l2_bytes_per_cycle / dev.active_cores)
        p = chip.pipes
        rates = {Pipe.MTE3: (p.mte3_bytes_per_cycle, p.mte3_startup_cycles),
                 Pipe.FIX: (p.fix_bytes_per_cycle, p.fix_startup_cycles)}
        cores = {c.index: c for c in dev.cores}

        def part(ci, mine):
            total = read_bytes[ci] + write_bytes[ci]
            return share * mine / total if total else share

        for read, h in zip(self.reads, hbm):
            ci, idx, nbytes = read[1], read[2], read[4]
            cycles = max(nbytes / min(p.mte2_bytes_per_cycle, l2_share), h / part(ci, read_bytes[ci]))
            cores[ci].dur[idx] = int(-(-cycles // 1))
            cores[ci].lat[idx] = int(p.mte2_startup_cycles)
        for ci, idx, pipe, nbytes in self.writes:
            rate, startup = rates[Pipe(pipe)]
            cycles = nbytes / min(rate, part(ci, write_bytes[ci]))
            cores[ci].dur[idx] = int(-(-cycles // 1))
            cores[ci].lat[idx] = int(startup)
        self.stats["hbm_read_bytes"] = int(round(sum(hbm)))
        self.stats["gm_write_bytes"] = int(sum(w[3] for w in self.writes))
        return dict(self.stats)
