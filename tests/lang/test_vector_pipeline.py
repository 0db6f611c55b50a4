"""The pipelined vector unit (lang.vector): a vector instruction occupies PIPE_V for its repeats
and pays its start-up as latency; the automatic PIPE_V barrier (lang.sync.vector_hazard) goes
before every instruction that depends on one still in flight, and only there."""
import numpy as np
import pytest

from npulab import lang
from npulab.chips import get_chip
from npulab.kernels.norm import layer_norm_kernel, layer_norm_tiling
from npulab.kernels.softmax import softmax_ar_kernel, softmax_tiling
from npulab.lang.context import current
from npulab.sim.isa import Kind, Pipe
from fixtures import run_vector

AUTO = "pipe_barrier V (auto)"
N = 64                                      # one fp32 repeat
X = np.arange(4 * N, dtype=np.float32) / 7


def _v_work(trace):
    """Indices of the vector instructions that do work (not the init_buffer markers)."""
    return np.flatnonzero((trace.pipe == Pipe.V) & (trace.kind == Kind.WORK) & (trace.busy_end > trace.start))


def _auto(trace) -> int:
    return sum(1 for i in np.flatnonzero(trace.kind == Kind.SET) if trace.name[i] == AUTO)


def test_independent_instructions_overlap_their_start_ups():
    lat = get_chip("910").vector.startup_cycles
    _, tr = run_vector(lambda d, a: (lang.add(d, a, a, N), lang.mul(d[N:], a[N:], a[N:], N),
                                     lang.muls(d[2 * N:], a[2 * N:], 2.0, N)), X, chip="910")
    i, j, k = _v_work(tr)
    assert _auto(tr) == 0
    # each occupies the pipe one cycle (one repeat) and is in flight for the start-up after it
    assert [int(tr.busy_end[x] - tr.start[x]) for x in (i, j, k)] == [1, 1, 1]
    assert [int(tr.end[x] - tr.busy_end[x]) for x in (i, j, k)] == [lat, lat, lat]
    assert tr.start[j] == tr.busy_end[i] and tr.start[k] == tr.busy_end[j]


@pytest.mark.parametrize("case, barriers", [
    ("raw", 1),          # the mul reads what the add wrote
    ("waw", 1),          # the second add overwrites what the first wrote
    ("war", 0),          # the add overwrites what the mul read: in order, no barrier
    ("explicit", 0),     # the kernel's own pipe_barrier(PIPE_V) already orders them
])
def test_the_automatic_barrier_goes_before_a_dependent_instruction_only(case, barriers):
    def body(d, a):
        if case == "raw":
            lang.add(d, a, a, N)
            lang.mul(d[N:], d, d, N)
        elif case == "waw":
            lang.add(d, a, a, N)
            lang.add(d, a[N:], a[N:], N)
        elif case == "war":
            lang.mul(d, a, a, N)
            lang.add(a, a[N:], a[N:], N)
        else:
            lang.add(d, a, a, N)
            lang.pipe_barrier(lang.PIPE_V)
            lang.mul(d[N:], d, d, N)
    out, tr = run_vector(body, X, chip="910")
    i, j = _v_work(tr)
    assert _auto(tr) == barriers
    if case in ("raw", "waw", "explicit"):
        assert tr.start[j] >= tr.end[i]          # the second waits for the first's result
    else:
        assert tr.start[j] == tr.busy_end[i]     # it overlaps the first's start-up
    if case == "raw":
        np.testing.assert_array_equal(out[N:2 * N], (X[:N] + X[:N]) ** 2)


def test_a_flag_set_after_a_vector_instruction_fires_at_its_completion():
    lat = get_chip("910").vector.startup_cycles
    _, tr = run_vector(lambda d, a: lang.add(d, a, a, 4 * N), X, chip="910")
    (i,) = _v_work(tr)
    sets = [k for k in np.flatnonzero((tr.kind == Kind.SET) & (tr.pipe == Pipe.V)) if k > i]
    copy_out = np.flatnonzero(tr.pipe == Pipe.MTE3)[-1]
    assert tr.end[i] - tr.busy_end[i] == lat
    assert tr.end[sets[0]] == tr.end[i]                    # the V->MTE3 flag waits for the start-up
    assert tr.start[copy_out] >= tr.end[i]


def _run_and_keep_core(kernel, block_dim, *args, chip):
    cores = []

    def spy(*a):
        cores.append(current().core)
        kernel(*a)
    _, tr = lang.launch(spy, block_dim, *args, chip=chip, core_type="aiv", check_races=True)
    return tr, cores[0]


@pytest.mark.parametrize("which", ["layer_norm", "softmax"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_no_vector_instruction_starts_before_a_result_it_needs(which, dtype):
    """On core 0 of a real kernel: every vector instruction that reads or overwrites bytes an
    earlier vector instruction wrote starts after that one completed (start-up included)."""
    rows, cols = 96, 768
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(dtype)
    if which == "layer_norm":
        t = layer_norm_tiling(rows, cols, dtype, "910")
        g = np.ones(cols, dtype)
        tr, core = _run_and_keep_core(layer_norm_kernel, 1, x.reshape(-1), g, g, np.zeros_like(x).reshape(-1),
                                      t, 1e-5, chip="910")
    else:
        t = softmax_tiling((rows, cols), dtype, -1, "910")
        tr, core = _run_and_keep_core(softmax_ar_kernel, 1, x.reshape(-1), np.zeros_like(x).reshape(-1), t,
                                      chip="910")
    on = np.flatnonzero(tr.core == 0)
    start, end, pipe, kind = tr.start[on], tr.end[on], tr.pipe[on], tr.kind[on]
    writes = []                                    # (end, buffer, lo, hi) of earlier vector writes
    checked = 0
    for i in range(len(on)):
        if pipe[i] != Pipe.V or kind[i] != Kind.WORK or i not in core.accesses:
            continue
        acc = core.accesses[i]
        for e, buf, lo, hi in writes:
            if any(b == buf and l < hi and lo < h for b, l, h, _ in acc):
                assert start[i] >= e, f"instruction {i} '{tr.name[on[i]]}' starts before its input is there"
                checked += 1
        writes += [(end[i], b, l, h) for b, l, h, w in acc if w]
    assert checked > 50 and _auto(tr) > 0


def test_the_automatic_barrier_does_not_order_other_pipes():
    """A PIPE_V barrier orders the vector pipe with itself only: a copy out that reads a vector
    result with no flag between them is still a race (the race checker sees it)."""
    from npulab import RaceError
    from npulab.lang import VECCALC, TPipe, TBuf, data_copy

    def kernel(x, y):
        pipe = TPipe()
        buf = TBuf(VECCALC, "t")
        pipe.init_buffer(buf, 2 * N * 4)
        t = buf.get(np.float32)
        data_copy(t, x, N)
        lang.set_flag(lang.PIPE_MTE2, lang.PIPE_V, 0)
        lang.wait_flag(lang.PIPE_MTE2, lang.PIPE_V, 0)
        lang.adds(t[N:], t, 1.0, N)
        lang.muls(t[N:], t[N:], 2.0, N)            # reads the adds: an automatic barrier
        data_copy(y, t[N:], N)                     # MTE3 reads it: nothing orders V before it
    with pytest.raises(RaceError, match="race on core 0 in UB"):
        lang.launch(kernel, 1, X[:N].copy(), np.zeros(N, np.float32), chip="910")
