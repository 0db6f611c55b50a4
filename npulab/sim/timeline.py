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
* The cube (M) fills before its first fractal step: ``fill`` cycles. Behind a busy cube the
  fill overlaps the work before it: a ``WORK`` that could start (``r = max(issued, pipe_free)``)
  no later than the last ``WORK`` of M freed the pipe starts at ``max(r, issued + fill)``, so
  back-to-back mmads stream; one that finds the cube idle (stalled by a wait or a barrier, or
  issued late) starts at ``r + fill``. Its drain is its ``lat``.
* ``SET`` (set_flag) takes no time on its pipe: it fires once every earlier instruction of that
  pipe has *completed*, ``end = max(start, latest end of its pipe)``.
* ``WAIT`` (wait_flag) stalls its pipe from its start until the matching ``SET`` has fired. The
  k-th wait on a flag key matches the k-th set of that key; a wait with no k-th set, or one
  that waits in a cycle, can never start: a deadlock.
* ``BARRIER_ALL`` (pipe_barrier(PIPE_ALL)) runs on the scalar unit once every instruction
  issued before it, on every pipe, has completed.
* ``CROSS_SET`` (cross_core_set_flag) fires as ``SET`` does; the waits it releases are on other
  cores. ``CROSS_WAIT`` (cross_core_wait_flag) stalls its pipe (the scalar unit, when it is on
  S) from its start until a time that comes from outside: when the other core's set fired
  (:mod:`npulab.sim.cross_core` works it out). Until :meth:`Timeline.resolve` gives it that
  time, it cannot start, and the schedule stops there; :meth:`Timeline.run` goes on from where
  it stopped, so that the cores of a launch are scheduled together, each once.

The answer does not depend on the order in which ready instructions are evaluated (it is the
least fixed point of a set of max-plus equations); ``order`` records the order this algorithm
used, which the race checker replays.
"""
from __future__ import annotations

from ..errors import ArgumentError, DeadlockError
from .isa import NUM_PIPES, Kind, Pipe

# the numbers (pyx/_isa.pxd) as plain ints: the loops below compare them millions of times
M = int(Pipe.M)
S, WORK, SET, WAIT, BARRIER_ALL = int(Pipe.S), int(Kind.WORK), int(Kind.SET), int(Kind.WAIT), int(Kind.BARRIER_ALL)
CROSS_SET, CROSS_WAIT = int(Kind.CROSS_SET), int(Kind.CROSS_WAIT)


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


class Timeline:
    """One core's schedule, computed as far as its cross-core waits allow.

    pipe, kind, dur, key, lat as for :func:`schedule`. :meth:`run` schedules until the stream
    is done (True) or every pipe that still has work is stopped by a ``CROSS_WAIT`` whose time
    is not known yet (False); :meth:`resolve` gives a cross wait its time, and ``run`` then goes
    on. Every instruction's times are final once it is scheduled: ``count`` instructions so
    far, in the order :meth:`ordered` lists, ``end_of(i)`` when each completed.
    Raises DeadlockError (``blocked``: the instructions that can never start) when the stream
    stops and no cross wait is what stops it; ArgumentError for columns of different lengths,
    a pipe out of range or a negative flag key.
    """

    def __init__(self, pipe, kind, dur, key, issue_cycles=1, lat=None, fill=0):
        n = len(pipe)
        lat = [0] * n if lat is None else lat
        if len(kind) != n or len(dur) != n or len(key) != n or len(lat) != n:
            raise ArgumentError("pipe, kind, dur, key and lat must have one length")
        self.match = match_flags(kind, key)
        if n and (min(pipe) < 0 or max(pipe) >= NUM_PIPES):
            i = next(i for i, p in enumerate(pipe) if not 0 <= p < NUM_PIPES)
            raise ArgumentError(f"pipe of instruction {i} is {pipe[i]}; expected 0..{NUM_PIPES - 1}")
        self.pipe, self.kind, self.dur, self.lat = list(pipe), list(kind), list(dur), list(lat)
        self.issue_cycles = issue_cycles
        self.fill = fill                  # the cube's fill (pipe M)
        self.m_work_end = -1              # when the last WORK of M freed the cube
        self.start = [0] * n
        self.end = [0] * n
        self.done = [False] * n
        self.ext = [-1] * n               # a cross wait's time, once resolve() gave it
        self.order = []
        self.queues = [[] for _ in range(NUM_PIPES)]   # issued, not yet run, per pipe
        self.heads = [0] * NUM_PIPES
        self.pipe_free = [0] * NUM_PIPES  # when each pipe can start its next instruction
        self.last_end = [0] * NUM_PIPES   # when everything issued to it so far has completed
        self.issued_at = [0] * n
        self.sclock = 0                   # the scalar unit's time
        self.cursor = 0                   # next instruction the scalar unit has not passed

    @property
    def count(self) -> int:
        """How many instructions are scheduled so far."""
        return len(self.order)

    def ordered(self, lo: int, hi: int) -> list:
        """The ``lo``-th to ``hi - 1``-th instructions scheduled, in the order they were."""
        return self.order[lo:hi]

    def end_of(self, i: int) -> int:
        """When scheduled instruction ``i`` completed (a set: when it fired)."""
        return self.end[i]

    def resolve(self, i: int, t: int) -> None:
        """Cross wait ``i`` may complete at cycle ``t`` (at its start, if that is later)."""
        if not 0 <= i < len(self.kind) or self.kind[i] != CROSS_WAIT:
            raise ArgumentError(f"instruction {i} is not a cross-core wait")
        self.ext[i] = max(0, int(t))

    def _stopped(self, i) -> bool:
        """Instruction ``i`` at the head of its pipe (or at the scalar unit) cannot start yet."""
        k = self.kind[i]
        if k == WAIT:
            m = self.match[i]
            return not (m >= 0 and self.done[m])
        return k == CROSS_WAIT and self.ext[i] < 0

    def _finish(self, i, s, e):
        self.start[i], self.end[i], self.done[i] = s, e, True
        self.order.append(i)

    def blocked(self) -> list:
        """The instructions that stop the schedule: the head of every pipe with work left, and
        the scalar unit's next instruction (sorted)."""
        out = [self.queues[p][self.heads[p]] for p in range(NUM_PIPES) if self.heads[p] < len(self.queues[p])]
        if self.cursor < len(self.kind):
            out.append(self.cursor)
        return sorted(out)

    def run(self) -> bool:
        """Schedule as far as possible; True once every instruction is scheduled."""
        pipe, kind, dur, lat = self.pipe, self.kind, self.dur, self.lat
        end, queues, heads = self.end, self.queues, self.heads
        pipe_free, last_end, issued_at = self.pipe_free, self.last_end, self.issued_at
        n = len(kind)
        while True:
            progress = False
            # 1. the scalar unit walks the program until something stops it
            while self.cursor < n:
                i = self.cursor
                if kind[i] == BARRIER_ALL:
                    if any(heads[p] < len(queues[p]) for p in range(NUM_PIPES)):
                        break                     # some pipe still has work: wait for it
                    s = max([self.sclock] + last_end)
                    self._finish(i, s, s)
                    self.sclock = s
                elif pipe[i] == S:
                    if self._stopped(i):
                        break                     # the scalar unit itself is stalled
                    s = self.sclock
                    e = s + dur[i] if kind[i] == WORK else s
                    if kind[i] == WAIT:
                        e = max(s, end[self.match[i]])
                    elif kind[i] == CROSS_WAIT:
                        e = max(s, self.ext[i])
                    self._finish(i, s, e)
                    self.sclock = e
                else:
                    issued_at[i] = self.sclock
                    self.sclock += self.issue_cycles
                    queues[pipe[i]].append(i)
                self.cursor += 1
                progress = True
            # 2. every other pipe runs its queue in order until a wait stops it
            for p in range(1, NUM_PIPES):
                q = queues[p]
                while heads[p] < len(q):
                    i = q[heads[p]]
                    if self._stopped(i):
                        break
                    s = max(issued_at[i], pipe_free[p])
                    if p == M and kind[i] == WORK:
                        s = s + self.fill if s > self.m_work_end else max(s, issued_at[i] + self.fill)
                        self.m_work_end = s + dur[i]
                    if kind[i] == WORK:
                        pipe_free[p] = s + dur[i]
                        e = max(s + dur[i] + lat[i], last_end[p])
                    elif kind[i] == WAIT:
                        e = pipe_free[p] = max(s, end[self.match[i]])
                    elif kind[i] == CROSS_WAIT:
                        e = pipe_free[p] = max(s, self.ext[i])
                    else:                         # SET, CROSS_SET: fires when its pipe has completed everything
                        pipe_free[p] = s
                        e = max(s, last_end[p])
                    self._finish(i, s, e)
                    last_end[p] = max(last_end[p], e)
                    heads[p] += 1
                    progress = True
            if self.cursor == n and all(heads[p] == len(queues[p]) for p in range(NUM_PIPES)):
                return True
            if not progress:
                blocked = self.blocked()
                if any(kind[i] == CROSS_WAIT and self.ext[i] < 0 for i in blocked):
                    return False                  # another core has to go first
                raise DeadlockError(f"deadlock: instructions {blocked} can never start", blocked=blocked)

    def result(self):
        """``(start, end, order, match)`` as lists, once :meth:`run` has returned True."""
        return self.start, self.end, self.order, self.match


def schedule(pipe, kind, dur, key, issue_cycles=1, lat=None, ext=None, fill=0):
    """Return ``(start, end, order, match)`` as lists for one core's stream.

    pipe, kind, dur, key: sequences of int of one length (key is only read for SET and WAIT).
    lat: the in-flight cycles after each instruction's work (default none); read only for
    WORK off the scalar pipe. ext: the time each ``CROSS_WAIT`` may complete (read only for
    those; default none, and then a stream with a cross wait cannot finish). fill: the cube's
    fill cycles (pipe M, see the module docstring). ``end`` is when an
    instruction completed; a WORK instruction occupied its pipe over ``[start, start + dur)``.
    Raises DeadlockError, whose ``blocked`` lists the instructions that can never start, and
    ArgumentError for columns of different lengths or a pipe out of range.
    """
    tl = Timeline(pipe, kind, dur, key, issue_cycles, lat, fill)
    if ext is not None:
        if len(ext) != len(kind):
            raise ArgumentError("ext must have the stream's length")
        for i, k in enumerate(kind):
            if k == CROSS_WAIT:
                tl.resolve(i, ext[i])
    if not tl.run():
        blocked = tl.blocked()
        raise DeadlockError(f"deadlock: instructions {blocked} wait on other cores, and no time was "
                            f"given for them (ext)", blocked=blocked)
    return tl.result()
