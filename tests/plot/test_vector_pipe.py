"""npulab.plot.vector_pipe reads the vector pipe off a trace: the tiles' instruction streams
partition the vector work of a row kernel, and the pipe's time by cause adds up to the run."""
import numpy as np
import pytest

import npulab.ops as ops
import npulab.plot as P
from npulab.chips import get_chip
from npulab.sim.isa import Kind, Pipe


@pytest.fixture(scope="module")
def rms_trace():
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float16)
    _, trace = ops.rms_norm(x, (256,), np.ones(256, np.float16), eps=1e-6, chip="teach", return_trace=True)
    return trace


def _vector_work(trace, core):
    on = np.flatnonzero((trace.core == core) & (trace.pipe == int(Pipe.V)) & (trace.kind == int(Kind.WORK)))
    return on[np.argsort(trace.start[on], kind="stable")]


@pytest.mark.parametrize("core", [0, 1])
def test_the_tiles_programs_partition_the_vector_work(rms_trace, core):
    tr = rms_trace
    order = _vector_work(tr, core)
    marks = [k for k, i in enumerate(order) if tr.name[i].startswith("alloc_tensor out_")]
    assert len(marks) > 1
    programs = [P.vector_program(tr, core, t) for t in range(len(marks))]
    assert P.vector_program(tr, core, len(marks)) == []
    after_first = [(tr.name[i], int(tr.end[i] - tr.start[i])) for i in order[marks[0]:]
                   if tr.end[i] > tr.start[i] and not tr.name[i].startswith("alloc_tensor out_")]
    assert [step for prog in programs for step in prog] == after_first
    for prog in programs:
        names = [n for n, _ in prog]
        assert names[0].startswith("cast") and names[-1].startswith("cast")      # widen ... round
        assert any(n.startswith("reduce_sum_rows") for n in names) and all(c > 0 for _, c in prog)


def test_vector_time_adds_up_to_the_cores_run(rms_trace):
    tr = rms_trace
    t = P.vector_time(tr, 0)
    assert set(t) == {"cycles", "busy", "barriers", "copy_in", "copy_out", "block_start", "first_tile", "other"}
    assert t["busy"] + t["barriers"] + t["copy_in"] + t["copy_out"] + t["block_start"] + t["other"] == t["cycles"]
    blocks = len(set(tr.block[tr.core == 0].tolist()))
    assert t["block_start"] == blocks * tr.chip.launch.block_start_cycles
    assert t["cycles"] == int(tr.core_cycles[0])
    assert t["busy"] == int(tr.busy_cycles(0)[Pipe.V])
    assert t["barriers"] > 0 and t["copy_in"] > 0 and t["other"] >= 0
    assert 0 < t["first_tile"] <= t["copy_in"] + t["busy"]
    sets = np.flatnonzero((tr.core == 0) & (tr.kind == int(Kind.SET)))
    barriers = sum(1 for i in sets if tr.name[i] == "pipe_barrier V (auto)")
    assert t["barriers"] <= barriers * get_chip("teach").vector.startup_cycles
