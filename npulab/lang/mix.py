"""Mix kernels on a split chip (910B): one kernel body on an AIC and the two AIVs of its AI core.

Ascend C compiles a mix kernel (``KERNEL_TYPE_MIX_AIC_1_2``) twice, for the cube core and for
the vector core, and starts ``block_dim`` AICs and ``2 x block_dim`` AIVs; the body branches on
``ASCEND_IS_AIC`` / ``ASCEND_IS_AIV``. Here ``launch(kernel, block_dim, ..., core_type="mix")``
runs the same Python body once on each of the three cores of a block, and the body branches on
:func:`is_aic` / :func:`is_aiv`::

    def kernel(a, b, ws, y, t):
        if is_aic():                       # L1, L0A/B/C, the cube, FixPipe to GM: no UB
            ... mmad; fixpipe(ws[slot], ...)
            cross_core_set_flag(2, PIPE_FIX, AIC_DONE)
        if is_aiv():                       # the UB and the vector unit: no L1, no cube
            cross_core_wait_flag(AIC_DONE, PIPE_MTE2)
            ... data_copy(x, ws[...]); gelu; data_copy(y[...], out)

The AIC and its AIVs share nothing on chip: data goes through GM (a workspace), and the order
between a write on one core and a read on another comes only from cross-core flags
(:mod:`npulab.sim.cross_core` has their rules, the race checker holds a kernel to them).
:func:`get_block_idx` is the block on the AIC and ``2 x block + sub-block`` on an AIV, as Ascend
C's ``GetBlockIdx`` in a 1:2 mix kernel: the AI core of an AIV is ``get_block_idx() //
get_sub_block_num()`` (catlass writes it so).

The simulator runs the three bodies of a block by turns on threads of the host, one at a time
(:class:`MixRun`): in a functional run a body that reaches a cross-core wait whose set has not
been issued yet hands over to another, so that every number is computed after the numbers it
depends on, as on the chip; the instruction streams are the same in timing mode, where the
bodies simply run one after another.
"""
from __future__ import annotations

import threading

from ..errors import DeadlockError, SyncError
from ..sim.cross_core import MODES, nth as _nth, set_key
from ..sim.isa import Kind, Op, Pipe
from .context import current


def _core():
    return current().core


def is_aic() -> bool:
    """Ascend C ``ASCEND_IS_AIC``: the body runs on a cube core (AIC) of a split chip. False on
    a coupled chip, whose AI cores are neither (``g_coreType`` is MIX there)."""
    return _core().role == "aic"


def is_aiv() -> bool:
    """Ascend C ``ASCEND_IS_AIV``: the body runs on a vector core (AIV) of a split chip."""
    return _core().role == "aiv"


def get_sub_block_idx() -> int:
    """Ascend C ``GetSubBlockIdx()``: an AIV's 0 or 1 within its AI core (0 elsewhere)."""
    return _core().sub


def get_sub_block_num() -> int:
    """Ascend C ``GetSubBlockNum()``: AIVs of this core's AI core that the kernel runs on (2 on
    an AIV of a mix launch, 1 elsewhere: asc-devkit asc_get_sub_block_num)."""
    core = _core()
    return 2 if core.device.mix and core.role == "aiv" else 1


def _check(what: str, pipe, flag_id) -> tuple:
    ctx = current()
    dev, core = ctx.device, ctx.core
    if dev.chip.arch != "split":
        raise SyncError(f"{what}: cross-core flags exist on split chips (910B) only; chip '{dev.chip.name}' "
                        f"holds cube and vector in one core: order its pipes with set_flag/wait_flag")
    if not dev.mix:
        raise SyncError(f"{what}: cross-core flags need a mix launch (core_type='mix', Ascend C's "
                        f"KERNEL_TYPE_MIX_AIC_1_2), got core_type='{dev.core_type}'")
    if not isinstance(pipe, Pipe) and not isinstance(pipe, int) or int(pipe) not in range(len(Pipe) - 1):
        raise SyncError(f"{what}: pipe must be one of PIPE_S, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_M, "
                        f"PIPE_V, PIPE_FIX (not PIPE_ALL), got {pipe!r}")
    n = dev.chip.cross_core.flag_ids
    if isinstance(flag_id, bool) or not isinstance(flag_id, int) or not 0 <= flag_id < n:
        raise SyncError(f"{what}: flag id {flag_id!r} is out of range; chip '{dev.chip.name}' has cross-core "
                        f"flag ids 0-{n - 1}")
    return dev, core, Pipe(pipe)


def cross_core_set_flag(mode: int, pipe: Pipe, flag_id: int) -> None:
    """Ascend C ``CrossCoreSetFlag<mode, pipe>(flagId)``: an instruction on ``pipe`` that fires
    once every earlier instruction of that pipe has completed and raises the counter ``flag_id``
    of the cores ``mode`` names: 2 = this AI core's AIC <-> its two AIVs (an AIV's set counts
    once both AIVs have set), 1 = its two AIVs, 0 = every AIC (or every AIV) of the launch."""
    what = f"cross_core_set_flag({mode!r}, {pipe!r}, {flag_id!r})"
    dev, core, pipe = _check(what, pipe, flag_id)
    if mode not in MODES:
        raise SyncError(f"{what}: mode must be 0 (every AIC or every AIV of the launch), 1 (the two AIVs "
                        f"of an AI core) or 2 (an AI core's AIC and AIVs), got {mode!r}")
    if mode == 1 and core.role == "aic":
        raise SyncError(f"{what}: mode 1 synchronises the two AIVs of an AI core; {core.label} is a cube core "
                        f"(use mode 2 to reach its AIVs)")
    if mode == 0 and dev.block_dim > dev.active_cores:
        raise SyncError(f"{what}: mode 0 synchronises every {core.role.upper()} of the launch, so every block "
                        f"must be on a core at once: block_dim {dev.block_dim} is more than the "
                        f"{dev.active_cores} AI cores")
    i = core.issue(pipe, Kind.CROSS_SET, Op.CROSS_SET_FLAG, key=set_key(mode, flag_id),
                   name=f"cross_core_set_flag mode {mode} {pipe.name} #{flag_id}")
    dev.flags.add_set(core, mode, flag_id, pipe, i, what)


def cross_core_wait_flag(flag_id: int, pipe: Pipe = Pipe.S) -> None:
    """Ascend C ``CrossCoreWaitFlag<mode, pipe = PIPE_S>(flagId)``: ``pipe`` (by default the
    scalar unit, so everything after) waits until the counter ``flag_id`` of this core has risen,
    then lowers it by one."""
    what = f"cross_core_wait_flag({flag_id!r}, {pipe!r})"
    dev, core, pipe = _check(what, pipe, flag_id)
    run = getattr(dev, "mix_run", None)
    if run is not None:
        run.wait_for(core, flag_id, pipe)
    i = core.issue(pipe, Kind.CROSS_WAIT, Op.CROSS_WAIT_FLAG, key=flag_id,
                   name=f"cross_core_wait_flag {pipe.name} #{flag_id}")
    dev.flags.add_wait(core, flag_id, pipe, i, what)


class _Abort(BaseException):
    """Unwinds a body's thread when another body failed (never seen outside the run)."""


class MixRun:
    """Run a mix kernel's bodies, one thread per core, one at a time (a baton).

    Core c runs the blocks of its AI core in order, ``run_block(core, b)`` each. A body reaching a cross-core wait whose rise its senders have not issued
    yet (:meth:`CrossFlags.issued_rises`) passes the baton to the next core that can go on;
    when none can, the kernel deadlocks and the run raises DeadlockError naming every waiting
    core and flag. An error in any body stops them all and is raised in the caller's thread."""

    def __init__(self, dev, block_dim: int, run_block):
        self.dev, self.block_dim, self.run_block = dev, block_dim, run_block
        self.cond = threading.Condition()
        self.turn = 0
        self.waiting: dict = {}              # core index -> (flag id, pipe) it waits on
        self.done = [False] * len(dev.cores)
        self.error: BaseException | None = None

    def _blocks(self, core) -> range:
        return range(core.group, self.block_dim, self.dev.active_cores)

    def _body(self, core) -> None:
        with self.cond:
            while self.turn != core.index and self.error is None:
                self.cond.wait()
        try:
            if self.error is not None:
                return
            for b in self._blocks(core):
                self.run_block(core, b)
        except _Abort:
            return
        except BaseException as exc:        # noqa: BLE001 - handed to the caller's thread
            with self.cond:
                if self.error is None:
                    self.error = exc
                self.cond.notify_all()
            return
        with self.cond:
            self.done[core.index] = True
            self._pass(core.index)

    def _can_go(self, c: int) -> bool:
        if self.done[c]:
            return False
        if c not in self.waiting:
            return True
        f = self.waiting[c][0]
        return self.dev.flags.issued_rises(c, f) > self.dev.flags.issued_waits(c, f)

    def _pass(self, me: int) -> None:
        """Hand the baton to the next core after ``me`` that can go on (caller holds cond)."""
        n = len(self.done)
        for step in range(1, n + 1):
            c = (me + step) % n
            if self._can_go(c):
                self.turn = c
                self.cond.notify_all()
                return
        if not all(self.done) and self.error is None:
            self.error = self._deadlock()
        self.cond.notify_all()

    def wait_for(self, core, flag_id: int, pipe: Pipe) -> None:
        """Called by a body at a cross-core wait: go on once the rise it takes has been issued."""
        c = core.index
        with self.cond:
            self.waiting[c] = (flag_id, pipe)
            while not self._can_go(c):
                self._pass(c)
                while self.turn != c and self.error is None:
                    self.cond.wait()
                if self.error is not None:
                    raise _Abort
                if self.turn == c and not self._can_go(c):
                    continue
            del self.waiting[c]
            self.turn = c

    def _deadlock(self) -> DeadlockError:
        flags, cores = self.dev.flags, self.dev.cores
        lines = []
        for c, (f, pipe) in sorted(self.waiting.items()):
            k = flags.issued_waits(c, f)
            ch = flags.channels.get((c, f))
            if ch is None:
                got = "which no set of the kernel issued so far raises"
            else:
                got = "; its senders set it " + ", ".join(
                    f"{cores[s].label} {len(flags.sets.get((s, ch[0], f), ()))}" for s in ch[1]) + " times"
            lines.append(f"{cores[c].label} (block {cores[c].block_idx}) waits on cross-core flag {f} (pipe "
                         f"{Pipe(pipe).name}) for the {_nth(k + 1)} time, {got}")
        return DeadlockError(
            "deadlock between cores: " + "; ".join(lines) + ". Every cross_core_wait_flag needs a set "
            "from the other core that can be issued before it. (A functional run also stops a body at "
            "a wait on a pipe other than S, so that its numbers follow the data: a kernel that issues "
            "the releasing set only after such a wait runs in timing mode.)",
            blocked=sorted(self.waiting))

    def run(self) -> None:
        threads = [threading.Thread(target=self._body, args=(core,), daemon=True,
                                    name=f"npulab {core.label}") for core in self.dev.cores]
        self.dev.mix_run = self
        try:
            for t in threads:
                t.start()
            with self.cond:
                while not all(self.done) and self.error is None:
                    self.cond.wait()
                self.cond.notify_all()
            for t in threads:
                t.join()
        finally:
            self.dev.mix_run = None
        if self.error is not None:
            raise self.error


__all__ = ["is_aic", "is_aiv", "get_sub_block_idx", "get_sub_block_num", "cross_core_set_flag",
           "cross_core_wait_flag", "MixRun"]
