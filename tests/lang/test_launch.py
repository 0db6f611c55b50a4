"""What a launch leaves as it found it: the garbage collector, the caller's arrays (read in
place, copied on the first write, donated ones written), and no reference cycles."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from npulab import lang
from npulab.kernels.matmul import MatmulProblem, default_tiling, launch_matmul


def test_launch_puts_the_garbage_collector_back_as_it_was():
    a = np.ones((1, 16, 16), np.float16)
    t = default_tiling(MatmulProblem(1, 16, 16, 16, "float16"), "teach")
    assert gc.isenabled()
    launch_matmul(a, a, t, chip="teach")
    assert gc.isenabled()
    gc.disable()
    try:
        launch_matmul(a, a, t, chip="teach")
        assert not gc.isenabled()
    finally:
        gc.enable()

    def failing(x):
        raise RuntimeError("kernel failed")

    with pytest.raises(RuntimeError, match="kernel failed"):
        lang.launch(failing, 1, np.zeros(8, np.float32))
    assert gc.isenabled()


def test_launch_outputs_are_new_arrays_and_inputs_untouched():
    """A numpy argument's GM copy is handed back as its output: never the caller's array, which
    the kernel cannot write; a GlobalTensor argument's output is a copy of its bytes."""
    x = np.arange(64, dtype=np.float32)
    keep = x.copy()
    g = lang.GlobalTensor(np.zeros(64, np.float32), name="g")
    # the kernel also writes its src back: the launch's copy of x, not x
    res = lang.launch(_copy_kernel, 1, x, g, [], True, chip="teach", core_type="aiv", check_races=False)
    np.testing.assert_array_equal(x, keep)
    assert res.outputs[0] is not x and not np.shares_memory(res.outputs[0], x)
    np.testing.assert_array_equal(res.outputs[1], keep)
    assert not np.shares_memory(res.outputs[1], g.data)
    np.testing.assert_array_equal(g.data, keep)


def _copy_kernel(src, dst, seen, back=False):
    """dst = src through UB (and src = the same bytes when ``back``); records what src reads
    at the start (whether it is still the caller's array)."""
    seen.append(src.data)
    pipe = lang.TPipe()
    q = lang.Queue(lang.VECIN, "q")
    pipe.init_buffer(q, 1, 256)
    t = q.alloc_tensor(np.float32)
    lang.data_copy(t, src)
    q.enque(t)
    t = q.deque()
    lang.data_copy(dst, t)
    if back:
        lang.data_copy(src, t)
    q.free_tensor(t)


def test_launch_reads_inputs_in_place_and_copies_on_first_write():
    """A numpy input the kernel only reads is read where it is (no copy at launch); the first
    write to a numpy argument copies it, so the caller's arrays are never written."""
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    keep_y = y.copy()
    seen = []
    res = lang.launch(_copy_kernel, 1, x, y, seen, chip="teach", core_type="aiv", check_races=False)
    assert np.shares_memory(seen[0], x) and not seen[0].flags.writeable
    np.testing.assert_array_equal(y, keep_y)                  # the caller's y: untouched
    np.testing.assert_array_equal(res.outputs[1], x)          # the launch's own copy, written
    assert not np.shares_memory(res.outputs[1], y)
    assert not np.shares_memory(res.outputs[0], x)            # an unwritten input: a copy
    np.testing.assert_array_equal(res.outputs[0], x)


def test_launch_donate_writes_in_place_and_outputs_picks_what_comes_back():
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    res = lang.launch(_copy_kernel, 1, x, y, [], chip="teach", core_type="aiv", check_races=False,
                      donate=(1,), outputs=(1,))
    assert np.shares_memory(res.outputs[1], y)               # donated: written where it is
    np.testing.assert_array_equal(y, x)
    assert res.outputs[0] is None and res.outputs[2] is None
    with pytest.raises(ValueError, match="donate"):
        lang.launch(_copy_kernel, 1, x, y, [], chip="teach", core_type="aiv", donate=(2,))


def test_a_launch_leaves_no_reference_cycles():
    """Device.release breaks the cycles among the device's objects: they are freed when the
    launch returns instead of piling up for the cycle collector (thousands a launch)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 64, 48)).astype(np.float16)
    b = rng.standard_normal((1, 48, 32)).astype(np.float16)
    t = default_tiling(MatmulProblem(1, 64, 32, 48, "float16"), "910")
    gc.collect()
    gc.disable()
    try:
        launch_matmul(a, b, t, chip="910", check_races=True)
        found = gc.collect()
    finally:
        gc.enable()
    assert found < 20, f"{found} objects in reference cycles after one launch"


def test_fixpipe_into_a_numpy_argument_writes_the_launchs_copy():
    """FixPipe is the other GM write path: a C passed as a plain numpy argument (not donated)
    is copied on the first write, so the caller's array keeps its bytes and the output has C."""
    from npulab.kernels.matmul import matmul_kernel
    rng = np.random.default_rng(1)
    t = default_tiling(MatmulProblem(1, 32, 48, 64, "float16"), "910")
    a = rng.standard_normal((32, 64)).astype(np.float16)
    b = rng.standard_normal((64, 48)).astype(np.float16)
    c = np.full(32 * 48, 7.0, np.float16)
    keep = c.copy()
    res = lang.launch(matmul_kernel, t.block_dim, a.reshape(-1), b.reshape(-1), c, None, t,
                      chip="910", check_races=False)
    np.testing.assert_array_equal(c, keep)
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16).reshape(-1)
    np.testing.assert_allclose(res.outputs[2].astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=4e-3)
    assert not np.shares_memory(res.outputs[2], c)
