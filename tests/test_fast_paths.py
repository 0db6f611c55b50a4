"""The simulator's fast paths against their readable twins: the instruction stream (Cython
``npulab._stream`` vs ``npulab.sim.stream``), data_copy_nd2nz's move (``pack_nz_raw`` vs the
numpy specification), the whole-fractal widening, and what a launch leaves as it found it."""
from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npulab import formats as F
from npulab import lang, twins
from npulab.errors import DeadlockError, InstructionBudgetError, ShapeError, SyncError
from npulab.kernels.matmul import run_matmul
from npulab.kernels.matmul_tiling import default_tiling
from npulab.sim import stream as S
from npulab.sim.isa import Kind, Op, Pipe
from tests.test_trace_pins import trace_digest

_stream = pytest.importorskip("npulab._stream")
_formats = pytest.importorskip("npulab._formats")


def _over(name):
    raise InstructionBudgetError(f"over budget at {name}")


def _streams(limit=10_000, races=True):
    return (S.Stream(S.Budget(limit), races, _over),
            _stream.Stream(_stream.Budget(limit), races, _over))


# -- the instruction stream ---------------------------------------------------------------------
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


def test_stream_twins_keep_the_budget_and_the_race_switch():
    for s in _streams(limit=3, races=False):
        for _ in range(3):
            s.issue(0, 0, 0, reads=[("UB", 0, 32)])
        with pytest.raises(InstructionBudgetError, match="over budget at fourth"):
            s.issue(0, 0, 0, name="fourth")
        assert s.accesses == {}                   # no race checker, no byte ranges kept


def test_stream_column_writes_through():
    """GM settling rewrites durations in place (sim/gm.py): both columns take the write."""
    for s in _streams():
        s.issue(1, 0, 2, 10)
        s.issue(1, 0, 2, 20)
        col = s.column("dur")
        col[1] = 99
        assert list(np.asarray(s.column("dur"))) == [10, 99]


def test_stream_rejects_what_is_not_a_number():
    for s in _streams():
        with pytest.raises((TypeError, ValueError)):
            s.issue(1, 0, 2, "ten")


def _matmul_digest(side):
    a = np.random.default_rng(1).standard_normal((1, 70, 90)).astype(np.float16)
    b = np.random.default_rng(2).standard_normal((1, 90, 50)).astype(np.float16)
    t = default_tiling((1, 70, 50, 90), np.float16, "910")
    c = np.zeros(70 * 50, np.float16)

    with twins.use(side):
        res = lang.launch(_matmul_kernel, t.block_dim, a.reshape(-1), b.reshape(-1), c, None, t, chip="910")
    return trace_digest(res.trace, [res.outputs[2]])


def _matmul_kernel(*args):
    from npulab.kernels.matmul import matmul_kernel
    matmul_kernel(*args)


def test_a_launch_traces_the_same_on_the_readable_twins():
    """twins.use("python") runs the readable stream and scheduler: the same trace, bit for bit."""
    assert _matmul_digest("python") == _matmul_digest("cython")


# -- data_copy_nd2nz's move --------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 70), cols=st.integers(1, 80), extra=st.integers(0, 40),
       off=st.integers(0, 50), dst_off=st.integers(0, 3), dtype=st.sampled_from([np.float16, np.float32, np.int8]))
def test_pack_nz_twins_agree(rows, cols, extra, off, dst_off, dtype):
    """The (rows, cols) tile of a strided GM matrix as NZ fractals, zero padding: Cython and
    the numpy specification write the same bytes, and nothing outside the tile's fractals."""
    c0 = F.c0_of(dtype)
    stride = cols + extra
    src = (np.arange(off + rows * stride) % 251 - 120).astype(dtype)
    r16, c1 = -(-rows // 16) * 16, -(-cols // c0)
    need = r16 * c1 * 32
    spec = F.pack_numpy(np.lib.stride_tricks.as_strided(
        src[off:], shape=(rows, cols), strides=(stride * src.itemsize, src.itemsize)), 16, c0, True, False)
    for fn in (_formats.pack_nz_raw, F.pack_nz_buffers.spec):
        buf = np.full(need + 64 * (dst_off + 2), 7, np.uint8)
        fn(src, off, rows, cols, stride, buf, 32 * dst_off, c0)
        np.testing.assert_array_equal(buf[32 * dst_off:32 * dst_off + need].view(dtype), spec.reshape(-1))
        assert (buf[:32 * dst_off] == 7).all() and (buf[32 * dst_off + need:] == 7).all()


def test_pack_nz_checks_its_bounds():
    src = np.zeros(100, np.float16)
    buf = np.zeros(4096, np.uint8)
    for bad in ((src, 0, 10, 16, 16, buf, 0, 16),         # the tile reaches past src
                (src, 0, 4, 16, 8, buf, 0, 16),           # stride < cols
                (src, 0, 4, 16, 16, buf, 4096 - 32, 16),  # the fractals reach past buf
                (src, 0, 4, 16, 16, buf, 0, 8)):          # 16-byte fractal rows
        for fn in (F.pack_nz_buffers, F.pack_nz_buffers.spec):
            with pytest.raises(ShapeError):
                fn(*bad)


# -- the whole-fractal widening (every matmul fractal) -----------------------------------------
@pytest.mark.parametrize("col_inner", [False, True])
@pytest.mark.parametrize("rows,cols", [(16, 16), (64, 48), (48, 37), (35, 64)])
def test_widening_of_whole_and_partial_fractals(rows, cols, col_inner):
    """Whole 16 x 16 fractals take the direct path, the edges the general one: both give
    numpy's float32 of every half, into a row-strided matrix."""
    x = (np.random.default_rng(rows * cols).standard_normal((rows, cols)) * 100).astype(np.float16)
    x.flat[:3] = [np.inf, -0.0, 6e-8]
    z = F.pack_numpy(x, 16, 16, False, col_inner)
    buf = np.zeros(64 + z.nbytes, np.uint8)
    buf[64:] = z.reshape(-1).view(np.uint8)
    out = np.full((rows + 3, cols + 20), -1, np.float32)
    _formats.unpack_f16_to_f32_raw(buf, 64, out, 2, rows, 5, cols, 16, 16, False, col_inner)
    np.testing.assert_array_equal(out[2:2 + rows, 5:5 + cols], x.astype(np.float32))
    out[2:2 + rows, 5:5 + cols] = -1
    assert (out == -1).all()


def test_raw_widening_checks_the_fractal_shape_before_dividing_by_it():
    buf, out = np.zeros(1024, np.uint8), np.zeros((4, 4), np.float32)
    for fr, fc in ((0, 16), (16, 0)):
        with pytest.raises(ValueError, match="fractals of"):
            _formats.unpack_f16_to_f32_raw(buf, 0, out, 0, 1, 0, 1, fr, fc, False, False)


# -- what a launch leaves behind ---------------------------------------------------------------
def test_launch_puts_the_garbage_collector_back_as_it_was():
    a = np.ones((1, 16, 16), np.float16)
    t = default_tiling((1, 16, 16, 16), np.float16, "teach")
    assert gc.isenabled()
    run_matmul(a, a, t, chip="teach")
    assert gc.isenabled()
    gc.disable()
    try:
        run_matmul(a, a, t, chip="teach")
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


def test_queue_tensors_are_one_object_per_slot_and_dtype():
    seen = {}

    def kernel(x):
        pipe = lang.TPipe()
        q = lang.Queue(lang.VECIN, "q")
        pipe.init_buffer(q, 2, 256)
        for i in range(4):
            t = q.alloc_tensor(np.float32 if i < 3 else np.float16)
            seen.setdefault((t.slot, t.dtype), set()).add(id(t))
            q.enque(t)
            q.free_tensor(q.deque())

    lang.launch(kernel, 1, np.zeros(8, np.float32), chip="teach", core_type="aiv")
    assert {k: len(v) for k, v in seen.items()} == {(0, np.dtype(np.float32)): 1,
                                                    (1, np.dtype(np.float32)): 1,
                                                    (1, np.dtype(np.float16)): 1}


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
    t = default_tiling((1, 64, 32, 48), np.float16, "910")
    gc.collect()
    gc.disable()
    try:
        run_matmul(a, b, t, chip="910", check_races=True)
        found = gc.collect()
    finally:
        gc.enable()
    assert found < 20, f"{found} objects in reference cycles after one launch"


# -- the queue calls: Cython (lang.Queue) against the readable twin (lang.pipe.PyQueue) ---------
def _queue_kernel(steps, depth, dtypes):
    """A copy-in / compute / copy-out pipeline over two queues of ``queue_cls``, with the
    deque(dtype) reinterpretation and a depth other than 2; block b writes its own 256 values
    of y (blocks writing the same GM bytes race)."""
    def kernel(x, y):
        from npulab.lang import pipe as P
        y = y[lang.get_block_idx() * 256:]
        pipe = P.TPipe()
        qi, qo = lang.Queue(lang.VECIN, "in"), lang.Queue(lang.VECOUT, "out")
        pipe.init_buffer(qi, depth, 512)
        pipe.init_buffer(qo, depth, 512)
        for s in range(steps):
            dt = dtypes[s % len(dtypes)]
            t = qi.alloc_tensor(np.float32)
            lang.data_copy(t, x[(s % 4) * 64:], 64)
            qi.enque(t)
            u = qi.deque(dt)
            o = qo.alloc_tensor(np.float32)
            lang.adds(o, u.reinterpret_cast(np.float32), 1.0, 64)
            qo.enque(o)
            qi.free_tensor(u)
            o = qo.deque()
            lang.data_copy(y[(s % 4) * 64:], o, 64)
            qo.free_tensor(o)
    return kernel


@settings(max_examples=15, deadline=None)
@given(steps=st.integers(1, 9), depth=st.integers(1, 3), blocks=st.integers(1, 3),
       dtypes=st.lists(st.sampled_from([None, np.float32, np.int32]), min_size=1, max_size=3))
def test_queue_calls_twins_agree(steps, depth, blocks, dtypes):
    from npulab.lang import pipe as P
    assert P._QUEUES["cython"].alloc_tensor is not P._QUEUES["python"].alloc_tensor
    x = np.arange(256, dtype=np.float32)
    runs = []
    for side in ("cython", "python"):
        with twins.use(side):
            runs.append(lang.launch(_queue_kernel(steps, depth, dtypes), blocks, x,
                                    np.zeros(256 * blocks, np.float32), chip="teach", core_type="aiv"))
    assert trace_digest(runs[0].trace, runs[0].outputs) == trace_digest(runs[1].trace, runs[1].outputs)


@pytest.mark.parametrize("misuse", ["deque_empty", "all_held", "free_enqueued", "foreign", "no_init"])
def test_queue_calls_twins_raise_the_same_errors(misuse):
    from npulab.lang import pipe as P
    messages = []
    for side in ("cython", "python"):
        def kernel(x):
            pipe = P.TPipe()
            q, other = P.Queue(lang.VECIN, "q"), P.Queue(lang.VECIN, "other")
            if misuse == "no_init":
                q.alloc_tensor(np.float32)
            pipe.init_buffer(q, 2, 256)
            pipe.init_buffer(other, 1, 256)
            if misuse == "deque_empty":
                q.deque()
            t = q.alloc_tensor(np.float32)
            if misuse == "all_held":
                q.alloc_tensor(np.float32)
                q.alloc_tensor(np.float32)
            if misuse == "free_enqueued":
                q.enque(t)
                q.free_tensor(t)
            if misuse == "foreign":
                other.enque(t)
        with pytest.raises((SyncError, DeadlockError)) as info, twins.use(side):
            lang.launch(kernel, 1, np.zeros(64, np.float32), chip="teach", core_type="aiv")
        messages.append((type(info.value), str(info.value)))
    assert messages[0] == messages[1]


def test_fixpipe_into_a_numpy_argument_writes_the_launchs_copy():
    """FixPipe is the other GM write path: a C passed as a plain numpy argument (not donated)
    is copied on the first write, so the caller's array keeps its bytes and the output has C."""
    from npulab.kernels.matmul import matmul_kernel
    rng = np.random.default_rng(1)
    t = default_tiling((1, 32, 48, 64), np.float16, "910")
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
