# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The timeline scheduler in Cython: same model (occupancy ``dur``, in-flight ``lat``, cross-core
waits resolved from outside), names, signatures and results as ``npulab.sim.timeline`` (the
readable specification, which the differential tests hold this to). What it optimises: typed
arrays instead of lists, per-pipe queues laid out once by a counting sort of the stream, flag
matching by per-key counters instead of dictionaries, and the scheduler's state kept in one
extension object, so that stopping at a cross-core wait and going on costs nothing.
"""
import numpy as np
cimport numpy as cnp

from npulab._isa cimport (NUM_PIPES, PIPE_S, PIPE_M, KIND_WORK as WORK, KIND_SET as SET, KIND_WAIT as WAIT,
                          KIND_BARRIER_ALL as BARRIER_ALL, KIND_CROSS_WAIT as CROSS_WAIT)
from npulab.errors import ArgumentError, DeadlockError

cnp.import_array()


def match_flags(kind, key):
    """match[i] = index of the SET that WAIT i consumes (the k-th set of its key), or -1."""
    cdef const signed char[:] kv = np.ascontiguousarray(kind, dtype=np.int8)
    cdef const long long[:] keyv = np.ascontiguousarray(key, dtype=np.int64)
    cdef Py_ssize_t n = kv.shape[0], i, nkeys = 0
    cdef long long k
    for i in range(n):
        if (kv[i] == SET or kv[i] == WAIT):
            if keyv[i] < 0:
                raise ArgumentError(f"flag key of instruction {i} is negative ({keyv[i]})")
            if keyv[i] + 1 > nkeys:
                nkeys = keyv[i] + 1
    cdef cnp.ndarray[cnp.int64_t] count = np.zeros(nkeys + 1, dtype=np.int64)
    cdef cnp.ndarray[cnp.int64_t] offs = np.zeros(nkeys + 1, dtype=np.int64)
    cdef cnp.ndarray[cnp.int64_t] used = np.zeros(nkeys + 1, dtype=np.int64)
    cdef cnp.ndarray[cnp.int64_t] match = np.full(n, -1, dtype=np.int64)
    cdef long long[:] cv = count, ov = offs, uv = used, mv = match
    for i in range(n):
        if kv[i] == SET:
            cv[keyv[i]] += 1
    for k in range(1, nkeys + 1):
        ov[k] = ov[k - 1] + cv[k - 1]
    cdef cnp.ndarray[cnp.int64_t] sets = np.empty(max(1, ov[nkeys] if nkeys else 0), dtype=np.int64)
    cdef long long[:] sv = sets
    for k in range(nkeys + 1):
        uv[k] = 0
    for i in range(n):
        if kv[i] == SET:
            sv[ov[keyv[i]] + uv[keyv[i]]] = i
            uv[keyv[i]] += 1
    for k in range(nkeys + 1):
        uv[k] = 0
    for i in range(n):
        if kv[i] == WAIT:
            k = keyv[i]
            if uv[k] < cv[k]:
                mv[i] = sv[ov[k] + uv[k]]
            uv[k] += 1
    return match


cdef inline bint _stopped(const signed char *kind, const long long *match, const signed char *done,
                          const long long *ext, Py_ssize_t i) noexcept nogil:
    """Instruction i, at the head of its pipe or at the scalar unit, cannot start yet: a wait
    whose set has not fired, or a cross wait whose time is not known."""
    cdef long long m
    if kind[i] == WAIT:
        m = match[i]
        return not (m >= 0 and done[m])
    return kind[i] == CROSS_WAIT and ext[i] < 0


cdef class Timeline:
    """One core's schedule, computed as far as its cross-core waits allow (see the twin,
    ``npulab.sim.timeline.Timeline``)."""
    cdef const signed char[:] pv, kv
    cdef const long long[:] dv, lv, mv
    cdef long long[:] st, en, order, issued, by_pipe, ext
    cdef signed char[:] done
    cdef object start_a, end_a, order_a, match_a, ext_a
    cdef Py_ssize_t n, cursor, norder
    cdef long long issue_cycles, sclock, fill
    cdef long long m_work_end                 # when the last WORK of M freed the cube
    cdef long long qoff[NUM_PIPES + 1]
    cdef long long queued[NUM_PIPES]
    cdef long long head[NUM_PIPES]
    cdef long long pipe_free[NUM_PIPES]       # when each pipe can start its next instruction
    cdef long long last_end[NUM_PIPES]        # when everything issued to it has completed

    def __init__(self, pipe, kind, dur, key, long long issue_cycles=1, lat=None, long long fill=0):
        cdef Py_ssize_t i, p
        self.pv = np.ascontiguousarray(pipe, dtype=np.int8)
        self.kv = np.ascontiguousarray(kind, dtype=np.int8)
        self.dv = np.ascontiguousarray(dur, dtype=np.int64)
        cdef Py_ssize_t n = self.pv.shape[0]
        self.n = n
        if lat is None:
            lat = np.zeros(n, dtype=np.int64)
        self.lv = np.ascontiguousarray(lat, dtype=np.int64)
        if self.kv.shape[0] != n or self.dv.shape[0] != n or self.lv.shape[0] != n or len(key) != n:
            raise ArgumentError("pipe, kind, dur, key and lat must have one length")
        self.match_a = match_flags(kind, key)
        self.mv = self.match_a
        self.start_a = np.zeros(n, dtype=np.int64)
        self.end_a = np.zeros(n, dtype=np.int64)
        self.order_a = np.zeros(n, dtype=np.int64)
        self.ext_a = np.full(n, -1, dtype=np.int64)
        self.st, self.en, self.order, self.ext = self.start_a, self.end_a, self.order_a, self.ext_a
        self.done = np.zeros(n, dtype=np.int8)
        self.issued = np.zeros(n, dtype=np.int64)
        # queue of pipe p = by_pipe[qoff[p] : qoff[p] + queued[p]], read from qoff[p] + head[p]
        self.by_pipe = np.zeros(max(n, 1), dtype=np.int64)
        self.issue_cycles = issue_cycles
        self.fill = fill
        self.m_work_end = -1
        for p in range(NUM_PIPES + 1):
            self.qoff[p] = 0
        for i in range(n):
            if self.pv[i] < 0 or self.pv[i] >= NUM_PIPES:
                raise ArgumentError(f"pipe of instruction {i} is {self.pv[i]}; expected 0..{NUM_PIPES - 1}")
            if self.kv[i] != BARRIER_ALL and self.pv[i] != PIPE_S:
                self.qoff[self.pv[i] + 1] += 1
        for p in range(NUM_PIPES):
            self.qoff[p + 1] += self.qoff[p]
            self.queued[p] = 0
            self.head[p] = 0
            self.pipe_free[p] = 0
            self.last_end[p] = 0
        self.sclock = 0
        self.cursor = 0
        self.norder = 0

    @property
    def count(self):
        """How many instructions are scheduled so far."""
        return self.norder

    def ordered(self, Py_ssize_t lo, Py_ssize_t hi):
        """The ``lo``-th to ``hi - 1``-th instructions scheduled, in the order they were."""
        return self.order_a[lo:hi]

    def end_of(self, Py_ssize_t i):
        """When scheduled instruction ``i`` completed (a set: when it fired)."""
        return int(self.en[i])

    def resolve(self, Py_ssize_t i, t):
        """Cross wait ``i`` may complete at cycle ``t`` (at its start, if that is later)."""
        if not 0 <= i < self.n or self.kv[i] != CROSS_WAIT:
            raise ArgumentError(f"instruction {i} is not a cross-core wait")
        self.ext[i] = max(0, int(t))

    def blocked(self):
        """The instructions that stop the schedule (sorted): see the twin."""
        cdef Py_ssize_t p
        out = [int(self.by_pipe[self.qoff[p] + self.head[p]]) for p in range(NUM_PIPES)
               if self.head[p] < self.queued[p]]
        if self.cursor < self.n:
            out.append(int(self.cursor))
        out.sort()
        return out

    def run(self):
        """Schedule as far as possible; True once every instruction is scheduled."""
        cdef Py_ssize_t i, p, n = self.n, cursor = self.cursor, norder = self.norder
        cdef long long s, e, m, sclock = self.sclock, issue_cycles = self.issue_cycles, fill = self.fill
        cdef long long m_work_end = self.m_work_end
        cdef bint progress, busy, finished, stop
        cdef const signed char[:] pv = self.pv, kv = self.kv
        cdef const long long[:] dv = self.dv, lv = self.lv, mv = self.mv
        cdef long long[:] st = self.st, en = self.en, order = self.order, issued = self.issued
        cdef long long[:] by_pipe = self.by_pipe, ext = self.ext
        cdef signed char[:] done = self.done
        cdef long long *qoff = self.qoff
        cdef long long *queued = self.queued
        cdef long long *head = self.head
        cdef long long *pipe_free = self.pipe_free
        cdef long long *last_end = self.last_end
        if n == 0:
            return True
        cdef const signed char *kp = &kv[0]
        cdef const long long *mp = &mv[0]
        cdef const signed char *dp = &done[0]
        cdef const long long *xp = &ext[0]
        try:
            while True:
                progress = False
                while cursor < n:
                    i = cursor
                    if kv[i] == BARRIER_ALL:
                        busy = False
                        for p in range(NUM_PIPES):
                            if head[p] < queued[p]:
                                busy = True
                        if busy:
                            break
                        s = sclock
                        for p in range(NUM_PIPES):
                            if last_end[p] > s:
                                s = last_end[p]
                        st[i] = s; en[i] = s; done[i] = 1; order[norder] = i; norder += 1
                        sclock = s
                    elif pv[i] == PIPE_S:
                        if _stopped(kp, mp, dp, xp, i):
                            break
                        s = sclock
                        if kv[i] == WORK:
                            e = s + dv[i]
                        elif kv[i] == WAIT:
                            m = mv[i]
                            e = en[m] if en[m] > s else s
                        elif kv[i] == CROSS_WAIT:
                            e = ext[i] if ext[i] > s else s
                        else:
                            e = s
                        st[i] = s; en[i] = e; done[i] = 1; order[norder] = i; norder += 1
                        sclock = e
                    else:
                        p = pv[i]
                        issued[i] = sclock
                        sclock += issue_cycles
                        by_pipe[qoff[p] + queued[p]] = i
                        queued[p] += 1
                    cursor += 1
                    progress = True
                for p in range(1, NUM_PIPES):
                    while head[p] < queued[p]:
                        i = by_pipe[qoff[p] + head[p]]
                        if _stopped(kp, mp, dp, xp, i):
                            break
                        s = issued[i] if issued[i] > pipe_free[p] else pipe_free[p]
                        if p == PIPE_M and kv[i] == WORK:
                            if s > m_work_end:
                                s = s + fill
                            elif issued[i] + fill > s:
                                s = issued[i] + fill
                            m_work_end = s + dv[i]
                        if kv[i] == WORK:
                            pipe_free[p] = s + dv[i]
                            e = s + dv[i] + lv[i]
                            if last_end[p] > e:
                                e = last_end[p]
                        elif kv[i] == WAIT:
                            m = mv[i]
                            e = en[m] if en[m] > s else s
                            pipe_free[p] = e
                        elif kv[i] == CROSS_WAIT:
                            e = ext[i] if ext[i] > s else s
                            pipe_free[p] = e
                        else:
                            pipe_free[p] = s
                            e = last_end[p] if last_end[p] > s else s
                        st[i] = s; en[i] = e; done[i] = 1; order[norder] = i; norder += 1
                        if e > last_end[p]:
                            last_end[p] = e
                        head[p] += 1
                        progress = True
                finished = cursor == n
                for p in range(NUM_PIPES):
                    if head[p] < queued[p]:
                        finished = False
                if finished:
                    return True
                if not progress:
                    self.cursor, self.norder, self.sclock = cursor, norder, sclock
                    self.m_work_end = m_work_end
                    blocked = self.blocked()
                    for i in blocked:
                        if kv[i] == CROSS_WAIT and ext[i] < 0:
                            return False
                    raise DeadlockError(f"deadlock: instructions {blocked} can never start", blocked=blocked)
        finally:
            self.cursor, self.norder, self.sclock = cursor, norder, sclock
            self.m_work_end = m_work_end

    def result(self):
        """``(start, end, order, match)`` as int64 arrays, once :meth:`run` has returned True."""
        return self.start_a, self.end_a, self.order_a, self.match_a


def schedule(pipe, kind, dur, key, long long issue_cycles=1, lat=None, ext=None, long long fill=0):
    """Return ``(start, end, order, match)`` as int64 arrays for one core's stream (see the twin;
    ``ext``: the time each CROSS_WAIT may complete; ``fill``: the cube's fill)."""
    tl = Timeline(pipe, kind, dur, key, issue_cycles, lat, fill)
    cdef Py_ssize_t i
    cdef const signed char[:] kv
    if ext is not None:
        if len(ext) != len(kind):
            raise ArgumentError("ext must have the stream's length")
        kv = np.ascontiguousarray(kind, dtype=np.int8)
        for i in range(kv.shape[0]):
            if kv[i] == CROSS_WAIT:
                tl.resolve(i, ext[i])
    if not tl.run():
        blocked = tl.blocked()
        raise DeadlockError(f"deadlock: instructions {blocked} wait on other cores, and no time was "
                            f"given for them (ext)", blocked=blocked)
    return tl.result()
