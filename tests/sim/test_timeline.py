"""The timeline scheduler (npulab.sim.timeline and its Cython twin npulab._timeline):
hand-computed cases on both twins (the ``side`` fixture), and the two held to each other on
random streams, deadlocks included."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npulab import ArgumentError, DeadlockError, _timeline, twins
from npulab.sim import timeline
from npulab.sim.isa import Kind, Pipe, flag_key
from npulab.bench.streams import random_stream, streaming_stream

W, SET, WAIT, BAR = Kind.WORK, Kind.SET, Kind.WAIT, Kind.BARRIER_ALL
K = flag_key(Pipe.MTE2, Pipe.V, 0)


def schedule(side):
    """The scheduler of ``side``."""
    return twins.pick(_timeline.schedule, timeline.schedule, side)


def run(side, rows, issue=1):
    """rows: (pipe, kind, dur, key) or (pipe, kind, dur, key, lat) each."""
    rows = [tuple(r) + (0,) * (5 - len(r)) for r in rows]
    pipe, kind, dur, key, lat = zip(*rows)
    s, e, order, match = schedule(side)(list(pipe), list(kind), list(dur), list(key), issue, list(lat))
    return list(map(int, s)), list(map(int, e))


def test_pipes_run_in_parallel_each_in_order(side):
    rows = [(Pipe.MTE2, W, 10, -1), (Pipe.V, W, 5, -1), (Pipe.MTE2, W, 3, -1)]
    # issued at 0, 1, 2; MTE2 runs 0-10 then 10-13; V runs 1-6
    assert run(side, rows) == ([0, 1, 10], [10, 6, 13])


def test_set_fires_after_its_pipe_and_wait_stalls(side):
    rows = [(Pipe.MTE2, W, 100, -1), (Pipe.MTE2, SET, 0, K), (Pipe.V, WAIT, 0, K), (Pipe.V, W, 8, -1)]
    s, e = run(side, rows)
    assert (s[1], e[1]) == (100, 100)        # set fires when the copy is done
    assert (s[2], e[2]) == (2, 100)          # the wait holds V from its issue until then
    assert (s[3], e[3]) == (100, 108)


def test_scalar_work_delays_issue(side):
    rows = [(Pipe.S, W, 50, -1), (Pipe.V, W, 5, -1)]
    assert run(side, rows) == ([0, 50], [50, 55])


def test_barrier_all_waits_for_every_pipe(side):
    rows = [(Pipe.MTE2, W, 40, -1), (Pipe.V, W, 7, -1), (Pipe.S, BAR, 0, -1), (Pipe.MTE3, W, 5, -1)]
    s, e = run(side, rows)
    assert s[2] == 40 and s[3] == 40 and e[3] == 45


def test_wait_before_set_in_program_order_is_fine_on_other_pipes(side):
    rows = [(Pipe.V, WAIT, 0, K), (Pipe.V, W, 4, -1), (Pipe.MTE2, W, 30, -1), (Pipe.MTE2, SET, 0, K)]
    s, e = run(side, rows)
    assert e[0] == 32 and (s[1], e[1]) == (32, 36)      # MTE2 issued at 2, done at 32


def test_kth_wait_matches_kth_set(side):
    rows = [(Pipe.MTE2, W, 10, -1), (Pipe.MTE2, SET, 0, K), (Pipe.MTE2, W, 10, -1), (Pipe.MTE2, SET, 0, K),
            (Pipe.V, WAIT, 0, K), (Pipe.V, WAIT, 0, K)]
    s, e = run(side, rows)
    assert (e[4], e[5]) == (10, 20)


def test_back_to_back_copies_overlap_their_latencies(side):
    rows = [(Pipe.MTE2, W, 10, -1, 200), (Pipe.MTE2, W, 10, -1, 200)]
    # the pipe is free after 10 cycles of transfer; each copy completes 200 cycles later.
    # (Paid serially, the second would run 210-430.)
    assert run(side, rows) == ([0, 10], [210, 220])


def test_a_pipe_completes_in_order(side):
    rows = [(Pipe.MTE2, W, 10, -1, 200), (Pipe.MTE2, W, 5, -1, 0), (Pipe.MTE2, W, 5, -1, 300)]
    # the short second copy cannot complete before the first: it completes at 210 too
    assert run(side, rows) == ([0, 10, 15], [210, 210, 320])


def test_set_fires_at_the_copys_completion_and_the_wait_sees_it(side):
    rows = [(Pipe.MTE2, W, 100, -1, 200), (Pipe.MTE2, SET, 0, K, 50), (Pipe.V, WAIT, 0, K),
            (Pipe.V, W, 8, -1), (Pipe.MTE2, W, 50, -1, 200)]
    s, e = run(side, rows)
    assert (s[0], e[0]) == (0, 300)          # 100 cycles on MTE2, then 200 in flight
    assert (s[1], e[1]) == (100, 300)        # the set (its lat ignored) fires at completion
    assert (s[2], e[2]) == (2, 300)          # the wait holds V until then
    assert (s[3], e[3]) == (300, 308)
    assert (s[4], e[4]) == (100, 350)        # a set does not hold its pipe: the next copy starts


def test_barrier_all_waits_for_copies_in_flight(side):
    rows = [(Pipe.MTE2, W, 40, -1, 60), (Pipe.V, W, 7, -1), (Pipe.S, BAR, 0, -1), (Pipe.MTE3, W, 5, -1, 9)]
    s, e = run(side, rows)
    assert s[2] == e[2] == 100 and (s[3], e[3]) == (100, 114)


def test_scalar_work_has_no_latency(side):
    rows = [(Pipe.S, W, 50, -1, 99), (Pipe.V, W, 5, -1)]
    assert run(side, rows) == ([0, 50], [50, 55])


def test_wait_without_set_is_a_deadlock(side):
    rows = [(Pipe.MTE2, W, 10, -1), (Pipe.V, WAIT, 0, K), (Pipe.V, W, 1, -1)]
    with pytest.raises(DeadlockError) as info:
        run(side, rows)
    assert info.value.blocked == [1]


def test_scalar_wait_on_a_later_set_deadlocks(side):
    k = flag_key(Pipe.V, Pipe.S, 1)
    rows = [(Pipe.S, WAIT, 0, k), (Pipe.V, SET, 0, k)]    # the set can never be issued
    with pytest.raises(DeadlockError) as info:
        run(side, rows)
    assert info.value.blocked == [0]


def _compare(stream, issue):
    pipe, kind, dur, key, lat = stream
    lists = pipe.tolist(), kind.tolist(), dur.tolist(), key.tolist()
    try:
        sp, ep, op_, mp = timeline.schedule(*lists, issue, lat.tolist())
    except DeadlockError as exc:
        with pytest.raises(DeadlockError) as info:
            _timeline.schedule(pipe, kind, dur, key, issue, lat)
        assert info.value.blocked == exc.blocked
        return "deadlock"
    sc, ec, oc, mc = _timeline.schedule(pipe, kind, dur, key, issue, lat)
    assert list(sc) == sp and list(ec) == ep and list(oc) == op_ and list(mc) == mp
    # the model's invariants, checked on the answer itself
    sc, ec = np.asarray(sc), np.asarray(ec)
    assert (ec >= sc).all()
    work = kind == W
    scalar = work & (pipe == Pipe.S)
    assert (ec[scalar] - sc[scalar] == dur[scalar]).all()               # no latency on S
    offs = work & (pipe != Pipe.S)
    assert (ec[offs] >= sc[offs] + dur[offs] + lat[offs]).all()
    # when each instruction lets its pipe go: work after dur, a wait when released, a set at once
    free = np.where(work, sc + dur, np.where(kind == WAIT, ec, sc))
    for p in range(1, 7):
        idx = np.flatnonzero((pipe == p) & (kind != BAR))
        assert (sc[idx][1:] >= free[idx][:-1]).all()        # in order, one at a time
        done = idx[kind[idx] != WAIT]
        assert (np.diff(ec[done]) >= 0).all()               # completes in order
        for j in idx[kind[idx] == SET]:                     # a set fires after all before it
            before = idx[(idx < j) & (kind[idx] == W)]
            assert ec[j] >= (ec[before].max() if len(before) else sc[j])
    return "ok"


@settings(max_examples=400, deadline=None, derandomize=True)
@given(n=st.integers(1, 300), seed=st.integers(0, 2**31 - 1), issue=st.integers(1, 4),
       p_sync=st.floats(0.0, 0.9))
def test_cython_equals_python_on_random_streams(n, seed, issue, p_sync):
    _compare(random_stream(n, seed, p_sync=p_sync), issue)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(n=st.integers(1, 200), seed=st.integers(0, 2**31 - 1))
def test_cython_equals_python_on_streams_that_may_deadlock(n, seed):
    _compare(random_stream(n, seed, allow_deadlock=True), 1)


def test_some_random_streams_do_deadlock():
    outcomes = {_compare(random_stream(60, s, allow_deadlock=True), 1) for s in range(40)}
    assert outcomes == {"ok", "deadlock"}


def test_long_streaming_stream_agrees():
    assert _compare(streaming_stream(20_000, 3), 1) == "ok"


def test_bad_input_is_rejected(side):
    with pytest.raises(ArgumentError, match="pipe of instruction 0 is 9; expected 0..6"):
        schedule(side)([9], [0], [1], [-1], 1)
    with pytest.raises(ArgumentError, match="one length"):
        schedule(side)([1, 2], [0], [1], [-1], 1)
    with pytest.raises(ArgumentError, match=r"flag key of instruction 1 is negative \(-3\)"):
        schedule(side)([1, 5], [1, 2], [0, 0], [0, -3], 1)
