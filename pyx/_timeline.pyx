# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The timeline scheduler in Cython: same model (occupancy ``dur``, in-flight ``lat``), signature and results as
``npulab.sim.timeline.schedule`` (the readable specification, which the differential tests hold
this to). What it optimises: typed arrays instead of lists, per-pipe queues laid out once by a
counting sort of the stream, flag matching by per-key counters instead of dictionaries.
"""
import numpy as np
cimport numpy as cnp

from npulab._isa cimport (NUM_PIPES, PIPE_S, KIND_WORK as WORK, KIND_SET as SET, KIND_WAIT as WAIT,
                          KIND_BARRIER_ALL as BARRIER_ALL)
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


def schedule(pipe, kind, dur, key, long long issue_cycles=1, lat=None):
    """Return ``(start, end, order, match)`` as int64 arrays for one core's stream
    (``lat``: in-flight cycles after each WORK's ``dur``, default none)."""
    cdef const signed char[:] pv = np.ascontiguousarray(pipe, dtype=np.int8)
    cdef const signed char[:] kv = np.ascontiguousarray(kind, dtype=np.int8)
    cdef const long long[:] dv = np.ascontiguousarray(dur, dtype=np.int64)
    cdef Py_ssize_t n = pv.shape[0], i, j, p, m
    if lat is None:
        lat = np.zeros(n, dtype=np.int64)
    cdef const long long[:] lv = np.ascontiguousarray(lat, dtype=np.int64)
    if kv.shape[0] != n or dv.shape[0] != n or lv.shape[0] != n or len(key) != n:
        raise ArgumentError("pipe, kind, dur, key and lat must have one length")
    match = match_flags(kind, key)
    cdef const long long[:] mv = match
    start_a = np.zeros(n, dtype=np.int64)
    end_a = np.zeros(n, dtype=np.int64)
    order_a = np.zeros(n, dtype=np.int64)
    cdef long long[:] st = start_a, en = end_a, order = order_a
    cdef cnp.ndarray[cnp.int8_t] done_a = np.zeros(n, dtype=np.int8)
    cdef signed char[:] done = done_a
    issued_a = np.zeros(n, dtype=np.int64)
    cdef long long[:] issued = issued_a
    # queue of pipe p = by_pipe[qoff[p] : qoff[p] + queued[p]], read from qoff[p] + head[p]
    by_pipe_a = np.zeros(max(n, 1), dtype=np.int64)
    cdef long long[:] by_pipe = by_pipe_a
    cdef long long qoff[NUM_PIPES + 1]
    cdef long long queued[NUM_PIPES]
    cdef long long head[NUM_PIPES]
    cdef long long pipe_free[NUM_PIPES]       # when each pipe can start its next instruction
    cdef long long last_end[NUM_PIPES]        # when everything issued to it has completed
    for p in range(NUM_PIPES + 1):
        qoff[p] = 0
    for i in range(n):
        if pv[i] < 0 or pv[i] >= NUM_PIPES:
            raise ArgumentError(f"pipe of instruction {i} is {pv[i]}; expected 0..{NUM_PIPES - 1}")
        if kv[i] != BARRIER_ALL and pv[i] != PIPE_S:
            qoff[pv[i] + 1] += 1
    for p in range(NUM_PIPES):
        qoff[p + 1] += qoff[p]
        queued[p] = 0
        head[p] = 0
        pipe_free[p] = 0
        last_end[p] = 0
    cdef long long sclock = 0, s, e
    cdef Py_ssize_t cursor = 0, norder = 0
    cdef bint progress, busy, finished
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
                m = mv[i]
                if kv[i] == WAIT and not (m >= 0 and done[m]):
                    break
                s = sclock
                if kv[i] == WORK:
                    e = s + dv[i]
                elif kv[i] == WAIT:
                    e = en[m] if en[m] > s else s
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
                m = mv[i]
                if kv[i] == WAIT and not (m >= 0 and done[m]):
                    break
                s = issued[i] if issued[i] > pipe_free[p] else pipe_free[p]
                if kv[i] == WORK:
                    pipe_free[p] = s + dv[i]
                    e = s + dv[i] + lv[i]
                    if last_end[p] > e:
                        e = last_end[p]
                elif kv[i] == WAIT:
                    e = en[m] if en[m] > s else s
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
            return start_a, end_a, order_a, match
        if not progress:
            blocked = [int(by_pipe[qoff[p] + head[p]]) for p in range(NUM_PIPES) if head[p] < queued[p]]
            if cursor < n:
                blocked.append(int(cursor))
            blocked.sort()
            raise DeadlockError(f"deadlock: instructions {blocked} can never start", blocked=blocked)
