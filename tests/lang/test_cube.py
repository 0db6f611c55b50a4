"""Cube instructions: data_copy_nd2nz, load_data, mmad, fixpipe, their costs, errors and races."""
import numpy as np
import pytest

import npulab.formats as F
from npulab.arch import round_up
from npulab import AlignmentError, RaceError, ShapeError, get_chip
from npulab.lang import (A1, A2, B1, B2, CO1, PIPE_FIX, PIPE_M, PIPE_MTE1, PIPE_MTE2, TPipe, Queue,
                         TBuf, data_copy_nd2nz, fixpipe, launch, load_data, mmad, pipe_barrier,
                         set_flag, wait_flag)
from npulab.sim.cost import PIPELINED_FRACTALS, mmad_chain_cycles, mmad_cost, mmad_cycles
from npulab.sim.isa import Op
from npulab.sim.isa import Pipe as HwPipe


def one_tile(a_gm, b_gm, c_gm, m, n, k, dt, acc, ksplit=1):
    """GM -> L1 (NZ) -> L0A/L0B -> mmad (K split in ``ksplit`` accumulating steps) -> fixpipe."""
    pipe = TPipe()
    qa1, qb1, qa2, qb2, qc = Queue(A1, "a1"), Queue(B1, "b1"), Queue(A2, "a2"), Queue(B2, "b2"), Queue(CO1, "c")
    item = np.dtype(dt).itemsize
    pipe.init_buffer(qa1, 1, round_up(m, 16) * round_up(k, 32) * item)
    pipe.init_buffer(qb1, 1, round_up(k, 16) * round_up(n, 32) * item)
    pipe.init_buffer(qa2, 2, round_up(m, 16) * round_up(k, 32) * item)
    pipe.init_buffer(qb2, 2, round_up(k, 32) * round_up(n, 16) * item)
    pipe.init_buffer(qc, 1, round_up(m, 16) * round_up(n, 16) * 4)
    a1 = qa1.alloc_tensor(dt)
    data_copy_nd2nz(a1, a_gm, m, k)
    qa1.enque(a1)
    b1 = qb1.alloc_tensor(dt)
    data_copy_nd2nz(b1, b_gm, k, n)
    qb1.enque(b1)
    a1, b1 = qa1.deque(), qb1.deque()
    c = qc.alloc_tensor(acc)
    step = k // ksplit
    for s in range(ksplit):
        a2 = qa2.alloc_tensor(dt)
        load_data(a2, a1, m, step, src_rows=round_up(m, 16), col_off=s * step)
        qa2.enque(a2)
        b2 = qb2.alloc_tensor(dt)
        load_data(b2, b1, step, n, src_rows=round_up(k, 16), row_off=s * step)
        qb2.enque(b2)
        a2, b2 = qa2.deque(), qb2.deque()
        mmad(c, a2, b2, m, n, step, init=(s == 0))
        qa2.free_tensor(a2)
        qb2.free_tensor(b2)
    qa1.free_tensor(a1)
    qb1.free_tensor(b1)
    qc.enque(c)
    c = qc.deque()
    fixpipe(c_gm, c, m, n)
    qc.free_tensor(c)


@pytest.mark.parametrize("dt,acc,out", [(np.float16, np.float32, np.float16),
                                        (np.int8, np.int32, np.int32),
                                        (np.float32, np.float32, np.float32)])
@pytest.mark.parametrize("ksplit", [1, 2])
def test_one_tile_matches_numpy(dt, acc, out, ksplit):
    m, n, k = 20, 24, 64
    rng = np.random.default_rng(1)
    a = rng.integers(-8, 8, (m, k)).astype(dt)
    b = rng.integers(-8, 8, (k, n)).astype(dt)
    res = launch(one_tile, 1, a, b, np.zeros((m, n), out), m, n, k, dt, acc, ksplit, chip="teach")
    got = res.outputs[2].reshape(m, n)
    np.testing.assert_array_equal(got, (a.astype(np.int64) @ b.astype(np.int64)).astype(out))
    tr = res.trace
    ops = {Op(int(o)) for o in tr.op}
    assert {Op.COPY_GM_TO_L1, Op.COPY_L1_TO_L0A, Op.COPY_L1_TO_L0B, Op.MMAD, Op.FIXPIPE} <= ops
    # each instruction sits on its pipe
    for op, pipe in ((Op.COPY_GM_TO_L1, HwPipe.MTE2), (Op.COPY_L1_TO_L0A, HwPipe.MTE1),
                     (Op.MMAD, HwPipe.M), (Op.FIXPIPE, HwPipe.FIX)):
        assert set(tr.pipe[tr.op == op].tolist()) == {int(pipe)}
    assert int(tr.flops[tr.op == Op.MMAD].sum()) == 2 * m * n * k


def test_mmad_cycles_count_fractals():
    chip = get_chip("910")
    s = chip.cube.fill_cycles + chip.cube.drain_cycles
    assert mmad_cycles(chip, 16, 16, 16, np.float16) == s + 1
    assert mmad_cycles(chip, 32, 48, 64, np.float16) == s + 2 * 3 * 4
    assert mmad_cycles(chip, 17, 16, 16, np.float16) == s + 2          # tails round up
    assert mmad_cycles(chip, 32, 48, 64, np.int8) == s + 2 * 3 * 2      # K0 = 32 for int8
    assert mmad_cycles(chip, 16, 16, 16, np.float32) == s + 2           # two 16x16x8 steps, 2048 MAC/cycle


def test_mmad_drain_is_latency_and_small_chains_pay_fill_and_drain_each():
    """An mmad occupies the cube for its fractal steps and its sum is in L0C drain_cycles
    later; a chain into one L0C streams from ten fractals on (FACTS: the PIPE_M barrier is
    needed when (m/16)(n/16) < 10), else each mmad pays its fill and its drain."""
    chip = get_chip("910")
    f, d = chip.cube.fill_cycles, chip.cube.drain_cycles
    assert PIPELINED_FRACTALS == 10
    assert mmad_cost(chip, 32, 80, 64, np.float16) == (2 * 5 * 4, d)
    assert mmad_cost(chip, 48, 48, 64, np.float16) == (3 * 3 * 4, d)
    assert mmad_chain_cycles(chip, 32, 80, 64, np.float16, 3) == f + 3 * 40 + d        # 10 fractals: streams
    assert mmad_chain_cycles(chip, 48, 48, 64, np.float16, 3) == 3 * (f + 36 + d)      # 9: a barrier each
    for m, n, k in ((16, 16, 16), (32, 80, 64), (48, 48, 64), (128, 256, 64)):
        assert f + sum(mmad_cost(chip, m, n, k, np.float16)) == mmad_cycles(chip, m, n, k, np.float16)


def mmads_in_one_l0c(a_gm, b_gm, c_gm, m, n, k, count, barrier):
    """A and B into L0A/L0B once, then ``count`` mmads of them into one L0C tile (the first
    with init), a pipe_barrier(PIPE_M) between each two when ``barrier``; FixPipe drains it."""
    pipe = TPipe()
    l1a, l1b, l0a, l0b = TBuf(A1, "l1a"), TBuf(B1, "l1b"), TBuf(A2, "l0a"), TBuf(B2, "l0b")
    qc = Queue(CO1, "c")
    for buf, nbytes in ((l1a, m * k * 2), (l1b, k * n * 2), (l0a, m * k * 2), (l0b, k * n * 2)):
        pipe.init_buffer(buf, nbytes)
    pipe.init_buffer(qc, 1, m * n * 4)
    data_copy_nd2nz(l1a.get(np.float16), a_gm, m, k)
    data_copy_nd2nz(l1b.get(np.float16), b_gm, k, n)
    set_flag(PIPE_MTE2, PIPE_MTE1, 0)
    wait_flag(PIPE_MTE2, PIPE_MTE1, 0)
    load_data(l0a.get(np.float16), l1a.get(np.float16), m, k, src_rows=m)
    load_data(l0b.get(np.float16), l1b.get(np.float16), k, n, src_rows=k)
    set_flag(PIPE_MTE1, PIPE_M, 0)
    wait_flag(PIPE_MTE1, PIPE_M, 0)
    c = qc.alloc_tensor(np.float32)
    for i in range(count):
        if barrier and i:
            pipe_barrier(PIPE_M)
        mmad(c, l0a.get(np.float16), l0b.get(np.float16), m, n, k, init=(i == 0))
    qc.enque(c)
    c = qc.deque()
    fixpipe(c_gm, c, m, n)
    qc.free_tensor(c)


@pytest.mark.parametrize("m,n", [(32, 80), (48, 48)])
def test_back_to_back_mmads_overlap_only_when_pipelined(m, n):
    """Three mmads into one L0C, back to back: from ten fractals on each next one starts when
    the cube is free (its fill hidden behind the one before); under ten the kernel language
    puts a PIPE_M barrier between them (FACTS, the compiler's rule), so each waits for the
    previous one's drain and pays its own fill. Whatever they overlap, FixPipe reads L0C only
    once the last result is there."""
    k = 32

    rng = np.random.default_rng(5)
    a = rng.integers(-3, 4, (m, k)).astype(np.float16)
    b = rng.integers(-3, 4, (k, n)).astype(np.float16)
    # the 910B: a chip with FixPipe (the 910's result leaves through UB, tests/lang/test_drain_ub.py)
    res = launch(mmads_in_one_l0c, 1, a, b, np.zeros((m, n), np.float32), m, n, k, 3, False, chip="910b")
    np.testing.assert_array_equal(res.outputs[2].reshape(m, n), 3 * (a.astype(np.float32) @ b.astype(np.float32)))
    tr = res.trace
    sel = np.flatnonzero(tr.op == Op.MMAD)
    busy, lat = mmad_cost(tr.chip, m, n, k, np.float16)
    steps = -(-m // 16) * -(-n // 16) * (k // 16)
    assert busy == steps and lat == tr.chip.cube.drain_cycles
    auto = [i for i in range(len(tr)) if tr.name[i] == "pipe_barrier M (auto)"]
    pipelined = (m // 16) * (n // 16) >= PIPELINED_FRACTALS
    if pipelined:
        assert auto == [] and np.diff(tr.start[sel]).tolist() == [busy] * 2
    else:
        assert len(auto) == 2
        assert np.diff(tr.start[sel]).tolist() == [busy + lat + tr.chip.cube.fill_cycles] * 2
    assert tr.end[sel[-1]] == tr.start[sel[-1]] + busy + lat
    fix = np.flatnonzero(tr.op == Op.FIXPIPE)[0]
    assert tr.start[fix] >= tr.end[sel[-1]]


def test_the_automatic_pipe_m_barrier_needs_the_same_l0c_bytes():
    """Into two different L0C tiles, small mmads need no barrier: nothing of one is read by the
    other, and they stream."""
    def two_tiles(a_gm, b_gm, c_gm):
        pipe = TPipe()
        l1a, l1b, l0a, l0b, l0c = TBuf(A1, "l1a"), TBuf(B1, "l1b"), TBuf(A2, "l0a"), TBuf(B2, "l0b"), TBuf(CO1, "c")
        for buf, nbytes in ((l1a, 32 * 32 * 2), (l1b, 32 * 32 * 2), (l0a, 32 * 32 * 2), (l0b, 32 * 32 * 2),
                            (l0c, 2 * 4096)):
            pipe.init_buffer(buf, nbytes)
        data_copy_nd2nz(l1a.get(np.float16), a_gm, 32, 32)
        data_copy_nd2nz(l1b.get(np.float16), b_gm, 32, 32)
        set_flag(PIPE_MTE2, PIPE_MTE1, 0)
        wait_flag(PIPE_MTE2, PIPE_MTE1, 0)
        load_data(l0a.get(np.float16), l1a.get(np.float16), 32, 32, src_rows=32)
        load_data(l0b.get(np.float16), l1b.get(np.float16), 32, 32, src_rows=32)
        set_flag(PIPE_MTE1, PIPE_M, 0)
        wait_flag(PIPE_MTE1, PIPE_M, 0)
        c = l0c.get(np.float32)
        mmad(c[0:1024], l0a.get(np.float16), l0b.get(np.float16), 32, 32, 32)
        mmad(c[1024:2048], l0a.get(np.float16), l0b.get(np.float16), 32, 32, 32)
        mmad(c[1024:2048], l0a.get(np.float16), l0b.get(np.float16), 32, 32, 32, init=False)

    tr = launch(two_tiles, 1, np.ones((32, 32), np.float16), np.ones((32, 32), np.float16),
                np.zeros(4, np.float32), chip="910b", mode="timing").trace
    names = [tr.name[i] for i in range(len(tr)) if tr.pipe[i] == HwPipe.M and not tr.name[i].startswith("wait_flag")]
    assert names == ["mmad 32x32x32", "mmad 32x32x32", "pipe_barrier M (auto)", "pipe_barrier M (auto) (wait)",
                     "mmad 32x32x32 +="]


def test_mmad_duration_in_trace():
    m, n, k = 32, 48, 64
    res = launch(one_tile, 1, np.ones((m, k), np.float16), np.ones((k, n), np.float16),
                 np.zeros((m, n), np.float16), m, n, k, np.float16, np.float32, chip="teach")
    tr = res.trace
    sel = tr.op == Op.MMAD
    # start is its first fractal step, after the fill: then its steps, then its drain
    assert (tr.end - tr.start)[sel].tolist() == [sum(mmad_cost(tr.chip, m, n, k, np.float16))]


def test_accumulate_flag():
    """init=True overwrites L0C; init=False adds to it."""
    def kernel(a_gm, b_gm, c_gm, init_second):
        pipe = TPipe()
        l1, l0a, l0b = TBuf(A1, "l1"), TBuf(A2, "l0a"), TBuf(B2, "l0b")
        qc = Queue(CO1, "c")
        pipe.init_buffer(l1, 2 * 256 * 2)
        pipe.init_buffer(l0a, 512)
        pipe.init_buffer(l0b, 512)
        pipe.init_buffer(qc, 1, 1024)
        a1, b1 = l1.get(np.float16)[:256], l1.get(np.float16)[256:]
        data_copy_nd2nz(a1, a_gm, 16, 16)
        data_copy_nd2nz(b1, b_gm, 16, 16)
        set_flag(PIPE_MTE2, PIPE_MTE1, 0)
        wait_flag(PIPE_MTE2, PIPE_MTE1, 0)
        load_data(l0a.get(np.float16), a1, 16, 16, src_rows=16)
        load_data(l0b.get(np.float16), b1, 16, 16, src_rows=16)
        set_flag(PIPE_MTE1, PIPE_M, 0)
        wait_flag(PIPE_MTE1, PIPE_M, 0)
        c = qc.alloc_tensor(np.float32)
        mmad(c, l0a.get(np.float16), l0b.get(np.float16), 16, 16, 16, init=True)
        mmad(c, l0a.get(np.float16), l0b.get(np.float16), 16, 16, 16, init=init_second)
        seen = c.numpy().copy()         # a view of L0C inside the kernel sees the result
        qc.enque(c)
        c = qc.deque()
        fixpipe(c_gm, c, 16, 16)
        qc.free_tensor(c)
        kernel.seen = seen

    rng = np.random.default_rng(2)
    a = rng.integers(-4, 4, (16, 16)).astype(np.float16)
    b = rng.integers(-4, 4, (16, 16)).astype(np.float16)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    for init_second, want in ((True, ref), (False, 2 * ref)):
        out = launch(kernel, 1, a, b, np.zeros((16, 16), np.float32), init_second, chip="teach").outputs[2]
        np.testing.assert_array_equal(out.reshape(16, 16), want)
        np.testing.assert_array_equal(F.nz_to_nd(kernel.seen.reshape(1, 1, 16, 16), 16, 16), want)


def _l0_kernel(a_gm, b_gm, c_gm, what):
    pipe = TPipe()
    l1, l0a, l0b, l0c = TBuf(A1, "l1"), TBuf(A2, "l0a"), TBuf(B2, "l0b"), TBuf(CO1, "l0c")
    pipe.init_buffer(l1, 1024)
    pipe.init_buffer(l0a, 1024)
    pipe.init_buffer(l0b, 1024)
    pipe.init_buffer(l0c, 4096)
    a1 = l1.get(np.float16)[:256]
    data_copy_nd2nz(a1, a_gm, 16, 16)
    if what == "race":                  # no flag between MTE2 writing L1 and MTE1 reading it
        load_data(l0a.get(np.float16), a1, 16, 16, src_rows=16)
        return
    set_flag(PIPE_MTE2, PIPE_MTE1, 0)
    wait_flag(PIPE_MTE2, PIPE_MTE1, 0)
    load_data(l0a.get(np.float16), a1, 16, 16, src_rows=16)
    load_data(l0b.get(np.float16), a1, 16, 16, src_rows=16)
    set_flag(PIPE_MTE1, PIPE_M, 0)
    wait_flag(PIPE_MTE1, PIPE_M, 0)
    if what == "big":
        mmad(l0c.get(np.float32), l0a.get(np.float16), l0b.get(np.float16), 4096, 16, 16)
    elif what == "misaligned":
        mmad(l0c.get(np.float32)[16:], l0a.get(np.float16), l0b.get(np.float16), 16, 16, 16)
    elif what == "dtype":
        mmad(l0c.get(np.int32), l0a.get(np.float16), l0b.get(np.float16), 16, 16, 16)
    elif what == "overflow":
        mmad(l0c.get(np.float32), l0a.get(np.float16), l0b.get(np.float16), 16, 16, 64)
    elif what == "ub":
        load_data(l1.get(np.float16), a1, 16, 16, src_rows=16)
    elif what == "deq":
        mmad(l0c.get(np.float32), l0a.get(np.float16), l0b.get(np.float16), 16, 16, 16)
        set_flag(PIPE_M, PIPE_FIX, 0)
        wait_flag(PIPE_M, PIPE_FIX, 0)
        fixpipe(c_gm, l0c.get(np.float32), 16, 16, dst_stride=8)


@pytest.mark.parametrize("what,err,match", [
    ("big", ShapeError, "4095"),
    ("misaligned", AlignmentError, "1024-byte aligned"),
    ("dtype", ShapeError, "accumulates in float32"),
    ("overflow", ShapeError, "needs 1024 elements of a"),
    ("ub", ShapeError, "expected a tensor in L0A or L0B"),
    ("deq", ShapeError, "dst_stride=8 is smaller than n=16"),
    ("race", RaceError, "race on core 0 in L1"),
])
def test_errors_teach(what, err, match):
    a = np.ones((16, 16), np.float16)
    with pytest.raises(err, match=match):
        launch(_l0_kernel, 1, a, a, np.zeros((16, 16), np.float16), what, chip="teach")


def test_fixpipe_bias_dequant_relu():
    def kernel(a_gm, b_gm, c_gm, bias_gm):
        pipe = TPipe()
        l1, l0a, l0b, l0c = TBuf(A1, "l1"), TBuf(A2, "l0a"), TBuf(B2, "l0b"), TBuf(CO1, "l0c")
        pipe.init_buffer(l1, 4096)
        pipe.init_buffer(l0a, 1024)
        pipe.init_buffer(l0b, 1024)
        pipe.init_buffer(l0c, 1024)
        a1, b1 = l1.get(np.int8)[:512], l1.get(np.int8)[512:1536]   # B pads 16 -> 32 columns
        bias = l1.get(np.int32)[384:400]
        from npulab.lang import data_copy
        data_copy_nd2nz(a1, a_gm, 16, 32)
        data_copy_nd2nz(b1, b_gm, 32, 16)
        data_copy(bias, bias_gm, 16)
        set_flag(PIPE_MTE2, PIPE_MTE1, 0)
        wait_flag(PIPE_MTE2, PIPE_MTE1, 0)
        set_flag(PIPE_MTE2, PIPE_FIX, 0)
        load_data(l0a.get(np.int8), a1, 16, 32, src_rows=16)
        load_data(l0b.get(np.int8), b1, 32, 16, src_rows=32)
        set_flag(PIPE_MTE1, PIPE_M, 0)
        wait_flag(PIPE_MTE1, PIPE_M, 0)
        mmad(l0c.get(np.int32), l0a.get(np.int8), l0b.get(np.int8), 16, 16, 32)
        set_flag(PIPE_M, PIPE_FIX, 0)
        wait_flag(PIPE_M, PIPE_FIX, 0)
        wait_flag(PIPE_MTE2, PIPE_FIX, 0)
        fixpipe(c_gm, l0c.get(np.int32), 16, 16, bias=bias, deq_scale=0.25, relu=True)

    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (16, 32)).astype(np.int8)
    b = rng.integers(-128, 128, (32, 16)).astype(np.int8)
    bias = rng.integers(-5000, 5000, 16).astype(np.int32)
    out = launch(kernel, 1, a, b, np.zeros((16, 16), np.float16), bias, chip="teach").outputs[2]
    acc = a.astype(np.int32) @ b.astype(np.int32) + bias
    want = np.maximum(acc.astype(np.float32) * np.float32(0.25), 0).astype(np.float16)
    np.testing.assert_array_equal(out.reshape(16, 16), want)


def test_int32_to_float_needs_a_scale():
    def kernel(c_gm):
        pipe = TPipe()
        l0c = TBuf(CO1, "l0c")
        pipe.init_buffer(l0c, 1024)
        fixpipe(c_gm, l0c.get(np.int32), 16, 16)
    with pytest.raises(ShapeError, match="deq_scale"):
        launch(kernel, 1, np.zeros((16, 16), np.float16), chip="teach")


def _shared_reads(a_gm, same):
    """Every block copies one 64 x 64 fp16 tile from GM to L1: the same one, or its own."""
    from npulab.lang import get_block_idx
    pipe = TPipe()
    q = Queue(A1, "a1")
    pipe.init_buffer(q, 1, 64 * 64 * 2)
    t = q.alloc_tensor(np.float16)
    off = 0 if same else get_block_idx() * 64 * 64
    data_copy_nd2nz(t, a_gm[off:], 64, 64)
    q.enque(t)
    q.free_tensor(q.deque())


def test_l2_serves_tiles_that_cores_share():
    """Cores reading the same GM tile share its HBM fetch (L2 hits); distinct tiles do not."""
    a = np.zeros(32 * 64 * 64, np.float16)
    cyc = {}
    for same in (True, False):
        tr = launch(_shared_reads, 32, a, same, chip="910", mode="timing").trace
        cyc[same] = int((tr.end - tr.start)[tr.op == Op.COPY_GM_TO_L1].max())
    chip = get_chip("910")
    alone = chip.pipes.mte2_startup_cycles + -(-64 * 64 * 2 // chip.gm_share_bytes_per_cycle(32))
    assert cyc[False] == alone                  # unique reads cost what copy_cycles charges
    # shared: each read carries 1/32 of the HBM bytes, so only the MTE2 rate or the core's part of
    # L2 bounds it (the one read that missed pays the HBM start-up)
    from_l2 = min(chip.pipes.mte2_bytes_per_cycle, chip.memory.l2_bytes_per_cycle / 32)
    assert cyc[True] == chip.pipes.mte2_startup_cycles + -(-64 * 64 * 2 // from_l2)
    assert cyc[True] < cyc[False]


def test_pipe_barrier_waits_for_the_cube_to_complete():
    """pipe_barrier(PIPE_M) between two pipelined mmads: the second starts only once the first
    has completed (its start-up latency too), not merely once the cube is free."""
    m, n, k = 32, 80, 32

    a, b = np.ones((m, k), np.float16), np.ones((k, n), np.float16)
    gap = {}
    for barrier in (False, True):
        res = launch(mmads_in_one_l0c, 1, a, b, np.zeros((m, n), np.float32), m, n, k, 2, barrier,
                     chip="910b")
        np.testing.assert_array_equal(res.outputs[2].reshape(m, n), np.full((m, n), 2 * k, np.float32))
        sel = np.flatnonzero(res.trace.op == Op.MMAD)
        gap[barrier] = int(np.diff(res.trace.start[sel])[0])
    busy, lat = mmad_cost(get_chip("910b"), m, n, k, np.float16)
    assert lat > 0
    assert gap == {False: busy, True: busy + lat + get_chip("910b").cube.fill_cycles}
