"""The timeline scheduler, in plain Python: the specification of ``npulab._timeline``.

Given one core's instruction stream in program order, compute when every instruction starts
and ends. The model, which the Cython twin implements line for line:

* The scalar unit walks the program in order. An instruction of the scalar pipe (S) runs on
  it directly. Any other instruction is *issued* to its pipe's queue, which takes
  ``issue_cycles`` of the scalar unit's time; queues are deep enough never to fill.
* Every other pipe runs its queue in order: an instruction starts when it has been issued and
  the pipe is free, ``start = max(issued, pipe_free)``. ``WORK`` then *occupies* the pipe for
  ``dur`` cycles (the pipe is free again at ``start + dur``) and stays *in flight* for ``lat``
  more cycles: it completes at ``end = start + dur + lat``. That is a DMA engine keeping
  several requests in flight: a copy pays its start-up latency as ``lat``, and the next copy
  moves its bytes meanwhile. A pipe completes in order too: ``end`` is at least the latest
  ``end`` of its pipe so far. (Copies, pipelined mmads and vector instructions have
  ``lat > 0``: their start-up; scalar work completes at once. A dependent instruction of the
  same pipe waits for ``end`` through a pipe barrier, which lang.sync inserts for the vector
  pipe as Ascend C's compiler does.)
* ``SET`` (set_flag) takes no time on its pipe: it fires once every earlier instruction of that
  pipe has *completed*, ``end = max(start, latest end of its pipe)``.
* ``WAIT`` (wait_flag) stalls its pipe from its start until the matching ``SET`` has fired. The
  k-th wait on a flag key matches the k-th set of that key; a wait with no k-th set, or one
  that waits in a cycle, can never start: a deadlock.
* ``BARRIER_ALL`` (pipe_barrier(PIPE_ALL)) runs on the scalar unit once every instruction
  issued before it, on every pipe, has completed.

The answer does not depend on the order in which ready instructions are evaluated (it is the
least fixed point of a set of max-plus equations); ``order`` records the order this algorithm
used, which the race checker replays.
"""
from __future__ import annotations

from ..errors import ArgumentError, DeadlockError
from .isa import NUM_PIPES, Kind, Pipe

# the numbers (pyx/_isa.pxd) as plain ints: the loops below compare them millions of times
S, WORK, SET, WAIT, BARRIER_ALL = int(Pipe.S), int(Kind.WORK), int(Kind.SET), int(Kind.WAIT), int(Kind.BARRIER_ALL)


def match_flags(kind, key):
    """match[i] = index of the SET that WAIT i consumes (the k-th set of its key), or -1.
    Raises ArgumentError when a SET or WAIT has a negative key."""
    sets_of_key: dict[int, list[int]] = {}
    for i, k in enumerate(kind):
        if k == SET or k == WAIT:
            if key[i] < 0:
                raise ArgumentError(f"flag key of instruction {i} is negative ({key[i]})")
            if k == SET:
                sets_of_key.setdefault(key[i], []).append(i)
    used: dict[int, int] = {}
    match = [-1] * len(kind)
    for i, k in enumerate(kind):
        if k == WAIT:
            n = used.get(key[i], 0)
            used[key[i]] = n + 1
            sets = sets_of_key.get(key[i], ())
            match[i] = sets[n] if n < len(sets) else -1
    return match


def schedule(pipe, kind, dur, key, issue_cycles=1, lat=None):
    """Return ``(start, end, order, match)`` as lists for one core's stream.

    pipe, kind, dur, key: sequences of int of one length (key is only read for SET and WAIT).
    lat: the in-flight cycles after each instruction's work (default none); read only for
    WORK off the scalar pipe. ``end`` is when an instruction completed; a WORK instruction
    occupied its pipe over ``[start, start + dur)``.
    Raises DeadlockError, whose ``blocked`` lists the instructions that can never start, and
    ArgumentError for columns of different lengths or a pipe out of range.
    """
    n = len(pipe)
    lat = [0] * n if lat is None else lat
    if len(kind) != n or len(dur) != n or len(key) != n or len(lat) != n:
        raise ArgumentError("pipe, kind, dur, key and lat must have one length")
    match = match_flags(kind, key)
    if n and (min(pipe) < 0 or max(pipe) >= NUM_PIPES):
        i = next(i for i, p in enumerate(pipe) if not 0 <= p < NUM_PIPES)
        raise ArgumentError(f"pipe of instruction {i} is {pipe[i]}; expected 0..{NUM_PIPES - 1}")
    start = [0] * n
    end = [0] * n
    done = [False] * n
    order = []
    queues = [[] for _ in range(NUM_PIPES)]   # issued, not yet run, per pipe
    heads = [0] * NUM_PIPES
    pipe_free = [0] * NUM_PIPES       # when each pipe can start its next instruction
    last_end = [0] * NUM_PIPES        # when everything issued to it so far has completed
    issued_at = [0] * n
    sclock = 0          # the scalar unit's time
    cursor = 0          # next instruction the scalar unit has not passed

    def finish(i, s, e):
        start[i], end[i], done[i] = s, e, True
        order.append(i)

    while True:
        progress = False
        # 1. the scalar unit walks the program until something stops it
        while cursor < n:
            i = cursor
            if kind[i] == BARRIER_ALL:
                if any(heads[p] < len(queues[p]) for p in range(NUM_PIPES)):
                    break                     # some pipe still has work: wait for it
                s = max([sclock] + last_end)
                finish(i, s, s)
                sclock = s
            elif pipe[i] == S:
                if kind[i] == WAIT and not (match[i] >= 0 and done[match[i]]):
                    break                     # the scalar unit itself is stalled
                s = sclock
                e = s + dur[i] if kind[i] == WORK else s
                if kind[i] == WAIT:
                    e = max(s, end[match[i]])
                finish(i, s, e)
                sclock = e
            else:
                issued_at[i] = sclock
                sclock += issue_cycles
                queues[pipe[i]].append(i)
            cursor += 1
            progress = True
        # 2. every other pipe runs its queue in order until a wait stops it
        for p in range(1, NUM_PIPES):
            q = queues[p]
            while heads[p] < len(q):
                i = q[heads[p]]
                if kind[i] == WAIT and not (match[i] >= 0 and done[match[i]]):
                    break
                s = max(issued_at[i], pipe_free[p])
                if kind[i] == WORK:
                    pipe_free[p] = s + dur[i]
                    e = max(s + dur[i] + lat[i], last_end[p])
                elif kind[i] == WAIT:
                    e = pipe_free[p] = max(s, end[match[i]])
                else:                         # SET: fires when its pipe has completed everything
                    pipe_free[p] = s
                    e = max(s, last_end[p])
                finish(i, s, e)
                last_end[p] = max(last_end[p], e)
                heads[p] += 1
                progress = True
        if cursor == n and all(heads[p] == len(queues[p]) for p in range(NUM_PIPES)):
            return start, end, order, match
        if not progress:
            blocked = [queues[p][heads[p]] for p in range(NUM_PIPES) if heads[p] < len(queues[p])]
            if cursor < n:
                blocked.append(cursor)
            raise DeadlockError(f"deadlock: instructions {sorted(blocked)} can never start",
                                blocked=sorted(blocked))
