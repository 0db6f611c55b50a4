"""The switch between the Cython core and its Python twins (npulab.twins): its values, its
environment variable, and that a launch reads it once and runs wholly on one side, with the
same trace on both."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from fixtures import same_numbers, trace_digest
from npulab import ArgumentError, _stream, _timeline, _worker, formats, lang, twins
from npulab.kernels.matmul import MatmulProblem, default_tiling, matmul_kernel
from npulab.sim import stream, timeline
from npulab.sim.device import Device


def test_use_sets_the_side_for_a_block_and_restores_it():
    start = twins.side()
    assert twins.SIDES == ("cython", "python")
    with twins.use("python"):
        assert twins.side() == "python"
        with twins.use("cython"):
            assert twins.side() == "cython"
        assert twins.side() == "python"
        assert twins.pick(1, 2) == 2 and twins.pick(1, 2, "cython") == 1
    assert twins.side() == start
    with pytest.raises(RuntimeError), twins.use("python"):
        raise RuntimeError("a failing block")
    assert twins.side() == start


def test_a_side_that_does_not_exist_names_the_ones_that_do():
    with pytest.raises(ArgumentError, match="the twins are 'cython' or 'python', got 'numba'"):
        with twins.use("numba"):
            pass
    with pytest.raises(ArgumentError, match="got 'numba'"):
        twins.pick(1, 2, "numba")


def _python_with(env_value, code):
    env = dict(os.environ, NPULAB_TWINS=env_value or "")
    if env_value is None:
        del env["NPULAB_TWINS"]
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)


def test_the_environment_sets_the_start():
    out = _python_with(None, "from npulab import twins; print(twins.side())")
    assert out.returncode == 0 and out.stdout.strip() == "cython", out.stderr
    out = _python_with("python", "from npulab import twins; print(twins.side())")
    assert out.returncode == 0 and out.stdout.strip() == "python", out.stderr
    out = _python_with("fortran", "import npulab.twins")
    assert out.returncode != 0
    assert "ArgumentError: environment variable NPULAB_TWINS: the twins are 'cython' or 'python', " \
           "got 'fortran'" in out.stderr


@pytest.mark.parametrize("side_", twins.SIDES)
def test_a_device_reads_the_switch_once(side_):
    with twins.use(side_):
        dev = Device("teach", block_dim=1)
    other = "python" if side_ == "cython" else "cython"
    with twins.use(other):                   # changing the switch later changes nothing
        assert dev.twins == side_
        assert dev.streams is twins.pick(_stream, stream, side_)
        assert dev.Timeline is twins.pick(_timeline.Timeline, timeline.Timeline, side_)
        assert dev.moves == formats.moves(side_)
        assert isinstance(dev.cores[0].stream, dev.streams.Stream)


def test_a_kernel_that_flips_the_switch_stays_on_its_launchs_side():
    seen = []

    def kernel(x):
        with twins.use("python"):
            q = lang.Queue(lang.VECIN, "q")
            lang.TPipe().init_buffer(q, 1, 256)
            seen.append(q.twins)

    lang.launch(kernel, 1, np.zeros(8, np.float32), chip="teach", core_type="aiv")
    assert seen == ["cython"]


def _matmul(side, worker=True):
    """One matmul kernel launch on ``side`` (with the Cython worker, or with it off)."""
    a = np.random.default_rng(1).standard_normal((1, 70, 90)).astype(np.float16)
    b = np.random.default_rng(2).standard_normal((1, 90, 50)).astype(np.float16)
    t = default_tiling(MatmulProblem(1, 70, 50, 90, "float16"), "910")
    c = np.zeros(70 * 50, np.float16)
    prev = _worker._use_worker(worker)
    try:
        with twins.use(side):
            res = lang.launch(matmul_kernel, t.block_dim, a.reshape(-1), b.reshape(-1), c, None, t,
                              chip="910")
    finally:
        _worker._use_worker(prev)
    return res.trace, res.outputs[2]


def test_a_launch_traces_the_same_on_the_readable_twins():
    """twins.use("python") runs the readable stream, scheduler, queue calls and moves: the same
    trace, bit for bit. The outputs too, against the Cython side with its worker off; with the
    worker on, to float32 rounding (it splits each mmad product in two)."""
    py_trace, py_out = _matmul("python")
    cy_trace, cy_out = _matmul("cython")
    assert trace_digest(py_trace) == trace_digest(cy_trace)
    same_numbers(cy_out, py_out)
    off_trace, off_out = _matmul("cython", worker=False)
    assert trace_digest(py_trace, [py_out]) == trace_digest(off_trace, [off_out])


def test_the_python_side_defers_no_move():
    before = _worker.queued()
    _matmul("python")
    assert _worker.queued() == before and not formats.PENDING
