"""The coupled chips' cube output (npulab.lang.drain_ub): L0C -> UB on the vector pipe with the
conversions the chip's move makes and no more, UB (NZ) -> GM (ND) by strided MTE3 copies, the CO1
queue's consumer, and FixPipe refused where there is none."""
import numpy as np
import pytest

from npulab import CoreTypeError, DataPathError, ShapeError, get_chip
from npulab.arch import round_up
from npulab.lang import (A1, A2, B2, CO1, PIPE_M, PIPE_MTE1, PIPE_MTE2, VECOUT, Queue, TBuf, TPipe,
                         cast, data_copy_l0c2ub, data_copy_nd2nz, data_copy_nz2nd, data_copy_strided,
                         fixpipe, fixpipe_channelwise, launch, load_data, mmad, output_path, set_flag,
                         wait_flag)
from npulab.sim.isa import Op, Pipe


def _mmad(pipe, a_gm, b_gm, m, n, k, dt):
    """GM -> L1 -> L0A/L0B -> one mmad into a CO1 queue slot; returns (queue, enqueued tensor)."""
    item = np.dtype(dt).itemsize
    c0 = 32 // item
    l1, l0a, l0b, qc = TBuf(A1, "l1"), TBuf(A2, "l0a"), TBuf(B2, "l0b"), Queue(CO1, "c")
    a_n, b_n = round_up(m, 16) * round_up(k, c0), round_up(k, 16) * round_up(n, c0)
    pipe.init_buffer(l1, (a_n + b_n) * item)
    pipe.init_buffer(l0a, round_up(m, 16) * round_up(k, c0) * item)
    pipe.init_buffer(l0b, round_up(k, c0) * round_up(n, 16) * item)
    pipe.init_buffer(qc, 1, round_up(m, 16) * round_up(n, 16) * 4)
    a1, b1 = l1.get(dt)[:a_n], l1.get(dt)[a_n:]
    data_copy_nd2nz(a1, a_gm, m, k)
    data_copy_nd2nz(b1, b_gm, k, n)
    set_flag(PIPE_MTE2, PIPE_MTE1, 0)
    wait_flag(PIPE_MTE2, PIPE_MTE1, 0)
    load_data(l0a.get(dt), a1, m, k, src_rows=round_up(m, 16))
    load_data(l0b.get(dt), b1, k, n, src_rows=round_up(k, 16))
    set_flag(PIPE_MTE1, PIPE_M, 0)
    wait_flag(PIPE_MTE1, PIPE_M, 0)
    acc = np.int32 if np.dtype(dt) == np.int8 else np.float32
    c = qc.alloc_tensor(acc)
    mmad(c, l0a.get(dt), l0b.get(dt), m, n, k)
    qc.enque(c)
    return qc, c


def _drain_kernel(a_gm, b_gm, c_gm, m, n, k, dt, out_dt, convert):
    """mmad, then L0C -> UB (converting on the way when ``convert``, else cast on the vector
    unit), then UB -> GM as ND."""
    pipe = TPipe()
    qc, _ = _mmad(pipe, a_gm, b_gm, m, n, k, dt)
    rows, cols = round_up(m, 16), round_up(n, 16)
    stage, qy = TBuf(VECOUT, "stage"), Queue(VECOUT, "y")
    pipe.init_buffer(stage, rows * cols * 4)
    pipe.init_buffer(qy, 1, rows * cols * np.dtype(out_dt).itemsize)
    c = qc.deque()
    y = qy.alloc_tensor(out_dt)
    if convert is not None:
        data_copy_l0c2ub(y, c, rows * cols // 256, **convert)
    else:
        acc = stage.get(c.dtype)
        data_copy_l0c2ub(acc, c, rows * cols // 256)
        cast(y, acc, count=rows * cols)
    qc.free_tensor(c)
    qy.enque(y)
    y = qy.deque()
    data_copy_nz2nd(c_gm, y, m, n)
    qy.free_tensor(y)


def _inputs(m, n, k, dt, seed=3):
    rng = np.random.default_rng(seed)
    if np.dtype(dt) == np.int8:
        return rng.integers(-128, 128, (m, k)).astype(dt), rng.integers(-128, 128, (k, n)).astype(dt)
    return rng.integers(-3, 4, (m, k)).astype(dt), rng.integers(-3, 4, (k, n)).astype(dt)


@pytest.mark.parametrize("m,n", [(16, 16), (40, 50), (33, 128)])
def test_910_drains_through_ub_on_the_vector_pipe(m, n, side):
    """L0C -> UB is one vector-pipe instruction per call, priced at the vector width; the tile
    leaves by one MTE3 copy per fractal column (a narrower last column included); the CO1 queue's
    consumer is the vector pipe (on both sides of npulab.twins); nothing runs on FixPipe."""
    k = 32
    a, b = _inputs(m, n, k, np.float16)
    res = launch(_drain_kernel, 1, a, b, np.zeros((m, n), np.float16), m, n, k, np.float16, np.float16, None,
                 chip="910", check_races=True)
    np.testing.assert_array_equal(res.outputs[2].reshape(m, n), (a.astype(np.float32) @ b.astype(np.float32))
                                  .astype(np.float16))
    tr, chip = res.trace, get_chip("910")
    move = np.flatnonzero(tr.op == Op.COPY_L0C_TO_UB)
    route = np.array(tr.route)
    assert len(move) == 1 and tr.pipe[move[0]] == Pipe.V and route[move[0]] == "L0C->UB"
    nbytes = round_up(m, 16) * round_up(n, 16) * 4
    assert tr.busy_end[move[0]] - tr.start[move[0]] == -(-nbytes // chip.vector.bytes_per_cycle)
    assert tr.end[move[0]] - tr.busy_end[move[0]] == chip.vector.startup_cycles
    mmads = np.flatnonzero(tr.op == Op.MMAD)
    assert tr.start[move[0]] >= tr.end[mmads[-1]]               # after the M -> V flag
    out = np.flatnonzero(route == "UB->GM")
    assert len(out) == -(-n // 16) and set(tr.pipe[out]) == {Pipe.MTE3}
    assert tr.nbytes[out].sum() == m * n * 2                     # only the tile's elements reach GM
    assert not (tr.pipe == Pipe.FIX).any()
    waits = [i for i, nm in enumerate(tr.name) if nm.startswith("deque c[")]
    assert [Pipe(tr.pipe[i]) for i in waits] == [Pipe.V]


@pytest.mark.parametrize("dt,out,convert", [
    (np.float16, np.float16, {}),                       # fp32 -> fp16 on the way
    (np.float16, np.float16, {"relu": True}),
    (np.int8, np.float16, {"deq_scale": 0.01}),         # DEQ: the scale as an fp16
    (np.int8, np.int32, {"relu": True}),
])
def test_310_converts_on_the_way(dt, out, convert):
    m, n, k = 32, 48, 64
    a, b = _inputs(m, n, k, dt)
    res = launch(_drain_kernel, 1, a, b, np.zeros((m, n), out), m, n, k, dt, out, convert, chip="310")
    acc = a.astype(np.float64) @ b.astype(np.float64)
    if "deq_scale" in convert:
        acc = acc.astype(np.float32) * np.float32(np.float16(convert["deq_scale"]))
    if convert.get("relu"):
        acc = np.maximum(acc, 0)
    np.testing.assert_array_equal(res.outputs[2].reshape(m, n), acc.astype(out))
    assert not (res.trace.op == Op.VEC_CAST).any()               # nothing else ran on the vector unit
    assert (res.trace.op == Op.COPY_L0C_TO_UB).sum() == 1


@pytest.mark.parametrize("convert", [{"relu": True}, {"deq_scale": 0.5}])
def test_910_move_does_not_convert(convert):
    m = n = k = 16
    a, b = _inputs(m, n, k, np.int8 if "deq_scale" in convert else np.float16)
    with pytest.raises(DataPathError, match="without converting.*training series"):
        launch(_drain_kernel, 1, a, b, np.zeros((m, n), np.float16), m, n, k, a.dtype, np.float16, convert,
               chip="910")


def test_move_makes_no_other_conversion():
    """int32 -> fp16 without a scale, or fp32 -> int32: no mode of the move does that."""
    a, b = _inputs(16, 16, 32, np.int8)
    with pytest.raises(ShapeError, match="no conversion the move makes"):
        launch(_drain_kernel, 1, a, b, np.zeros((16, 16), np.float16), 16, 16, 32, np.int8, np.float16, {},
               chip="310")


@pytest.mark.parametrize("chip,error,match", [
    ("teach", DataPathError, "drains L0C through FixPipe"),
    ("910b", CoreTypeError, "UB does not exist on an AIC core"),      # the cube core has no UB at all
])
def test_fixpipe_chips_have_no_l0c_to_ub_move(chip, error, match):
    a, b = _inputs(16, 16, 16, np.float16)
    with pytest.raises(error, match=match):
        launch(_drain_kernel, 1, a, b, np.zeros((16, 16), np.float16), 16, 16, 16, np.float16, np.float16, None,
               chip=chip)


@pytest.mark.parametrize("drain", [fixpipe, fixpipe_channelwise])
@pytest.mark.parametrize("chip", ["910", "310"])
def test_fixpipe_on_a_coupled_chip_says_what_to_call(drain, chip):
    def kernel(a_gm, b_gm, c_gm):
        pipe = TPipe()
        qc, _ = _mmad(pipe, a_gm, b_gm, 16, 16, 16, np.float16)
        assert output_path() != "fixpipe"
        drain(c_gm, qc.deque(), 16, 16)
    a, b = _inputs(16, 16, 16, np.float16)
    with pytest.raises(DataPathError, match=f"chip '{chip}' has no FixPipe.*data_copy_l0c2ub.*data_copy_nz2nd"):
        launch(kernel, 1, a, b, np.zeros((16, 16), np.float16), chip=chip)


def test_nz2nd_writes_rows_with_a_stride():
    """An NZ tile in UB (from GM by a plain copy) lands in a wider GM matrix as ND rows; what is
    outside the tile stays untouched."""
    m, n, stride = 20, 40, 56
    nd = np.arange(m * n, dtype=np.float32).reshape(m, n)
    rows, cols = round_up(m, 16), round_up(n, 16)
    pad = np.zeros((rows, cols), np.float32)
    pad[:m, :n] = nd
    nz = pad.reshape(rows, cols // 16, 16).transpose(1, 0, 2).reshape(-1)

    def kernel(src_gm, dst_gm):
        pipe = TPipe()
        ub = TBuf(VECOUT, "nz")
        pipe.init_buffer(ub, nz.size * 4)
        data_copy_strided(ub.get(np.float32), src_gm, 1, nz.size)
        set_flag(PIPE_MTE2, Pipe.MTE3, 0)
        wait_flag(PIPE_MTE2, Pipe.MTE3, 0)
        data_copy_nz2nd(dst_gm[stride + 4:], ub.get(np.float32), m, n, dst_stride=stride)

    out = launch(kernel, 1, nz, np.full((m + 2) * stride, -1.0, np.float32), chip="910").outputs[1]
    out = out.reshape(m + 2, stride)
    np.testing.assert_array_equal(out[1:m + 1, 4:4 + n], nd)
    assert (out[0] == -1).all() and (out[1:m + 1, :4] == -1).all() and (out[1:m + 1, 4 + n:] == -1).all()
    assert (out[m + 1] == -1).all()


def test_strided_copy_routes():
    """UB -> UB runs on the vector pipe, UB -> GM on MTE3; L1 has no strided path to GM."""
    def kernel(src_gm, dst_gm, bad):
        pipe = TPipe()
        a, b = TBuf(VECOUT, "a"), TBuf(VECOUT, "b")
        pipe.init_buffer(a, 256 * 4)
        pipe.init_buffer(b, 256 * 4)
        data_copy_strided(a.get(np.float32), src_gm, 4, 16, 32, 16)      # every other 16 of 128
        set_flag(PIPE_MTE2, Pipe.V, 0)
        wait_flag(PIPE_MTE2, Pipe.V, 0)
        data_copy_strided(b.get(np.float32), a.get(np.float32), 4, 16, 16, 64)   # spread apart
        set_flag(Pipe.V, Pipe.MTE3, 0)
        wait_flag(Pipe.V, Pipe.MTE3, 0)
        data_copy_strided(dst_gm, b.get(np.float32), 4, 16, 64, 16)
        if bad:
            l1 = TBuf(A1, "l1")
            pipe.init_buffer(l1, 1024)
            data_copy_strided(dst_gm, l1.get(np.float32), 1, 16)

    src = np.arange(128, dtype=np.float32)
    res = launch(kernel, 1, src, np.zeros(64, np.float32), False, chip="910", check_races=True)
    np.testing.assert_array_equal(res.outputs[1], src.reshape(4, 32)[:, :16].reshape(-1))
    tr = res.trace
    assert [(Pipe(p), r) for p, r in zip(tr.pipe, tr.route) if r] == \
        [(Pipe.MTE2, "GM->UB"), (Pipe.V, "UB->UB"), (Pipe.MTE3, "UB->GM")]
    with pytest.raises(ShapeError, match="no strided path from L1 to GM"):
        launch(kernel, 1, src, np.zeros(64, np.float32), True, chip="910")


@pytest.mark.parametrize("m,n,stride,match", [
    (20, 40, 30, "dst_stride >= n"),
    (20, 40, 60, "needs 1180 elements of dst, which holds 1119"),   # past the end of GM
    (40, 40, 56, "takes 2304 elements; 'nz' in UB holds 1536"),     # more rows than the UB tile
])
def test_nz2nd_errors(m, n, stride, match):
    def kernel(dst_gm):
        pipe = TPipe()
        ub = TBuf(VECOUT, "nz")
        pipe.init_buffer(ub, 32 * 48 * 4)
        data_copy_nz2nd(dst_gm, ub.get(np.float32)[:32 * 48], m, n, dst_stride=stride)
    with pytest.raises(ShapeError, match=match):
        launch(kernel, 1, np.zeros(20 * 56 - 1, np.float32), chip="910")
