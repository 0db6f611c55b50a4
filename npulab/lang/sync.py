"""Flags and barriers between pipes (Ascend C ``SetFlag`` / ``WaitFlag`` / ``PipeBarrier``).

``set_flag(src, dst, id)`` is an instruction on the *source* pipe that fires when every earlier
instruction of that pipe has finished; ``wait_flag(src, dst, id)`` is an instruction on the
*destination* pipe that stalls it until the flag is set, then clears it.
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


def set_flag(src: Pipe, dst: Pipe, event_id: int) -> None:
    core = current().core
    src, dst = Pipe(src), Pipe(dst)
    _check_user_event(core, src, dst, event_id, f"set_flag({src.name}, {dst.name}, {event_id})")
    core.issue(src, Kind.SET, Op.SET_FLAG, key=flag_key(src, dst, event_id),
               name=f"set_flag {src.name}->{dst.name} #{event_id}")


def wait_flag(src: Pipe, dst: Pipe, event_id: int) -> None:
    core = current().core
    src, dst = Pipe(src), Pipe(dst)
    _check_user_event(core, src, dst, event_id, f"wait_flag({src.name}, {dst.name}, {event_id})")
    core.issue(dst, Kind.WAIT, Op.WAIT_FLAG, key=flag_key(src, dst, event_id),
               name=f"wait_flag {src.name}->{dst.name} #{event_id}")


def pipe_barrier(pipe: Pipe) -> None:
    """Order one pipe, or with ``PIPE_ALL`` wait until every pipe has finished everything issued
    before it.

    A pipe already starts its instructions in order; what a barrier adds is that the next one
    starts only once every earlier one has *completed*: an mmad's or a copy's result is there
    only after its start-up latency (:mod:`npulab.sim.timeline`). It is a flag the pipe sets
    for itself and waits on (``flag_key(pipe, pipe, 0)``, which no user flag can name)."""
    core = current().core
    pipe = Pipe(pipe)
    if pipe == Pipe.ALL:
        core.issue(Pipe.S, Kind.BARRIER_ALL, Op.BARRIER, name="pipe_barrier ALL")
    else:
        key = flag_key(pipe, pipe, 0)
        core.issue(pipe, Kind.SET, Op.BARRIER, key=key, name=f"pipe_barrier {pipe.name}")
        core.issue(pipe, Kind.WAIT, Op.BARRIER, key=key, name=f"pipe_barrier {pipe.name} (wait)")
