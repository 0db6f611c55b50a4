"""Deferred moves (npulab._worker, the worker thread that runs the cube path's numerics during
a functional launch on the Cython side, and its readable twin npulab.formats.worker, where every
move runs at once): traces are the same with the worker and without it, bit for bit, and the
results to float32 rounding; whatever reads the bytes waits for the moves queued before; errors,
forks, a full queue and BLAS's thread setting leave nothing behind. ``_use_worker`` (a hook for
these tests, not a twin switch) turns the worker off for the immediate run."""
from __future__ import annotations

import multiprocessing
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from threadpoolctl import threadpool_info

import npulab.formats as F
import npulab.ops as ops
from fixtures import same_numbers, trace_digest
from npulab import ShapeError, _worker, twins
from npulab.formats import worker as spec
from npulab.lang import (A1, A2, PIPE_MTE1, PIPE_MTE2, TPipe, TBuf, data_copy_nd2nz, launch,
                         load_data, set_flag, wait_flag)


@pytest.fixture
def worker():
    """The worker on (this machine has pthreads and numpy's OpenBLAS: the test needs both)."""
    assert _worker._find_blas(), "numpy's OpenBLAS cblas_sgemm was not found"
    prev = _worker._use_worker(True)
    yield
    _worker._use_worker(prev)


def _both_ways(fn):
    """fn() with the worker, then without it: (result, moves queued) each time."""
    out = []
    for on in (True, False):
        prev = _worker._use_worker(on)
        try:
            before = _worker.queued()
            res = fn()
            out.append((res, _worker.queued() - before))
        finally:
            _worker._use_worker(prev)
    return out


def _rng(seed):
    return np.random.default_rng(seed)


CASES = {
    "matmul fp16, tails": lambda: ops.matmul(_rng(1).standard_normal((300, 517)).astype(np.float16),
                                             _rng(2).standard_normal((517, 129)).astype(np.float16),
                                             return_trace=True),
    "matmul fp16 1024^2 x 256, bias, relu": lambda: ops.matmul(
        _rng(3).standard_normal((1024, 256)).astype(np.float16),
        _rng(4).standard_normal((256, 1024)).astype(np.float16),
        bias=_rng(5).standard_normal(1024).astype(np.float16), relu=True, return_trace=True),
    "matmul fp32, transposed": lambda: ops.matmul(_rng(6).standard_normal((97, 200)).astype(np.float32),
                                                  _rng(7).standard_normal((64, 97)).astype(np.float32),
                                                  trans_a=True, trans_b=True, return_trace=True),
    "matmul int8": lambda: ops.matmul(_rng(8).integers(-128, 128, (130, 300)).astype(np.int8),
                                      _rng(9).integers(-128, 128, (300, 70)).astype(np.int8),
                                      return_trace=True),
    "batch_matmul fp16": lambda: ops.batch_matmul(_rng(10).standard_normal((3, 64, 96)).astype(np.float16),
                                                  _rng(11).standard_normal((3, 96, 80)).astype(np.float16),
                                                  return_trace=True),
    "conv2d fp16": lambda: ops.conv2d(_rng(12).standard_normal((2, 16, 14, 14)).astype(np.float16),
                                      _rng(13).standard_normal((32, 16, 3, 3)).astype(np.float16),
                                      _rng(14).standard_normal(32).astype(np.float16), padding=1,
                                      return_trace=True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_results_and_trace_with_and_without_the_worker(worker, name):
    (on, queued_on), (off, queued_off) = _both_ways(CASES[name])
    assert trace_digest(on[1], []) == trace_digest(off[1], [])      # timing never sees numbers
    same_numbers(on[0], off[0])
    assert queued_off == 0
    if name != "matmul int8":               # int8 chains widen in numpy, exactly, on this thread
        assert queued_on > 0                # the worker did run moves


def test_fused_conv_bn_relu_the_same_both_ways(worker):
    rng = _rng(20)
    x = rng.standard_normal((1, 16, 12, 12)).astype(np.float16)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float16)
    bn = [rng.standard_normal(16).astype(np.float32) for _ in range(3)] + [rng.random(16).astype(np.float32) + .5]
    (on, _), (off, _) = _both_ways(lambda: ops.conv2d_bn_relu(
        x, w, None, bn[0], bn[3], bn[1], bn[2], padding=1))
    same_numbers(on, off)


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 200), n=st.integers(1, 90), k=st.integers(1, 150), pad=st.integers(0, 20),
       seed=st.integers(0, 2**16))
def test_split_product_is_numpys_matmul_of_each_half(m, n, k, pad, seed):
    """Inside deferred_moves, product_into gives the worker the rows from the first multiple
    of 16 past the middle: numpy's matmul of each half (strided a included), to float32
    rounding (which BLAS kernel a half gets, and so the last bits, varies with the BLAS build);
    outside, or too small to split, the bytes of numpy's matmul of the whole."""
    rng = _rng(seed)
    a = rng.standard_normal((m, k + pad)).astype(np.float32)[:, :k]
    b = rng.standard_normal((k, n)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    _worker.product_into(a, b, out)
    np.testing.assert_array_equal(out, a @ b)
    h = (m // 2 + 15) // 16 * 16
    halves = np.vstack([a[:h] @ b, a[h:] @ b]) if m >= 32 and n >= 2 else a @ b
    out[:] = np.nan
    with _worker.deferred_moves():
        _worker.product_into(a, b, out)
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, halves, rtol=1e-5, atol=1e-6 * float(np.abs(halves).max()))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = 1e-6 * k * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)) + 1e-30
    assert np.all(np.abs(out - exact) <= bound)     # a float32 sum of the same k products


@pytest.mark.parametrize("side", twins.SIDES)
def test_product_into_checks_its_arguments(side):
    a, b = np.ones((32, 8), np.float32), np.ones((8, 4), np.float32)
    for bad in ((a, b, np.empty((32, 5), np.float32)), (a.astype(np.float64), b, np.empty((32, 4), np.float32)),
                (a, np.ones((7, 4), np.float32), np.empty((32, 4), np.float32))):
        with pytest.raises(ShapeError, match="float32 \\(m, k\\) @ \\(k, n\\)"):
            twins.pick(_worker, spec, side).product_into(*bad)


def _pack_then_read(a_gm, out_gm, rows, cols, loads):
    """nd2nz into L1 and ``loads`` L1 -> L0A windows (queued for the worker), then a read of
    both buffers from Python inside the kernel: it must see every queued move done."""
    pipe = TPipe()
    l1, l0a = TBuf(A1, "l1"), TBuf(A2, "l0a")
    pipe.init_buffer(l1, rows * cols * 2)
    pipe.init_buffer(l0a, 16 * cols * 2)
    data_copy_nd2nz(l1.get(np.float16), a_gm, rows, cols)
    set_flag(PIPE_MTE2, PIPE_MTE1, 0)
    wait_flag(PIPE_MTE2, PIPE_MTE1, 0)
    for i in range(loads):
        load_data(l0a.get(np.float16), l1.get(np.float16), 16, cols, src_rows=rows,
                  row_off=16 * (i % (rows // 16)))
    _pack_then_read.seen = (l1.get(np.float16).numpy().copy(), l0a.get(np.float16).numpy().copy())


@pytest.mark.parametrize("loads", [1, 2500])
def test_reading_a_buffer_waits_for_the_moves_queued_before(worker, loads):
    """2500 loads are more than the queue's 1024 slots: queuing waits for room."""
    rows, cols = 64, 32
    a = (np.arange(rows * cols) % 1000).astype(np.float16).reshape(rows, cols)
    before = _worker.queued()
    launch(_pack_then_read, 1, a, np.zeros(1, np.float16), rows, cols, loads, chip="teach")
    assert _worker.queued() - before >= 1 + loads     # (and the zeroing of the buffers at the end)
    l1, l0a = _pack_then_read.seen
    np.testing.assert_array_equal(l1, F.to_fractal(a, "NZ").reshape(-1))
    last = 16 * ((loads - 1) % (rows // 16))
    np.testing.assert_array_equal(l0a, F.to_fractal(a[last:last + 16], "ZZ").reshape(-1))


def _fails_after_moves(a_gm):
    pipe = TPipe()
    l1 = TBuf(A1, "l1")
    pipe.init_buffer(l1, 64 * 64 * 2)
    data_copy_nd2nz(l1.get(np.float16), a_gm, 64, 64)
    data_copy_nd2nz(l1.get(np.float16), a_gm, 64, 65)           # more than l1 holds


def _blas_threads():
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def test_an_error_mid_launch_leaves_nothing_queued_and_blas_as_it_was(worker):
    threads = _blas_threads()
    a = np.ones((64, 65), np.float16)
    with pytest.raises(ShapeError, match="holds"):
        launch(_fails_after_moves, 1, a, chip="teach")
    assert not F.PENDING and not _worker.deferring()
    assert _blas_threads() == threads
    c = ops.matmul(np.ones((40, 40), np.float16), np.ones((40, 40), np.float16))
    np.testing.assert_array_equal(c, np.full((40, 40), 40, np.float16))
    assert _blas_threads() == threads


def _child_matmul(seed):
    rng = _rng(seed)
    a, b = rng.standard_normal((96, 130)).astype(np.float16), rng.standard_normal((130, 64)).astype(np.float16)
    return ops.matmul(a, b)


def test_a_forked_child_runs_launches(worker):
    """The worker thread does not survive fork: the child starts its own."""
    want = _child_matmul(3)                 # the parent's worker is running now
    with multiprocessing.get_context("fork").Pool(1) as pool:
        got = pool.apply_async(_child_matmul, (3,)).get(timeout=120)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("round_", range(6))
def test_launches_from_two_threads_at_once(worker, round_):
    """Two Python threads launching at once share the one queue: each gets its own results.
    (Once about one run in sixty went wrong: a sync that drained the queue with the GIL released
    then forgot the moves the other thread had queued meanwhile, so that thread's next read did
    not wait for them; repeated to catch that kind of interleaving.)"""
    want = {seed: _child_matmul(seed) for seed in range(4)}
    got, errors = {}, []

    def run(seeds):
        try:
            for seed in seeds:
                got[seed] = _child_matmul(seed)
        except Exception as exc:            # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in ((0, 1), (2, 3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    for seed, c in want.items():
        same_numbers(got[seed], c)
    assert not _worker.deferring()


@pytest.mark.parametrize("side", twins.SIDES)
def test_outside_a_launch_a_move_runs_at_once(side):
    """Without deferred_moves() nothing is queued on either twin: a product is numpy's matmul
    of the whole and a zeroing is done when zero_bytes returns."""
    w = twins.pick(_worker, spec, side)
    rng = _rng(30)
    a, b = rng.standard_normal((64, 40)).astype(np.float32), rng.standard_normal((40, 24)).astype(np.float32)
    before = w.queued()
    out = np.full((64, 24), np.nan, np.float32)
    assert w.product_into(a, b, out) is out
    np.testing.assert_array_equal(out, a @ b)
    buf = np.full(100, 9, np.uint8)
    w.zero_bytes(buf, 60)
    assert (buf[:60] == 0).all() and (buf[60:] == 9).all() and not w.deferring()
    with pytest.raises(ShapeError, match="zero_bytes: 101 bytes of a uint8 array of 100"):
        w.zero_bytes(buf, 101)
    assert w.queued() == before and not w.PENDING
    w.sync()


def test_the_readable_twin_never_defers():
    with spec.deferred_moves() as moves:
        assert not spec.deferring() and moves is not None
        buf = np.ones(64, np.uint8)
        spec.zero_bytes(buf, 64)                        # done at once, inside the block too
        assert not buf.any() and spec.PENDING == [] and spec.queued() == 0


def test_a_python_side_launch_runs_its_moves_at_once():
    """A launch on the Python side uses the readable worker: the Cython queue stays as it was,
    and the numbers are those of the Cython side with its worker off, bit for bit."""
    a = _rng(31).standard_normal((130, 70)).astype(np.float16)
    b = _rng(32).standard_normal((70, 90)).astype(np.float16)
    before = _worker.queued()
    with twins.use("python"):
        c, tr = ops.matmul(a, b, return_trace=True)
    assert _worker.queued() == before
    prev = _worker._use_worker(False)
    try:
        c_off, tr_off = ops.matmul(a, b, return_trace=True)
    finally:
        _worker._use_worker(prev)
    assert trace_digest(tr, [c]) == trace_digest(tr_off, [c_off])

