"""The timeline scheduler, in plain Python: the specification of ``npulab._timeline``.

Given one core's instruction stream in program order, compute when every instruction starts
and ends. The model, which the Cython twin implements line for line:

* The scalar unit walks the program in order. An instruction of the scalar pipe (S) runs on
  it directly. Any other instruction is *issued* to its pipe's queue, which takes
  ``issue_cycles`` of the scalar unit's time; queues are deep enough never to fill.
* Every other pipe runs its queue in order: an instruction starts when it has been issued and
  the pipe has finished the instruction before it; ``WORK`` then takes ``dur`` cycles.
* ``SET`` (set_flag) takes no time on its pipe: it fires once every earlier instruction of that
  pipe has finished, that is at its own start.
* ``WAIT`` (wait_flag) stalls its pipe from its start until the matching ``SET`` has fired. The
  k-th wait on a flag key matches the k-th set of that key; a wait with no k-th set, or one
  that waits in a cycle, can never start: a deadlock.
* ``BARRIER_ALL`` (pipe_barrier(PIPE_ALL)) runs on the scalar unit once every instruction
  issued before it, on every pipe, has finished.

The answer does not depend on the order in which ready instructions are evaluated (it is the
least fixed point of a set of max-plus equations); ``order`` records the order this algorithm
used, which the race checker replays.
"""
from __future__ import annotations

from ..errors import DeadlockError

S, WORK, SET, WAIT, BARRIER_ALL = 0, 0, 1, 2, 3
NUM_PIPES = 7


def match_flags(kind, key):
    """match[i] = index of the SET that WAIT i consumes (the k-th set of its key), or -1."""
    sets_of_key: dict[int, list[int]] = {}
    for i, k in enumerate(kind):
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


def schedule(pipe, kind, dur, key, issue_cycles=1):
    """Return ``(start, end, order, match)`` as lists for one core's stream.

    pipe, kind, dur, key: sequences of int of one length (key is only read for SET and WAIT).
    Raises DeadlockError, whose ``blocked`` lists the instructions that can never start.
    """
    n = len(pipe)
    match = match_flags(kind, key)
    start = [0] * n
    end = [0] * n
    done = [False] * n
    order = []
    queues = [[] for _ in range(NUM_PIPES)]   # issued, not yet run, per pipe
    heads = [0] * NUM_PIPES
    pipe_free = [0] * NUM_PIPES
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
                s = max([sclock] + pipe_free)
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
                    e = s + dur[i]
                elif kind[i] == WAIT:
                    e = max(s, end[match[i]])
                else:                         # SET: fires at its start
                    e = s
                finish(i, s, e)
                pipe_free[p] = e
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
