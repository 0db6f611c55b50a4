"""What a launch leaves behind: every instruction with its start and end cycle, and the views
msprof gives on real hardware (pipe utilization, bytes per level, FLOPs, energy, trace.json).

Arrays are columns over all cores' instructions (``core`` says whose). Times are cycles of the
chip's clock; ``us`` converts. Three times per instruction: ``start``, ``busy_end`` (its pipe is
free again: start + dur for work) and ``end`` (it has completed). Between ``busy_end`` and
``end`` a copy is *in flight*: it paid its start-up latency while its pipe moved the next
copy's bytes. A wait's ``start..end`` is the stall; a set fires at its ``end``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ..errors import ArgumentError
from .isa import CUBE_OPS, NUM_PIPES, RATIO_NAMES, TRACK_NAMES, VECTOR_OPS, Kind, Op, Pipe
from .cost import trace_watts


@dataclass(frozen=True)
class Allocation:
    """A tensor's lifetime in a buffer, in cycles: live over [start, end)."""
    core: int
    buffer: str
    owner: str
    offset: int
    size: int
    start: int
    end: int


def _allocations(logs) -> list[Allocation]:
    """Allocation records (times in instruction indices) -> Allocations in cycles: live from
    when the pipe passed the instruction that took the slot (its ``busy_end``: an alloc marker
    does not wait for the copies still in flight before it) to the completion (``end``) of the
    one that released it (the core's last cycle when never released)."""
    out: list[Allocation] = []
    for core, end, busy_end, last, buffer_logs in logs:
        end, busy_end = end.tolist(), busy_end.tolist()
        for buffer, log in buffer_logs:
            for rec in log:
                t0 = busy_end[rec.taken]
                t1 = end[rec.released] if rec.released >= 0 else last
                out.append(Allocation(core, buffer, rec.owner, rec.offset, rec.size, t0, max(t0, t1)))
    return out


class Trace:
    def __init__(self, chip, mode, block_dim, columns: dict, core_cycles, allocations, capacities,
                 gm_stats: dict | None = None, core_type: str = "aic", core_labels=None, core_roles=None,
                 launch_cycles: int = 0, bank_conflict_cycles: int = 0):
        """allocations: a list of :class:`Allocation`, or a callable returning one (built on
        first use of :attr:`allocations`: most runs, a timing-only search for one, never look).
        core_type: what the kernel was launched as ("aic", "aiv" or "mix", see
        :meth:`~npulab.chips.ChipSpec.cores_for`). core_labels / core_roles: what each core is
        ("AIC 0", "AIV 0.1", "core 2"; "aic", "aiv", "core"). launch_cycles: what the launch cost
        before its cores started (the chip's ``launch.launch_cycles``, charged by lang.launch):
        part of :attr:`cycles`, not of the cores' time the pipe ratios are over.
        bank_conflict_cycles: vector cycles lost to UB bank conflicts (:attr:`bank_conflict_ratio`)."""
        self.chip = chip
        self.mode = mode
        self.block_dim = block_dim
        self.core_type = core_type
        for k, v in columns.items():
            setattr(self, k, v)
        self.core_cycles = np.asarray(core_cycles, dtype=np.int64)
        self.launch_cycles = int(launch_cycles)
        self.bank_conflict_cycles = int(bank_conflict_cycles)
        n = len(self.core_cycles)
        self.core_labels = list(core_labels) if core_labels is not None else [f"core {c}" for c in range(n)]
        self.core_roles = list(core_roles) if core_roles is not None else ["core"] * n
        self._allocations = allocations
        self.capacities: dict[str, int] = capacities
        self.gm_stats = dict(gm_stats or {"l2_hits": 0, "l2_misses": 0, "hbm_read_bytes": 0, "gm_write_bytes": 0})

    @property
    def allocations(self) -> list[Allocation]:
        """Every tensor lifetime of the launch, in cycles (see :class:`Allocation`)."""
        if callable(self._allocations):
            self._allocations = self._allocations()
        return self._allocations

    @allocations.setter
    def allocations(self, value) -> None:
        self._allocations = value

    @classmethod
    def from_device(cls, device, timelines):
        cols = {k: [] for k in ("core", "pipe", "kind", "op", "start", "end", "busy_end", "nbytes",
                                "flops", "energy", "block")}
        names, routes, logs, core_cycles = [], [], [], []
        for core, (start, end, busy_end) in zip(device.cores, timelines):
            n = len(core)
            cols["core"].append(np.full(n, core.index, dtype=np.int32))
            cols["pipe"].append(np.asarray(core.pipe, dtype=np.int8))
            cols["kind"].append(np.asarray(core.kind, dtype=np.int8))
            cols["op"].append(np.asarray(core.op, dtype=np.int16))
            cols["start"].append(start.astype(np.int64))
            cols["end"].append(end.astype(np.int64))
            cols["busy_end"].append(busy_end.astype(np.int64))
            cols["nbytes"].append(np.asarray(core.nbytes, dtype=np.int64))
            cols["flops"].append(np.asarray(core.flops, dtype=np.int64))
            cols["energy"].append(np.asarray(core.energy, dtype=np.float64))
            cols["block"].append(core.block_column())
            names.extend(core.name)
            routes.extend(core.route)
            last = int(end.max()) if n else 0
            core_cycles.append(last)
            logs.append((core.index, end, busy_end, last, [(buf.name, buf.log) for buf in core.buffers.values()]))
        columns = {k: np.concatenate(v) if v else np.zeros(0) for k, v in cols.items()}
        columns["name"] = names
        columns["route"] = routes
        capacities = {b: device.chip.buffer_bytes(b) for b in ("L1", "L0A", "L0B", "L0C", "UB")}
        return cls(device.chip, device.mode, device.block_dim, columns, core_cycles,
                   lambda: _allocations(logs), capacities, device.gm_stats, device.core_type,
                   [c.label for c in device.cores], [c.role for c in device.cores],
                   getattr(device, "launch_cycles", 0), sum(c.bank_conflict_cycles for c in device.cores))

    # -- figures ----------------------------------------------------------------------------
    @property
    def cycles(self) -> int:
        """The launch's duration: its start-up (:attr:`launch_cycles`) and then the cores' time
        to the last instruction's end on any core (instruction times count from the cores'
        start)."""
        return self.launch_cycles + self.core_time

    @property
    def core_time(self) -> int:
        """The cores' time: the last instruction's end on any core (msprof's aicore_time)."""
        return int(self.core_cycles.max()) if len(self.core_cycles) else 0

    def us(self, cycles) -> float:
        return cycles / (self.chip.clock_ghz * 1000.0)

    def __len__(self) -> int:
        return len(self.pipe)

    def check_core(self, core, what: str) -> int:
        """``core`` as an int when the launch used it; else a ValueError naming ``what`` and the
        cores there are."""
        ncores = len(self.core_cycles)
        if isinstance(core, (bool, np.bool_)) or not isinstance(core, (int, np.integer)) \
                or not 0 <= core < max(ncores, 1):
            raise ArgumentError(f"{what}: core={core!r} is out of range; this trace used cores 0-{ncores - 1}")
        return int(core)

    def _on(self, core: int | None, role: str | None) -> np.ndarray:
        """Which instructions ran on ``core``, on the cores of ``role`` ("aic", "aiv"), or anywhere."""
        sel = np.ones(len(self.core), dtype=bool)
        if core is not None:
            sel &= self.core == core
        if role is not None:
            sel &= np.isin(self.core, [c for c, r in enumerate(self.core_roles) if r == role])
        return sel

    def _core_time_of(self, core: int | None, role: str | None) -> int:
        """The cores' time summed over ``core``, the cores of ``role`` or every core used: what a
        ratio of pipe cycles divides by."""
        cores = 1 if core is not None else (self.core_roles.count(role) if role else len(self.core_cycles))
        return max(1, self.core_time) * max(1, cores)

    def busy_cycles(self, core: int | None = None, role: str | None = None) -> np.ndarray:
        """Cycles each pipe was occupied by work (not waiting, not a copy's in-flight latency),
        summed over ``core``, over the cores of ``role`` ("aic", "aiv"), or over all cores."""
        sel = (self.kind == Kind.WORK) & self._on(core, role)
        busy = np.zeros(NUM_PIPES, dtype=np.int64)
        np.add.at(busy, self.pipe[sel].astype(np.int64), (self.busy_end - self.start)[sel])
        return busy

    def span_cycles(self, core: int | None = None, role: str | None = None) -> np.ndarray:
        """Cycles each pipe had an instruction under way, from its start to its end (its
        in-flight latency included, overlaps counted once), summed over ``core``, the cores of
        ``role`` or all cores. msprof's PipeUtilization page says MTE1's time leaves out "transfer
        waits" and says no such thing of MTE2's: this is the reading in which they count."""
        sel = (self.kind == Kind.WORK) & self._on(core, role)
        cores = np.unique(self.core[sel]).tolist()
        span = np.zeros(NUM_PIPES, dtype=np.int64)
        for c in cores:
            mine = sel & (self.core == c)
            for p in np.unique(self.pipe[mine]).tolist():
                at = np.flatnonzero(mine & (self.pipe == p))
                order = np.argsort(self.start[at], kind="stable")
                s, e = self.start[at][order].astype(np.int64), self.end[at][order].astype(np.int64)
                reach = np.maximum.accumulate(e)               # the latest end so far
                gap = s[1:] > reach[:-1]                       # a new stretch starts here
                firsts = s[np.r_[True, gap]]
                lasts = reach[np.r_[gap, True]]
                span[p] += int((lasts - firsts).sum())
        return span

    def span_ratios(self, core: int | None = None, role: str | None = None) -> dict[str, float]:
        """:meth:`span_cycles` over the cores' time, as :meth:`pipe_ratios` divides busy cycles:
        how much of the time each pipe had work started and not yet completed."""
        denom = self._core_time_of(core, role)
        span = self.span_cycles(core, role)
        return {RATIO_NAMES[Pipe(p)]: float(span[p]) / denom for p in range(NUM_PIPES)}

    def issue_cycles(self, core: int | None = None, role: str | None = None) -> int:
        """Cycles the scalar unit spent issuing the other pipes' instructions (``issue_cycles``
        each, sim.timeline), over ``core``, the cores of ``role`` or all cores."""
        issued = (self.pipe != int(Pipe.S)) & (self.kind != Kind.BARRIER_ALL) & self._on(core, role)
        return int(np.count_nonzero(issued)) * int(self.chip.issue_cycles)

    @property
    def in_flight(self) -> np.ndarray:
        """Cycles each instruction was in flight after its pipe let it go (``end - busy_end``;
        non-zero for copies, pipelined mmads and vector instructions, whose start-up latency this
        is, and never for a stall)."""
        return self.end - self.busy_end

    def pipe_ratios(self, core: int | None = None, role: str | None = None) -> dict[str, float]:
        """msprof PipeUtilization: busy cycles of each pipe / the cores' time (averaged over
        the cores used, or over the cores of ``role``, when ``core`` is None); the scalar unit's
        include issuing the other pipes' instructions (:meth:`issue_cycles`)."""
        denom = self._core_time_of(core, role)
        busy = self.busy_cycles(core, role)
        busy[int(Pipe.S)] += self.issue_cycles(core, role)    # issuing is the scalar unit's work too
        return {RATIO_NAMES[Pipe(p)]: float(busy[p]) / denom for p in range(NUM_PIPES)}

    @property
    def bank_conflict_ratio(self) -> float:
        """msprof's ResourceConflictRatio (aiv_vec_bank_cflt_ratio and the bank-group part): the
        vector pipe's cycles lost to UB bank conflicts over its busy cycles (lang.vector charges
        them; 0 when the vector unit did nothing)."""
        busy = int(self.busy_cycles()[int(Pipe.V)])
        return float(self.bank_conflict_cycles) / busy if busy else 0.0

    def bytes_by_route(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for route, nb in zip(self.route, self.nbytes):
            if route:
                out[route] = out.get(route, 0) + int(nb)
        return dict(sorted(out.items()))

    def summary(self) -> dict:
        """One JSON-ready dict: cycles, time, per-pipe ratios, bytes per level, FLOPs, energy and
        the average power (the chip's static power included: sim.cost.trace_watts)."""
        routes = self.bytes_by_route()
        ops = self.op
        cube = np.isin(ops, [int(o) for o in CUBE_OPS])
        vec = np.isin(ops, [int(o) for o in VECTOR_OPS])
        ratios = self.pipe_ratios()
        mac, v = ratios["mac_ratio"], ratios["vec_ratio"]
        out = {
            "chip": self.chip.name,
            "mode": self.mode,
            "block_dim": self.block_dim,
            "core_type": self.core_type,
            "cores_used": int(len(self.core_cycles)),
            "instructions": int(len(self)),
            "cycles": self.cycles,
            "launch_cycles": self.launch_cycles,
            "time_us": self.us(self.cycles),
            **ratios,
            "bank_conflict_ratio": self.bank_conflict_ratio,
            "memory_bound": ratios["mte2_ratio"] / max(mac, v) if max(mac, v) > 0 else None,
            "bytes": routes,
            "gm_read_bytes": sum(b for r, b in routes.items() if r.startswith("GM->")),
            "gm_write_bytes": sum(b for r, b in routes.items() if r.endswith("->GM")),
            "l2_hits": self.gm_stats["l2_hits"],
            "l2_misses": self.gm_stats["l2_misses"],
            "hbm_read_bytes": self.gm_stats["hbm_read_bytes"],
            "flops": int(self.flops.sum()),
            "cube_flops": int(self.flops[cube].sum()),
            "vector_flops": int(self.flops[vec].sum()),
            "energy_uj": float(self.energy.sum()) * 1e-6,
            "power_w": trace_watts(self),
        }
        if "aic" in self.core_roles and "aiv" in self.core_roles:
            # a mix launch: msprof's A2 op_summary gives each side its own ratios (aic_mac_ratio, ...)
            for role in ("aic", "aiv"):
                out[f"{role}_cores"] = self.core_roles.count(role)
                out.update({f"{role}_{k}": v for k, v in self.pipe_ratios(role=role).items()})
        return out

    def table(self) -> str:
        """The summary as aligned text (what a learner prints in a notebook)."""
        s = self.summary()
        rows = [("chip", s["chip"]), ("cycles", f"{s['cycles']:,}"), ("time", f"{s['time_us']:.2f} us"),
                ("cores used", s["cores_used"]), ("instructions", f"{s['instructions']:,}")]
        if self.chip.arch == "split":     # on a coupled chip every kernel runs on the same AI cores
            kind = {"aiv": "AIV (vector cores)", "aic": "AIC (cube cores)", "mix": "MIX (each block on an AIC and its two AIVs)"}
            rows.insert(4, ("core type", kind[s["core_type"]]))
        rows += [(name, f"{s[name]:.1%}") for name in RATIO_NAMES.values()]
        if "aic_cores" in s:          # a mix launch: each side's own ratios (msprof's aic_/aiv_)
            rows += [(f"{role}_{name}", f"{s[f'{role}_{name}']:.1%}") for role, names in
                     (("aic", ("mac_ratio", "mte2_ratio", "fixpipe_ratio")), ("aiv", ("vec_ratio", "mte2_ratio", "mte3_ratio")))
                     for name in names]
        rows += [(f"bytes {r}", f"{b:,}") for r, b in s["bytes"].items()]
        rows += [("FLOPs", f"{s['flops']:,}"), ("energy", f"{s['energy_uj']:.3f} uJ"),
                 ("power", f"{s['power_w']:.3g} W (static {self.chip.power.static_watts:g} W included)")]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)

    # -- Chrome / Perfetto ------------------------------------------------------------------
    def chrome_events(self) -> list[dict]:
        """Chrome trace events: a process per core, a thread per pipe (msprof's track names),
        one complete ('X') event per instruction that took time (work, or a stalled wait).

        An event spans the time the instruction *occupied* its pipe (``start..busy_end``), so
        the events of one thread never overlap; a copy's in-flight latency after that is in its
        args (``in_flight_cycles``, ``end_cycle`` = completion)."""
        events = []
        for c in range(len(self.core_cycles)):
            events.append({"ph": "M", "name": "process_name", "pid": c, "tid": 0,
                           "args": {"name": self.core_labels[c]}})
            for p in range(NUM_PIPES):
                events.append({"ph": "M", "name": "thread_name", "pid": c, "tid": p,
                               "args": {"name": TRACK_NAMES[Pipe(p)]}})
                events.append({"ph": "M", "name": "thread_sort_index", "pid": c, "tid": p,
                               "args": {"sort_index": p}})
        scale = 1.0 / (self.chip.clock_ghz * 1000.0)
        for i in np.flatnonzero((self.busy_end > self.start) & (self.kind != Kind.SET) & (self.kind != Kind.CROSS_SET)):
            kind = int(self.kind[i])
            events.append({
                "ph": "X", "name": self.name[i],
                "cat": "wait" if kind in (Kind.WAIT, Kind.CROSS_WAIT) else Op(int(self.op[i])).name,
                "pid": int(self.core[i]), "tid": int(self.pipe[i]),
                "ts": float(self.start[i]) * scale, "dur": float(self.busy_end[i] - self.start[i]) * scale,
                "args": {"block": int(self.block[i]), "bytes": int(self.nbytes[i]),
                         "start_cycle": int(self.start[i]), "busy_end_cycle": int(self.busy_end[i]),
                         "end_cycle": int(self.end[i]),
                         "in_flight_cycles": int(self.end[i] - self.busy_end[i])},
            })
        return events

    def to_chrome(self, path) -> None:
        """Write Chrome trace JSON (open it in Perfetto or chrome://tracing)."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": self.chrome_events(), "displayTimeUnit": "ns",
                       "otherData": {"chip": self.chip.name, "clock_ghz": self.chip.clock_ghz,
                                     "core_type": self.core_type}}, f)

    # -- occupancy --------------------------------------------------------------------------
    def occupancy(self, core: int, buffer: str, t: int) -> int:
        """Bytes of ``buffer`` on ``core`` held by live tensors at cycle ``t``."""
        return sum(a.size for a in self.allocations
                   if a.core == core and a.buffer == buffer and a.start <= t < a.end)
