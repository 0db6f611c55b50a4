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
from . import races, stream, timeline
from .cost import CostModel
from .gm import GmTraffic
from .isa import Kind, Op, Pipe, describe_key
from .memory import Buffer

MODES = ("functional", "timing")
DEFAULT_BUDGET = 20_000_000


#: at most this many passes settle how a core's GM reads and writes overlap
#: (:meth:`GmTraffic.refine`); they stop once no copy would change by more than 1%, in two to
#: four passes for the kernels here
GM_ROUNDS = 16


class _AivBuffers(dict):
    """The buffers of a core in a ``core_type="aiv"`` launch. An AIV core has only the UB; the
    other buffers stay in the dict, never used, so that logs, traces and views have the same
    shape for every launch, but asking for one by name (every cube-path tensor starts with
    ``init_buffer`` of an L1 or L0 queue: load_data, mmad and fixpipe take those) is the error.
    The check runs once per ``init_buffer``, never on the per-instruction path."""

    def __init__(self, items, where: str):
        super().__init__(items)
        self.where = where

    def __getitem__(self, name):
        if name != "UB":
            raise CoreTypeError(
                f"{self.where}: buffer {name} does not exist on an AIV core (core_type='aiv'): a "
                f"vector-only kernel has the UB, the vector and scalar units and MTE2/MTE3, but no "
                f"L1, L0A, L0B, L0C and no cube. Launch a kernel that uses {name} with "
                f"core_type='aic' or 'mix'.")
        return dict.__getitem__(self, name)


class _AicBuffers(dict):
    """The buffers of an AIC (cube) core of a split chip (910B class): L1, L0A, L0B and L0C, no
    UB (data/FACTS.md: AIC and AIV exchange data through GM; FixPipe drains L0C to GM or L1)."""

    def __init__(self, items, where: str):
        super().__init__(items)
        self.where = where

    def __getitem__(self, name):
        if name == "UB":
            raise CoreTypeError(
                f"{self.where}: buffer UB does not exist on an AIC core of a split chip "
                f"(core_type='aic'): the cube core has L1, L0A, L0B and L0C, FixPipe drains to GM "
                f"or L1, and the vector work runs on the AIV cores. Launch the vector part with "
                f"core_type='aiv', or use a coupled chip (910, 310) where one core has both.")
        return dict.__getitem__(self, name)


class Core:
    """One AI core (or, in a ``core_type="aiv"`` launch, one vector core): its buffers and its
    instruction stream (columns, program order)."""

    def __init__(self, device: "Device", index: int):
        self.device, self.index = device, index
        chip = device.chip
        functional = device.functional
        buffers = {name: Buffer(name, index, chip.buffer_bytes(name), chip.buffer_align(name), functional)
                   for name in BUFFERS}
        where = f"core {index} of chip '{chip.name}'"
        if device.core_type == "aiv":
            self.buffers = _AivBuffers(buffers, where)
        elif device.core_type == "aic" and chip.arch == "split":
            self.buffers = _AicBuffers(buffers, where)
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
    split chip has every buffer but the UB (a coupled core, or a "mix" launch, has all five).

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
        self.budget = budget
        self.check_races = self.functional if check_races is None else check_races
        self.twins = twins.side()
        self.streams = twins.pick(_stream, stream, self.twins)            # Budget and Stream
        self.schedule = twins.pick(_timeline.schedule, timeline.schedule, self.twins)
        self.moves = formats.moves(self.twins)      # the byte moves and the worker (formats.Moves)
        self.counter = self.streams.Budget(budget)
        self.memo: dict = {}                # derived costs the kernel language works out once a launch
        self.cost = CostModel(self.chip, self.active_cores, core_type)   # what each instruction costs
        self.cores = [Core(self, c) for c in range(self.active_cores)]
        self.gm = GmTraffic(self)           # every GM copy, settled at finish (sim/gm.py)
        self.gm_stats = None

    @property
    def issued(self) -> int:
        """Instructions the launch has issued so far, over all cores."""
        return self.counter.issued

    def core_for_block(self, block_idx: int) -> Core:
        return self.cores[block_idx % self.active_cores]

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

    def finish(self):
        """Schedule every core, check races, and return the Trace."""
        from .trace import Trace
        schedule = self.schedule
        self.gm_stats = self.gm.settle()    # GM copy durations: shared HBM, read/write split, L2
        timelines = []
        for core in self.cores:
            # copies of the columns: ``refine`` rewrites core.dur, and ``dur`` must stay the
            # durations the last schedule used
            pipe = np.array(core.pipe, dtype=np.int8)
            kind = np.array(core.kind, dtype=np.int8)
            key, lat = np.array(core.key, dtype=np.int64), np.array(core.lat, dtype=np.int64)
            try:
                dur = np.array(core.dur, dtype=np.int64)
                start, end, order, match = schedule(pipe, kind, dur, key, self.chip.issue_cycles, lat)
                # GM copies: the read/write split only where the two directions overlap
                for _ in range(GM_ROUNDS):
                    if not self.gm.refine(core, start):
                        break
                    dur = np.array(core.dur, dtype=np.int64)
                    start, end, order, match = schedule(pipe, kind, dur, key, self.chip.issue_cycles, lat)
            except DeadlockError as exc:
                raise self._explain_deadlock(core, exc.blocked) from None
            if self.check_races and core.accesses:
                race = races.find_race(np.asarray(core.pipe).tolist(), np.asarray(core.kind).tolist(),
                                       list(match), order, core.accesses)
                if race is not None:
                    raise self._explain_race(core, race)
            start, end = np.asarray(start), np.asarray(end)
            # when each instruction let its pipe go: work after dur (the rest of its time to
            # ``end`` it was in flight), a set at once, a wait or a barrier at its end
            busy_end = np.where(kind == Kind.WORK, start + dur, np.where(kind == Kind.SET, start, end))
            timelines.append((start, end, busy_end))
        if self.check_races:
            race = races.find_block_race(self.gm.block_accesses(),
                                         lambda c, i: int(self.cores[c].block[i]))
            if race is not None:
                raise self._explain_block_race(race)
        return Trace.from_device(self, timelines)

    def describe(self, core: Core, i: int, with_core: bool = False) -> str:
        where = f"block {core.block[i]}, core {core.index}" if with_core else f"block {core.block[i]}"
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
