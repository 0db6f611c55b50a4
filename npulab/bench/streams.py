"""Random instruction streams, for the scheduler's differential tests and its benchmark.

A stream is five equal-length int arrays (pipe, kind, dur, key, lat), the scheduler's input
(``schedule(pipe, kind, dur, key, issue_cycles, lat)``).
``random_stream`` draws every wait after a set of the same flag, so every dependency points
back in program order and the stream cannot deadlock; ``allow_deadlock`` also draws waits
that no set matches. ``p_cross`` turns some plain work into cross-core sets and waits, whose
times ``random_ext`` draws.
"""
from __future__ import annotations

import numpy as np

from ..arch import ceil_div
from ..sim.isa import NUM_PIPES, Kind, flag_key


def random_stream(n: int, seed: int = 0, *, allow_deadlock: bool = False, max_dur: int = 300,
                  p_sync: float = 0.3, p_barrier: float = 0.01, max_lat: int = 300, p_cross: float = 0.0):
    """``lat`` is drawn for every instruction (0..max_lat), also where the scheduler must
    ignore it (scalar work, sets, waits, barriers). ``p_cross``: the fraction of plain work
    made a cross-core set or wait (half each; key = a flag id 0-10), drawn from a second
    generator, so that a stream without them is the same for every ``p_cross``."""
    rng = np.random.default_rng(seed)
    lat = np.random.default_rng([seed, 1]).integers(0, max_lat + 1, n).astype(np.int64)
    pipe = rng.integers(0, NUM_PIPES, n).astype(np.int8)
    dur = rng.integers(0, max_dur + 1, n).astype(np.int64)
    kind = np.zeros(n, dtype=np.int8)
    key = np.full(n, -1, dtype=np.int64)
    roll = rng.random(n)
    dst_pipe = rng.integers(0, NUM_PIPES - 1, n)
    eid = rng.integers(0, 4, n)
    pending: dict[int, int] = {}           # flag key -> sets not yet waited on
    keys_with_sets: list[int] = []
    for i in range(n):
        r = roll[i]
        if r < p_barrier:
            kind[i], pipe[i], dur[i] = Kind.BARRIER_ALL, 0, 0
        elif r < p_barrier + p_sync / 2:
            dst = int(dst_pipe[i]) + (1 if dst_pipe[i] >= pipe[i] else 0)   # a pipe other than src
            k = flag_key(int(pipe[i]), dst, int(eid[i]))
            kind[i], key[i], dur[i] = Kind.SET, k, 0
            if pending.get(k, 0) == 0:
                keys_with_sets.append(k)
            pending[k] = pending.get(k, 0) + 1
        elif r < p_barrier + p_sync:
            live = [k for k in keys_with_sets if pending.get(k, 0) > 0]
            if live:
                k = live[int(rng.integers(0, len(live)))]
                pending[k] -= 1
            elif allow_deadlock:
                k = flag_key(1, 2, int(eid[i]))
            else:
                continue                   # nothing to wait on: leave plain work here
            kind[i], key[i], dur[i] = Kind.WAIT, k, 0
            pipe[i] = (k // 16) % 8        # a wait sits on the flag's destination pipe
    if p_cross:
        cr = np.random.default_rng([seed, 2])
        pick = (kind == Kind.WORK) & (cr.random(n) < p_cross)
        kind[pick] = np.where(cr.random(int(pick.sum())) < 0.5, Kind.CROSS_SET, Kind.CROSS_WAIT)
        key[pick], dur[pick] = cr.integers(0, 11, int(pick.sum())), 0
    return pipe, kind, dur, key, lat


def random_ext(kind, seed: int = 0, max_t: int = 20_000):
    """A time for every cross-core wait of ``kind`` (0..max_t; -1 elsewhere)."""
    t = np.random.default_rng([seed, 3]).integers(0, max_t + 1, len(kind)).astype(np.int64)
    return np.where(np.asarray(kind) == Kind.CROSS_WAIT, t, -1)


def streaming_stream(n: int, seed: int = 0):
    """A long, fast-to-build stream shaped like a double-buffered kernel: per tile MTE2 copy,
    set MTE2->V, wait on V, vector op, set V->MTE3, wait on MTE3, MTE3 copy; plus scalar work.
    Copies have a latency (``lat``) of 100-300 cycles. Built with numpy only, for the
    1,000,000-instruction benchmark."""
    rng = np.random.default_rng(seed)
    pattern_pipe = np.array([2, 2, 5, 5, 5, 3, 3, 0], dtype=np.int8)
    pattern_kind = np.array([0, 1, 2, 0, 1, 2, 0, 0], dtype=np.int8)
    pattern_key = np.array([-1, flag_key(2, 5, 0), flag_key(2, 5, 0), -1, flag_key(5, 3, 1),
                            flag_key(5, 3, 1), -1, -1], dtype=np.int64)
    reps = ceil_div(n, len(pattern_pipe))
    pipe = np.tile(pattern_pipe, reps)[:n]
    kind = np.tile(pattern_kind, reps)[:n]
    key = np.tile(pattern_key, reps)[:n]
    dur = rng.integers(1, 400, n).astype(np.int64)
    dur[kind != 0] = 0
    copy = (kind == 0) & ((pipe == 2) | (pipe == 3))
    lat = np.where(copy, rng.integers(100, 301, n), 0).astype(np.int64)
    # a truncated final pattern may leave a wait without its set: make it plain work
    tail = n % len(pattern_pipe)
    if tail:
        for j in range(n - tail, n):
            if kind[j] == Kind.WAIT:
                kind[j], key[j] = Kind.WORK, -1
    return pipe, kind, dur, key, lat
