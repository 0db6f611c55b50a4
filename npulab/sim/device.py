"""The simulated device: cores with buffers and an instruction stream each, and the run that
turns those streams into a Trace.

Kernel-language calls end in ``core.issue`` (the core's :mod:`~npulab.sim.stream`), which
appends one instruction (pipe, kind, opcode, duration, latency, flag key, bytes, FLOPs, energy,
the byte ranges it reads and writes) to its columns; what it costs comes from
:mod:`npulab.sim.cost` (``device.cost``). Numerics, in functional mode, have already happened in
program order by then; :meth:`Device.finish` schedules every core (the Cython scheduler, or its
readable twin: the device's side of :mod:`npulab.twins`), checks races and returns the
:class:`~npulab.sim.trace.Trace`.
"""
from __future__ import annotations

import numpy as np

from ..arch import BUFFERS, DEFAULT_CHIP
from ..chips import CORE_TYPES, ChipSpec, get_chip
from ..errors import (ArgumentError, CoreTypeError, DeadlockError, InstructionBudgetError, RaceError,
                      SyncError)
from .. import _stream, _timeline, formats, twins
from . import l1port, races, stream, timeline
from .cost import CostModel
from .cross_core import CrossFlags, check_pending, schedule_together
from .gm import GmTraffic
from .isa import Kind, Op, Pipe, describe_key
from .memory import Buffer

MODES = ("functional", "timing")
DEFAULT_BUDGET = 20_000_000


#: at most this many passes settle how a core's GM reads and writes overlap
#: (:meth:`GmTraffic.refine`); they stop once no copy would change by more than 1%, in two to
#: four passes for the kernels here
GM_ROUNDS = 16


LAUNCH_AIV, LAUNCH_AIC = "core_type='aiv'", "core_type='aic'"


class _AivBuffers(dict):
    """The buffers of an AIV core (a ``core_type="aiv"`` launch, or the vector side of a mix
    launch on a split chip). An AIV core has only the UB; the other buffers stay in the dict,
    never used, so that logs, traces and views have the same shape for every launch, but asking
    for one by name (every cube-path tensor starts with ``init_buffer`` of an L1 or L0 queue:
    load_data, mmad and fixpipe take those) is the error. The check runs once per
    ``init_buffer``, never on the per-instruction path."""

    def __init__(self, items, where: str, mix: bool = False):
        super().__init__(items)
        self.where, self.mix = where, mix

    def __getitem__(self, name):
        if name != "UB":
            fix = ("In a mix kernel the cube part runs on the AIC: put it under "
                   "`if is_aic():` and the vector part under `if is_aiv():`." if self.mix else
                   f"Launch a kernel that uses {name} with core_type='aic' or 'mix'.")
            raise CoreTypeError(
                f"{self.where}: buffer {name} does not exist on an AIV core "
                f"({'a mix launch' if self.mix else LAUNCH_AIV}): a vector core has the "
                f"UB, the vector and scalar units and MTE2/MTE3, but no L1, L0A, L0B, L0C and no "
                f"cube. {fix}")
        return dict.__getitem__(self, name)


class _AicBuffers(dict):
    """The buffers of an AIC (cube) core of a split chip (910B class): L1, L0A, L0B and L0C, no
    UB (data/FACTS.md: AIC and AIV exchange data through GM; FixPipe drains L0C to GM or L1)."""

    def __init__(self, items, where: str, mix: bool = False):
        super().__init__(items)
        self.where, self.mix = where, mix

    def __getitem__(self, name):
        if name == "UB":
            fix = ("In a mix kernel put the vector part under `if is_aiv():`: it runs on the AI "
                   "core's two AIVs, which reach the AIC's results through GM." if self.mix else
                   "Launch the vector part with core_type='aiv' (or the whole kernel as 'mix'), or "
                   "use a coupled chip (910, 310) where one core has both.")
            raise CoreTypeError(
                f"{self.where}: buffer UB does not exist on an AIC core of a split chip "
                f"({'a mix launch' if self.mix else LAUNCH_AIC}): the cube core has L1, "
                f"L0A, L0B and L0C, FixPipe drains to GM or L1, and the vector work runs on the "
                f"AIV cores. {fix}")
        return dict.__getitem__(self, name)


class Core:
    """One core of the launch: an AI core (coupled chip), an AIC or an AIV (split chip); its
    buffers and its instruction stream (columns, program order).

    role: "aic", "aiv" (what Ascend C's g_coreType says on a split chip) or "core" (a coupled
    AI core, where g_coreType is MIX). group: the AI core it belongs to (in a mix launch an AIC
    and its two AIVs share one; otherwise the core itself); sub: an AIV's 0 or 1 within it.
    label: what errors and traces call it ("AIC 3", "AIV 3.1", "core 3")."""

    def __init__(self, device: "Device", index: int, role: str = "core", group: int | None = None,
                 sub: int = 0):
        self.device, self.index = device, index
        self.role, self.group, self.sub = role, index if group is None else group, sub
        self.label = {"aic": f"AIC {self.group}", "aiv": f"AIV {self.group}.{sub}" if device.mix
                      else f"AIV {index}"}.get(role, f"core {index}")
        chip = device.chip
        functional = device.functional
        buffers = {name: Buffer(name, index, chip.buffer_bytes(name), chip.buffer_align(name), functional)
                   for name in BUFFERS}
        where = f"{self.label} of chip '{chip.name}'"
        if role == "aiv" or device.core_type == "aiv":       # an AIV, or a vector-only launch
            self.buffers = _AivBuffers(buffers, where, device.mix)
        elif role == "aic":
            self.buffers = _AicBuffers(buffers, where, device.mix)
        else:
            self.buffers = buffers
        # the instruction stream (sim/stream.py, or its Cython twin npulab._stream: the
        # launch's side of npulab.twins). ``core.issue(pipe, kind, op, dur, *, key, name,
        # nbytes, flops, energy, route, reads, writes, lat)`` appends one instruction and
        # returns its index (Stream.issue)
        self.stream = device.streams.Stream(device.counter, device.check_races, self._over_budget)
        self.issue = self.stream.issue
        self.accesses: dict[int, list] = self.stream.accesses
        self._block_runs: list[tuple[int, int]] = []     # (first instruction, block index)
        self.block_idx = -1
        self.events_in_use: dict[tuple[int, int], dict[int, str]] = {}
        # UB ranges vector instructions wrote since the last PIPE_V barrier (lang.sync's
        # automatic PIPE_V synchronisation reads and clears it)
        self.v_written: list[tuple[str, int, int]] = []
        # the L0C bytes (lo, hi) the last mmad wrote, until a PIPE_M barrier (lang.cube.mmad's
        # automatic PIPE_M barrier reads it)
        self.m_last_c: tuple[int, int] | None = None
        # cycles vector instructions lose to UB bank conflicts (lang.vector; the trace's
        # bank_conflict_ratio)
        self.bank_conflict_cycles = 0

    def __len__(self) -> int:
        return len(self.stream)

    # the stream's columns, in program order (numbers as numpy arrays or lists, names and
    # routes as lists of str); read them once the kernel has stopped issuing
    pipe = property(lambda self: self.stream.column("pipe"), doc="pipe of every instruction")
    kind = property(lambda self: self.stream.column("kind"), doc="kind: work, set, wait, barrier")
    op = property(lambda self: self.stream.column("op"), doc="opcode")
    dur = property(lambda self: self.stream.column("dur"), doc="cycles each occupies its pipe")
    key = property(lambda self: self.stream.column("key"), doc="flag key of a set or wait, else -1")
    name = property(lambda self: self.stream.column("name"), doc="what the trace calls each")
    nbytes = property(lambda self: self.stream.column("nbytes"), doc="bytes each moves")
    flops = property(lambda self: self.stream.column("flops"), doc="floating-point operations")
    energy = property(lambda self: self.stream.column("energy"), doc="energy, pJ")
    route = property(lambda self: self.stream.column("route"), doc="where a copy goes, e.g. 'GM->L1'")
    lat = property(lambda self: self.stream.column("lat"), doc="cycles in flight after the pipe is free")

    @property
    def block_idx(self) -> int:
        """The block this core is running now (-1 before the first)."""
        return self._block_idx

    @block_idx.setter
    def block_idx(self, b: int) -> None:
        self._block_idx = b
        self._block_runs.append((len(self.stream), b))

    def block_column(self) -> np.ndarray:
        """The block of every instruction (int32), from the runs recorded when blocks start."""
        out = np.empty(len(self.stream), dtype=np.int32)
        runs = self._block_runs + [(len(self.stream), -1)]
        for (lo, b), (hi, _) in zip(runs, runs[1:]):
            out[lo:hi] = b
        return out

    @property
    def block(self) -> np.ndarray:
        return self.block_column()

    def _over_budget(self, name: str) -> None:
        budget = self.device.budget
        raise InstructionBudgetError(
            f"the kernel issued more than {budget:,} instructions (block {self.block_idx} on "
            f"core {self.index}, last '{name}'): a runaway loop? Raise launch(..., budget=N) "
            f"if the kernel really needs more.")

    # -- flags ------------------------------------------------------------------------------
    def check_event(self, src: int, dst: int, event_id: int, what: str) -> None:
        limit = self.device.chip.event_ids
        if Pipe.ALL in (Pipe(src), Pipe(dst)):
            raise SyncError(f"{what}: PIPE_ALL is not a pipe a flag can leave or reach; a flag goes "
                             f"from one pipe (S, MTE1, MTE2, MTE3, M, V, FIX) to another. To wait "
                             f"for every pipe, use pipe_barrier(PIPE_ALL)")
        if isinstance(event_id, bool) or int(event_id) != event_id:
            raise SyncError(f"{what}: event id {event_id!r} must be a whole number")
        if not 0 <= int(event_id) < limit:
            raise SyncError(f"{what}: event id {event_id} is out of range; chip "
                             f"'{self.device.chip.name}' has event ids 0-{limit - 1}")
        if Pipe(src) == Pipe(dst):
            raise SyncError(f"{what}: source and destination pipe are both {Pipe(src).name}; a pipe "
                             f"is already in order with itself (use pipe_barrier for that)")

    def take_event(self, src: int, dst: int, owner: str) -> int:
        """Reserve a free event id for (src, dst) for a queue, as TPipe does."""
        used = self.events_in_use.setdefault((int(src), int(dst)), {})
        for eid in range(self.device.chip.event_ids):
            if eid not in used:
                used[eid] = owner
                return eid
        raise SyncError(f"{owner}: no free event id for {Pipe(src).name}->{Pipe(dst).name} on chip "
                        f"'{self.device.chip.name}' (ids 0-{self.device.chip.event_ids - 1} held by "
                        f"{', '.join(used.values())}); use fewer queues between these pipes")

    def end_block(self) -> None:
        """A block finished: a full barrier orders it before the next block on this core, and
        its TPipe (buffers and event ids) goes away."""
        end = self.issue(Pipe.S, Kind.BARRIER_ALL, Op.BARRIER, name=f"end of block {self.block_idx}")
        self.v_written.clear()
        self.m_last_c = None
        for buf in self.buffers.values():
            for rec in buf.log:
                if rec.released < 0:          # never freed (a TBuf, a leaked slot): live to here
                    rec.released = end
            buf.release_all()
        self.events_in_use.clear()


class Device:
    """A chip prepared for one launch of ``block_dim`` blocks of a kernel of ``core_type``.

    core_type: "aic" (the default: cube kernels, and every kernel before core types existed),
    "aiv" (vector-only) or "mix". The blocks run on ``chip.cores_for(core_type)`` cores: on a
    split chip (910B class) an "aiv" kernel gets the AIV cores, on a coupled chip every kernel
    gets the AI cores. An "aiv" core has only the UB of the on-chip buffers; an "aic" core of a
    split chip has every buffer but the UB; a coupled core has all five. A "mix" launch on a
    split chip (``mix``; Ascend C's KERNEL_TYPE_MIX_AIC_1_2) runs each block on one AIC and the
    two AIVs of its AI core: ``active_cores`` AI cores, cores 0 .. G-1 the AICs and G + 2g + s
    AIV s of AI core g (:mod:`npulab.lang.mix`); on a coupled chip "mix" is the coupled core.
    GM shares (:mod:`.gm`) count AI cores: in a mix launch the AIC and its two AIVs each get the
    AI core's part (chosen: the AIVs move a small part of the bytes, mostly while the AIC
    computes; a share that follows when the three copy at once belongs to the GM model).

    The device reads :mod:`npulab.twins` once, here (``twins``: "cython" or "python"), and
    everything of its launch runs on that side: the instruction streams, the timeline
    scheduler, the queue calls and the byte moves.
    """

    def __init__(self, chip: ChipSpec | str = DEFAULT_CHIP, mode: str = "functional", block_dim: int = 1,
                 budget: int = DEFAULT_BUDGET, check_races: bool | None = None, core_type: str = "aic"):
        self.chip = get_chip(chip)
        if mode not in MODES:
            raise ArgumentError(f"mode must be one of {MODES}, got {mode!r}")
        if block_dim < 1:
            raise ArgumentError(f"block_dim must be at least 1, got {block_dim}")
        if core_type not in CORE_TYPES:
            raise ArgumentError(f"core_type must be one of {CORE_TYPES}, got {core_type!r}")
        self.mode = mode
        self.functional = mode == "functional"
        self.block_dim = block_dim
        self.core_type = core_type
        self.active_cores = min(block_dim, self.chip.cores_for(core_type))
        self.mix = core_type == "mix" and self.chip.arch == "split"
        self.budget = budget
        self.check_races = self.functional if check_races is None else check_races
        self.twins = twins.side()
        self.streams = twins.pick(_stream, stream, self.twins)            # Budget and Stream
        self.Timeline = twins.pick(_timeline.Timeline, timeline.Timeline, self.twins)
        self.moves = formats.moves(self.twins)      # the byte moves and the worker (formats.Moves)
        self.counter = self.streams.Budget(budget)
        self.memo: dict = {}                # derived costs the kernel language works out once a launch
        self.cost = CostModel(self.chip, self.active_cores, core_type)   # what each instruction costs
        G = self.active_cores
        if self.mix:
            self.cores = [Core(self, g, "aic") for g in range(G)] + \
                [Core(self, G + 2 * g + s, "aiv", g, s) for g in range(G) for s in (0, 1)]
        else:
            role = "core" if self.chip.arch != "split" else "aiv" if core_type == "aiv" else "aic"
            self.cores = [Core(self, c, role) for c in range(G)]
        self.flags = CrossFlags(self)       # cross-core flags (sim/cross_core.py)
        self.gm = GmTraffic(self)           # every GM copy, settled at finish (sim/gm.py)
        self.gm_stats = None

    @property
    def issued(self) -> int:
        """Instructions the launch has issued so far, over all cores."""
        return self.counter.issued

    def core_for_block(self, block_idx: int) -> Core:
        """The core (in a mix launch: the AIC) that runs block ``block_idx``."""
        return self.cores[block_idx % self.active_cores]

    def aic_of(self, group: int) -> int:
        """Index of the AIC of AI core ``group`` (mix launch)."""
        return group

    def aivs_of(self, group: int) -> tuple[int, int]:
        """Indices of the two AIVs of AI core ``group`` (mix launch)."""
        return self.active_cores + 2 * group, self.active_cores + 2 * group + 1

    # -- the run ----------------------------------------------------------------------------
    def recycle_buffers(self, core: "Core | None" = None) -> None:
        """Give the functional byte arrays of ``core`` (default: every core) back, zeroed, for
        the next core or launch to take."""
        for c in self.cores if core is None else (core,):
            for buf in dict.values(c.buffers):
                buf.recycle(self.moves.worker.zero_bytes)

    def release(self) -> None:
        """The launch is over and its Trace made: break the reference cycles among the device's
        objects (each core and the GM model point back at the device, a stream at its budget
        check, an L0C buffer at its flush hook) so that they go with the last reference to the
        device, not at the cycle collector's next pass over them all. The cores, their buffers
        and their logs stay readable."""
        for core in self.cores:
            for buf in dict.values(core.buffers):
                buf.__dict__.pop("pending_flush", None)
            core.stream.over_budget = None
            core.device = None
        self.gm.device = None
        self.flags.device = None

    def finish(self):
        """Schedule every core, check races, and return the Trace. Cores that cross-core flags
        connect (a mix launch's AIC and AIVs) are scheduled together (:mod:`.cross_core`),
        every other core alone; a core's GM copies are then refined against its schedule."""
        from .trace import Trace
        self.gm_stats = self.gm.settle()    # GM copy durations: shared HBM, read/write split, L2
        done = {}
        for group in self.flags.components():
            done.update(self._schedule_group(group))
        if self.flags:
            x = self.chip.cross_core
            check_pending(self.flags, {c: tl for c, (tl, _, _) in done.items()}, x.max_pending,
                          x.flag_latency_cycles)
        timelines = []
        for core in self.cores:
            tl, dur, _ = done[core.index]
            start, end = (np.asarray(a) for a in tl.result()[:2])
            kind = np.asarray(core.kind)
            # when each instruction let its pipe go: work after dur (the rest of its time to
            # ``end`` it was in flight), a set at once, a wait or a barrier at its end
            busy_end = np.where(kind == Kind.WORK, start + dur,
                                np.where((kind == Kind.SET) | (kind == Kind.CROSS_SET), start, end))
            timelines.append((start, end, busy_end))
        if self.check_races:
            race = races.find_block_race(self.gm.block_accesses(),
                                         lambda c, i: int(self.cores[c].block[i]))
            if race is not None:
                raise self._explain_block_race(race)
        return Trace.from_device(self, timelines)

    def _schedule_group(self, group: list) -> dict:
        """Schedule the cores ``group`` (indices) together, refine their GM copies, check their
        races; {core: (Timeline, the durations it used, the cross joins)}."""
        cores = [self.cores[c] for c in group]
        # copies of the columns: ``refine`` rewrites core.dur, and ``dur`` must stay the
        # durations the last schedule used
        cols = {c.index: (np.array(c.pipe, dtype=np.int8), np.array(c.kind, dtype=np.int8),
                          np.array(c.key, dtype=np.int64), np.array(c.lat, dtype=np.int64)) for c in cores}
        latency = self.chip.cross_core.flag_latency_cycles if self.chip.cross_core else 0

        def run():
            durs = {c: np.array(self.cores[c].dur, dtype=np.int64) for c in group}
            tls = {c: self.Timeline(cols[c][0], cols[c][1], durs[c], cols[c][2], self.chip.issue_cycles,
                                    cols[c][3], self.chip.cube.fill_cycles) for c in group}
            try:
                joins = schedule_together(self.flags, group, tls, {c: cols[c][1] for c in group},
                                          {c: cols[c][2] for c in group}, latency)
            except DeadlockError as exc:
                if getattr(exc, "core", None) is None:
                    raise                           # between cores: explained already
                raise self._explain_deadlock(self.cores[exc.core], exc.blocked) from None
            return durs, tls, joins

        durs, tls, joins = run()
        # GM copies: the read/write split only where the two directions overlap
        for _ in range(GM_ROUNDS):
            # GM copies (the read/write split) and MTE1 loads (L1's port shared with MTE2): both
            # passes run on every core, each round
            changed = [c for c in group if self.gm.refine(self.cores[c], tls[c].result()[0]) |
                       l1port.refine(self.cores[c], tls[c].result()[0])]
            if not changed:
                break
            durs, tls, joins = run()
        if self.check_races and any(c.accesses for c in cores):
            streams = [(np.asarray(c.pipe).tolist(), np.asarray(c.kind).tolist(),
                        list(tls[c.index].result()[3]), tls[c.index].result()[2], c.accesses) for c in cores]
            local = {c: n for n, c in enumerate(group)}
            race = races.find_race_cores(streams, {(local[r], i): [(local[s], j) for s, j in src]
                                                   for (r, i), src in joins.items()})
            if race is not None:
                (cj, j), (ci, i) = race[:2]
                if cj == ci:
                    raise self._explain_race(cores[ci], (j, i) + tuple(race[2:]))
                raise self._explain_cross_race(cores[cj], j, cores[ci], i, *race[2:])
        return {c: (tls[c], durs[c], joins) for c in group}

    def describe(self, core: Core, i: int, with_core: bool = False) -> str:
        where = f"block {core.block[i]}, {core.label}" if with_core else f"block {core.block[i]}"
        return f"#{i} {Pipe(int(core.pipe[i])).name} '{core.name[i]}' ({where})"

    def _explain_deadlock(self, core: Core, blocked) -> DeadlockError:
        lines = []
        for i in blocked:
            p = Pipe(int(core.pipe[i])).name
            if core.kind[i] == Kind.WAIT:
                flag = describe_key(int(core.key[i]))
                lines.append(f"pipe {p} waits at {self.describe(core, i)} on flag {flag}, "
                             f"which no set_flag that can still run will set")
            elif core.kind[i] == Kind.BARRIER_ALL:
                lines.append(f"the scalar unit waits at {self.describe(core, i)} for every pipe to drain")
            else:
                lines.append(f"the scalar unit cannot issue {self.describe(core, i)}")
        return DeadlockError(f"deadlock on core {core.index}: " + "; ".join(lines) +
                             ". Every wait_flag needs a matching set_flag (same source pipe, "
                             "destination pipe and event id) that can run first.", blocked=blocked)

    def _explain_block_race(self, race) -> RaceError:
        (cj, _, j, wj), (ci, _, i, wi), buf, lo, hi = race
        ij = self.describe(self.cores[cj], j, with_core=True)
        ii = self.describe(self.cores[ci], i, with_core=True)
        return RaceError(
            f"race between blocks in {buf} bytes [{lo}, {hi}): {ii} {'writes' if wi else 'reads'} what "
            f"{ij} {'writes' if wj else 'reads'}. The blocks of "
            f"a launch run at the same time on different cores, in no fixed order, so nothing "
            f"orders one block's copies before another's. Fix: give each block its own part of "
            f"the tensor (offset it by get_block_idx()), or split the work into two launches.")

    def _explain_cross_race(self, cj: Core, j: int, ci: Core, i: int, buf, lo, hi) -> RaceError:
        (ca, a), (cb, b) = sorted([(cj, j), (ci, i)], key=lambda x: x[0].index)
        def what(c, k):
            w = any(w for bb, l, h, w in c.accesses[k] if bb == buf and l < hi and lo < h)
            return f"{self.describe(c, k, with_core=True)} {'writes' if w else 'reads'}"
        return RaceError(
            f"race between {ca.label} and {cb.label} in {buf} bytes [{lo}, {hi}): {what(ca, a)} and "
            f"{what(cb, b)} these bytes, and no cross-core flag orders the two: the cores of a mix "
            f"launch run at the same time. Fix: after the access that must come first, "
            f"cross_core_set_flag(2, its pipe, id) on its core; before the other, cross_core_wait_flag(id).")

    def _explain_race(self, core: Core, race) -> RaceError:
        j, i, buf, lo, hi = race
        j, i = min(j, i), max(j, i)          # tell it in program order, as the learner wrote it
        wj = any(w for b, l, h, w in core.accesses[j] if b == buf and l < hi and lo < h)
        wi = any(w for b, l, h, w in core.accesses[i] if b == buf and l < hi and lo < h)
        what = {(True, False): "reads what", (True, True): "writes what",
                (False, True): "overwrites what"}[(wj, wi)]
        verb = "wrote" if wj else "still reads"
        pj, pi = Pipe(int(core.pipe[j])).name, Pipe(int(core.pipe[i])).name
        return RaceError(
            f"race on core {core.index} in {buf} bytes [{lo}, {hi}): {self.describe(core, i)} "
            f"{what} {self.describe(core, j)} {verb}, with nothing ordering {pj} before {pi}. "
            f"Fix: set_flag({pj}, {pi}, id) after the first and wait_flag({pj}, {pi}, id) before "
            f"the second, or pass the tensor through a queue (enque/deque, free_tensor/alloc_tensor).")
