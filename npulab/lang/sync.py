"""Flags and barriers between pipes (Ascend C ``SetFlag`` / ``WaitFlag`` / ``PipeBarrier``).

``set_flag(src, dst, id)`` is an instruction on the *source* pipe that fires when every earlier
instruction of that pipe has finished; ``wait_flag(src, dst, id)`` is an instruction on the
*destination* pipe that stalls it until the flag is set, then clears it.

Within the vector pipe the kernel writes no barriers: :func:`vector_hazard` inserts
``pipe_barrier(PIPE_V)`` before a vector instruction that depends on one still in flight, as
Ascend C's compiler does with automatic synchronisation on. It orders the vector pipe with
itself only; a hand-off to another pipe still needs a flag (a queue's enque / deque).
"""
from __future__ import annotations

from ..errors import SyncError
from ..sim.isa import Kind, Op, Pipe, flag_key
from .context import current

PIPE_S, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3 = Pipe.S, Pipe.MTE1, Pipe.MTE2, Pipe.MTE3
PIPE_M, PIPE_V, PIPE_FIX, PIPE_ALL = Pipe.M, Pipe.V, Pipe.FIX, Pipe.ALL


def _check_user_event(core, src, dst, event_id, what):
    core.check_event(src, dst, event_id, what)
    holder = core.events_in_use.get((int(src), int(dst)), {}).get(int(event_id))
    if holder is not None:
        raise SyncError(f"{what}: event id {event_id} of {Pipe(src).name}->{Pipe(dst).name} is held by "
                        f"queue '{holder}', whose enque/deque use it; pick another id")


def _flag(what: str, kind: Kind, op: Op, src: Pipe, dst: Pipe, event_id: int) -> None:
    """Issue a set (on ``src``) or a wait (on ``dst``) of the flag ``src -> dst #event_id``."""
    core = current().core
    src, dst = Pipe(src), Pipe(dst)
    _check_user_event(core, src, dst, event_id, f"{what}({src.name}, {dst.name}, {event_id})")
    core.issue(src if kind == Kind.SET else dst, kind, op, key=flag_key(src, dst, event_id),
               name=f"{what} {src.name}->{dst.name} #{event_id}")


def set_flag(src: Pipe, dst: Pipe, event_id: int) -> None:
    """Ascend C ``SetFlag``: ``src`` raises the flag once its earlier work is done."""
    _flag("set_flag", Kind.SET, Op.SET_FLAG, src, dst, event_id)


def wait_flag(src: Pipe, dst: Pipe, event_id: int) -> None:
    """Ascend C ``WaitFlag``: ``dst`` waits for the flag before its later work."""
    _flag("wait_flag", Kind.WAIT, Op.WAIT_FLAG, src, dst, event_id)


def pipe_barrier(pipe: Pipe) -> None:
    """Order one pipe, or with ``PIPE_ALL`` wait until every pipe has finished everything issued
    before it.

    A pipe already starts its instructions in order; what a barrier adds is that the next one
    starts only once every earlier one has *completed*: an mmad's or a copy's result is there
    only after its start-up latency (:mod:`npulab.sim.timeline`). It is a flag the pipe sets
    for itself and waits on (``flag_key(pipe, pipe, 0)``, which no user flag can name)."""
    _barrier(current().core, Pipe(pipe), "")


def _barrier(core, pipe: Pipe, note: str) -> None:
    if pipe == Pipe.ALL:
        core.issue(Pipe.S, Kind.BARRIER_ALL, Op.BARRIER, name=f"pipe_barrier ALL{note}")
    else:
        key = flag_key(pipe, pipe, 0)
        core.issue(pipe, Kind.SET, Op.BARRIER, key=key, name=f"pipe_barrier {pipe.name}{note}")
        core.issue(pipe, Kind.WAIT, Op.BARRIER, key=key, name=f"pipe_barrier {pipe.name}{note} (wait)")
    if pipe in (Pipe.V, Pipe.ALL):
        core.v_written.clear()          # every vector result is there now (see vector_hazard)
    if pipe in (Pipe.M, Pipe.ALL):
        core.m_last_c = None            # and every mmad's sum is in L0C (lang.cube.mmad)


#: the most UB ranges :func:`vector_hazard` tracks between two PIPE_V barriers; one more
#: written range inserts a barrier (conservative, and never reached by the kernels here)
MAX_TRACKED = 32


def vector_hazard(core, reads, writes) -> None:
    """Automatic PIPE_V synchronisation, as the Ascend C compiler inserts it: call before
    issuing a vector instruction that reads ``reads`` and writes ``writes`` ((buffer, byte lo,
    byte hi) ranges).

    The vector pipe is pipelined (:mod:`npulab.lang.vector`): an instruction may start while
    earlier ones are still in flight, and its result is there only ``lat`` cycles after it
    leaves the pipe. Ascend C's PipeBarrier documentation: instructions of one pipe with a
    data dependency need a ``PipeBarrier`` between them (``Add(dst0, ...);
    PipeBarrier<PIPE_V>(); Mul(dst1, dst0, ...)``), and with automatic synchronisation on,
    the default for kernel projects, the compiler inserts it. So when this instruction reads
    (RAW) or writes (WAW) bytes that a vector instruction issued since the last PIPE_V barrier
    wrote, a ``pipe_barrier V (auto)`` goes before it: it starts once every earlier vector
    instruction has completed. A write after an earlier vector *read* (WAR) needs none: the
    pipe runs in order, so the earlier instruction fetched its operands before this one can
    write. The core keeps the ranges written since the last barrier in ``core.v_written``
    (a short list: a dependent instruction clears it)."""
    pending = core.v_written
    if pending:
        hit = len(pending) >= MAX_TRACKED or any(
            buf == pb and lo < phi and plo < hi
            for ranges in (reads, writes) for buf, lo, hi in ranges for pb, plo, phi in pending)
        if hit:
            _barrier(core, Pipe.V, " (auto)")
    pending.extend(writes)
