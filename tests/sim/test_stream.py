"""A core's instruction stream (npulab.sim.stream and its Cython twin npulab._stream): the
same columns, in their dtypes, from both; the budget, the race switch and the write-through
column on each twin (the ``side`` fixture)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npulab import _stream, twins
from npulab.errors import InstructionBudgetError
from npulab.sim import stream as S
from npulab.sim.isa import Pipe


def _over(name):
    raise InstructionBudgetError(f"over budget at {name}")


def _streams(limit=10_000, races=True):
    return (S.Stream(S.Budget(limit), races, _over),
            _stream.Stream(_stream.Budget(limit), races, _over))


def _stream_of(side, limit=10_000, races=True):
    """A stream of ``side``'s twin with its own budget."""
    module = twins.pick(_stream, S, side)
    return module.Stream(module.Budget(limit), races, _over)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3), st.integers(0, 40),
                          st.one_of(st.integers(0, 10**12), st.floats(0, 1e6, allow_nan=False)),
                          st.integers(-1, 2000), st.integers(0, 10**9), st.integers(0, 10**12),
                          st.floats(0, 1e9, allow_nan=False), st.integers(0, 500), st.booleans()),
                min_size=0, max_size=700))
def test_stream_twins_store_the_same_columns(rows):
    """Every column, in its dtype, the same from both streams; more rows than the Cython
    stream's first arrays hold, so they grow; floats truncate toward zero as numpy's cast."""
    py, cy = _streams()
    for j, (pipe, kind, op, dur, key, nbytes, flops, energy, lat, rw) in enumerate(rows):
        rd = [("UB", j, j + 32)] if rw else ()
        for s in (py, cy):
            i = s.issue(Pipe(pipe) if j % 3 == 0 else pipe, kind, op, dur, key=key, name=f"i{j}",
                        nbytes=np.int64(nbytes) if j % 5 == 0 else nbytes, flops=flops,
                        energy=energy, route="GM->L1" if rw else "", reads=rd, lat=lat)
            assert i == j
    assert len(py) == len(cy) == len(rows)
    for col in S.COLUMNS:
        a, b = py.column(col), cy.column(col)
        if col in ("name", "route"):
            assert a == b
            continue
        dt = {"pipe": np.int8, "kind": np.int8, "op": np.int16, "energy": np.float64}.get(col, np.int64)
        np.testing.assert_array_equal(np.asarray(a, dtype=dt), np.asarray(b))
        assert np.asarray(b).dtype == dt
    assert py.accesses == cy.accesses


def test_stream_keeps_the_budget_and_the_race_switch(side):
    s = _stream_of(side, limit=3, races=False)
    for _ in range(3):
        s.issue(0, 0, 0, reads=[("UB", 0, 32)])
    with pytest.raises(InstructionBudgetError, match="over budget at fourth"):
        s.issue(0, 0, 0, name="fourth")
    assert s.accesses == {}                   # no race checker, no byte ranges kept


def test_stream_column_writes_through(side):
    """GM settling rewrites durations in place (sim/gm.py): both twins' columns take the write."""
    s = _stream_of(side)
    s.issue(1, 0, 2, 10)
    s.issue(1, 0, 2, 20)
    col = s.column("dur")
    col[1] = 99
    assert list(np.asarray(s.column("dur"))) == [10, 99]


def test_stream_rejects_what_is_not_a_number(side):
    s = _stream_of(side)
    with pytest.raises((TypeError, ValueError)):
        s.issue(1, 0, 2, "ten")
