"""matmul / batch_matmul against numpy, the templates' tilings, swizzle and cycle figures."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npulab import BufferOverflowError, ShapeError, get_chip
from npulab.kernels.matmul import (TILINGS, BlockScheduler, MatmulProblem, can_implement, default_tiling,
                                   launch_matmul, make_tiling, problems, simulate)
from npulab.ops import golden
from npulab.ops.matmul import batch_matmul, matmul
from npulab.sim.cost import lower_bound_cycles

# tolerances against numpy with fp32 accumulation (float64 for the reference):
# fp16 output: one rounding of the fp32 sum to fp16 (half an ulp of fp16, 2^-11 relative) plus
# summation-order differences in fp32; fp32: summation order only; int8: exact.
TOL = {np.float16: dict(rtol=2e-3, atol=2e-3), np.float32: dict(rtol=1e-5, atol=1e-4)}
PRIMES = [1, 2, 3, 5, 7, 13, 17, 31, 37, 67, 131]
dim = st.one_of(st.sampled_from(PRIMES), st.integers(1, 90))


def _operands(m, n, k, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype == np.int8:
        return (rng.integers(-128, 128, (m, k)).astype(np.int8),
                rng.integers(-128, 128, (k, n)).astype(np.int8))
    return (rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype))


def _check(c, ref, dtype):
    if dtype == np.int8:
        assert c.dtype == np.int32
        np.testing.assert_array_equal(c, ref)         # bit-exact
    else:
        assert c.dtype == dtype
        np.testing.assert_allclose(c.astype(np.float64), ref, **TOL[dtype])


@settings(max_examples=30, deadline=None)
@given(m=dim, n=dim, k=dim, dtype=st.sampled_from([np.float16, np.float32, np.int8]),
       trans_a=st.booleans(), trans_b=st.booleans(), seed=st.integers(0, 2**16))
def test_matmul_matches_numpy(m, n, k, dtype, trans_a, trans_b, seed):
    a, b = _operands(m, n, k, dtype, seed)
    c = matmul(a.T.copy() if trans_a else a, b.T.copy() if trans_b else b,
               trans_a=trans_a, trans_b=trans_b)
    assert c.shape == (m, n)
    _check(c, golden.matmul(a, b), dtype)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int8])
def test_one_by_one_by_one(dtype):
    a, b = _operands(1, 1, 1, dtype, 0)
    _check(matmul(a, b), golden.matmul(a, b), dtype)


@pytest.mark.parametrize("name", ["seed", "naive", "catlass"])
@pytest.mark.parametrize("dtype", [np.float16, np.int8])
def test_named_tilings_compute_the_same(name, dtype):
    m, n, k = 67, 131, 97                         # primes: every tile dimension has a tail
    a, b = _operands(m, n, k, dtype, 1)
    _check(matmul(a, b, tiling=name), golden.matmul(a, b), dtype)


@pytest.mark.parametrize("dtype", [np.float16, np.int8])
def test_bias_and_relu(dtype):
    m, n, k = 37, 70, 45
    a, b = _operands(m, n, k, dtype, 2)
    rng = np.random.default_rng(3)
    bias = rng.integers(-3000, 3000, n) if dtype == np.int8 else rng.standard_normal(n).astype(np.float32)
    c = matmul(a, b, bias=bias, relu=True, chip="teach")
    _check(c, golden.matmul(a, b, bias=bias, relu=True), dtype)
    assert (c >= 0).all()


@settings(max_examples=10, deadline=None)
@given(batch=st.integers(1, 5), m=dim, n=dim, k=dim, dtype=st.sampled_from([np.float16, np.int8]),
       seed=st.integers(0, 100))
def test_batch_matmul_matches_numpy(batch, m, n, k, dtype, seed):
    rng = np.random.default_rng(seed)
    pairs = [_operands(m, n, k, dtype, seed + i) for i in range(batch)]
    a = np.stack([p[0] for p in pairs]).reshape(1, batch, m, k)
    b = np.stack([p[1] for p in pairs]).reshape(1, batch, k, n)
    c = batch_matmul(a, b)
    assert c.shape == (1, batch, m, n)
    for i, (x, y) in enumerate(pairs):
        _check(c[0, i], golden.matmul(x, y), dtype)
    assert rng is not None


def test_batch_matmul_shared_b_and_transposes():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 20, 33)).astype(np.float16)       # (batch, K, M), trans_a
    b = rng.standard_normal((40, 20)).astype(np.float16)          # (N, K), shared, trans_b
    c = batch_matmul(a, b, trans_a=True, trans_b=True)
    for i in range(3):
        _check(c[i], golden.matmul(a[i].T, b.T), np.float16)


def test_attention_shapes():
    """The seeds' attention scores: [32,16,128,64] x [32,16,64,128], once functionally."""
    rng = np.random.default_rng(5)
    q = rng.standard_normal((32, 16, 128, 64)).astype(np.float16)
    kt = rng.standard_normal((32, 16, 64, 128)).astype(np.float16)
    c, trace = batch_matmul(q, kt, return_trace=True)
    assert c.shape == (32, 16, 128, 128)
    ref = q.astype(np.float32) @ kt.astype(np.float32)
    np.testing.assert_allclose(c.astype(np.float32), ref, rtol=2e-3, atol=2e-3)
    lb = lower_bound_cycles("910", 512 * 128 * 128 * 64, np.float16)
    assert lb <= trace.cycles
    assert trace.summary()["cube_flops"] == 2 * 512 * 128 * 128 * 64


def test_seed_tiling_by_name():
    assert TILINGS["seed"][:4] == (128, 64, 32, 32)
    big = MatmulProblem.of((4096, 4096, 4096), np.float16)
    t = make_tiling(big, "910", "seed").tiles
    assert (t.tile_m, t.tile_n, t.tile_k, t.tile_k0) == (128, 64, 32, 32)
    naive = make_tiling(big, "910", "naive").tiles
    assert (naive.tile_m, naive.tile_n, naive.tile_k, naive.tile_k0) == (16, 16, 16, 16)
    assert (naive.l1_buffers, naive.l0_buffers, naive.l0c_buffers) == (1, 1, 1)


def test_can_implement_names_buffer_demand_and_capacity():
    t = make_tiling(MatmulProblem.of((4096, 4096, 4096), np.float16), "910", (256, 256, 1024, 128, 2, 2, 2))
    with pytest.raises(BufferOverflowError) as info:
        can_implement(t, "910")
    msg = str(info.value)
    for part in ("L0A needs 128 KiB", "holds 64 KiB", "L0C needs 512 KiB", "holds 256 KiB",
                 "L1 needs 2 MiB", "holds 1 MiB", "Fix:"):
        assert part in msg
    with pytest.raises(ShapeError, match="tile_m=24 must be a multiple of 16"):
        can_implement(t.with_tiles(tile_m=24), "910")
    with pytest.raises(BufferOverflowError, match="L0B"):
        matmul(np.ones((300, 300), np.float16), np.ones((300, 300), np.float16),
               tiling=(64, 256, 256, 128, 2, 2, 2))


@pytest.mark.parametrize("chip", ["teach", "310", "910", "910b"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int8])
def test_default_tiling_fits_every_chip(chip, dtype):
    for shape in ((1, 1, 1), (4096, 4096, 4096), (512, 128, 128, 64), (3, 5000, 7)):
        t = default_tiling(MatmulProblem.of(shape, dtype), chip)
        assert problems(t, chip) == []
        assert 1 <= t.block_dim <= get_chip(chip).ai_cores


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 3), ml=st.integers(1, 12), nl=st.integers(1, 12),
       offset=st.sampled_from([1, 2, 3, 4, 8]), direction=st.sampled_from([0, 1]))
def test_swizzle_visits_every_block_tile_once(batch, ml, nl, offset, direction):
    t = make_tiling(MatmulProblem.of((batch, ml * 16, nl * 16, 16), np.float16), "910", (16, 16, 16, 16, 2, 2, 2),
                    swizzle_offset=offset, swizzle_direction=direction)
    sched = BlockScheduler(t)
    coords = [sched.block_coord(i) for i in range(sched.core_loops())]
    assert sorted(coords) == [(b, m, n) for b in range(batch) for m in range(ml) for n in range(nl)]


@pytest.mark.parametrize("rows, cols, ml, nl", [(2, 3, 4, 6), (4, 6, 8, 12), (1, 4, 3, 8), (3, 1, 9, 2)])
def test_a_static_grid_gives_each_core_one_block_of_whole_tiles(rows, cols, ml, nl):
    # pto-isa's GEMM split: core c owns the block at grid position divmod(c, cols), row by row
    t = make_tiling(MatmulProblem.of((ml * 16, nl * 16, 16), np.float16), "910b", (16, 16, 16, 16, 2, 2, 2),
                    block_dim=rows * cols, swizzle_offset=rows, swizzle_direction=2)
    assert problems(t, "910b") == [] and "Grid" in t.recipe()
    sched = BlockScheduler(t)
    owner = {sched.block_coord(i): i % t.block_dim for i in range(sched.core_loops())}
    assert sorted(owner) == [(0, m, n) for m in range(ml) for n in range(nl)]
    bm, bn = ml // rows, nl // cols
    assert all(c == (m // bm) * cols + n // bn for (_, m, n), c in owner.items())
    first = [sched.block_coord(i) for i in range(0, sched.core_loops(), t.block_dim)]
    assert first[:2] == [(0, 0, 0), (0, 0, 1)] if bn > 1 else first[:2] == [(0, 0, 0), (0, 1, 0)]


def test_a_static_grid_that_does_not_divide_the_tiles_is_refused():
    p = MatmulProblem.of((96, 96, 16), np.float16)                      # 6 x 6 tiles of 16
    for block_dim, rows in ((6, 4), (8, 4), (6, 2)):
        t = make_tiling(p, "910b", (16, 16, 16, 16, 2, 2, 2), block_dim=block_dim, swizzle_offset=rows,
                        swizzle_direction=2)
        bad = problems(t, "910b")
        if (block_dim, rows) == (6, 2):
            assert bad == []
        else:
            assert bad and "static grid of 4 core rows" in bad[0]
    t = make_tiling(p, "910b", (16, 16, 16, 16, 2, 2, 2), swizzle_direction=3)
    assert "direction 0, 1 or 2" in problems(t, "910b")[0]


@pytest.mark.parametrize("chip", ["910", "910b"])
@pytest.mark.parametrize("grid", [False, True])
def test_fp16_inputs_can_write_an_fp32_c(chip, grid):
    # L0C's fp32 sums written out unconverted (pto-isa's GEMM): fp32 accuracy, not fp16's
    a, b = _operands(96, 96, 64, np.float16, 3)
    p = MatmulProblem(1, 96, 96, 64, "float16", c_dtype="float32")
    extra = dict(block_dim=6, swizzle_offset=3, swizzle_direction=2) if grid else {}
    t = make_tiling(p, chip, (32, 16, 32, 16, 2, 2, 2), **extra)
    c, _ = launch_matmul(a, b, t, chip=chip)
    c = np.asarray(c).reshape(96, 96)
    assert c.dtype == np.float32
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), **TOL[np.float32])
    assert p.key().endswith("|float16->float32") and MatmulProblem(1, 96, 96, 64, "float16").key().endswith("|float16")


def test_a_c_dtype_the_cube_cannot_write_is_refused():
    with pytest.raises(ShapeError, match=r"C of int8 from float16 inputs is not possible; expected one of "
                                         r"float16, float32"):
        MatmulProblem(1, 16, 16, 16, "float16", c_dtype="int8")
    with pytest.raises(ShapeError, match=r"expected one of int32"):
        MatmulProblem(1, 16, 16, 16, "int8", c_dtype="float16")
    assert MatmulProblem(1, 16, 16, 16, "float16", c_dtype="float16").c_dtype is None   # the default, named


def test_utilization_never_above_one_and_swizzle_helps():
    shape = (1, 2048, 2048, 1024)
    problem = MatmulProblem.of(shape, np.float16)
    lb = lower_bound_cycles("910", problem.macs, np.float16)
    base = default_tiling(problem, "910")
    swz = (base.tiles.swizzle_offset, base.tiles.swizzle_direction)
    cycles = {}
    for off, d in ((1, 0), swz):
        cycles[(off, d)] = simulate(base.with_tiles(swizzle_offset=off, swizzle_direction=d)).cycles
    for c in cycles.values():
        assert lb <= c
    # row-major order makes a wave read 16 distinct B column tiles; the swizzle shares them
    assert cycles[swz] <= cycles[(1, 0)]


def test_naive_is_much_slower_than_default():
    shape = (1, 256, 256, 256)
    problem = MatmulProblem.of(shape, np.float16)
    naive = simulate(make_tiling(problem, "910", "naive")).cycles
    best = simulate(default_tiling(problem, "910")).cycles
    assert naive >= 3 * best


def test_timing_and_functional_agree_on_cycles():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((1, 100, 70)).astype(np.float16)
    b = rng.standard_normal((1, 70, 90)).astype(np.float16)
    t = default_tiling(MatmulProblem(1, 100, 90, 70, "float16"), "teach")
    _, tr_f = launch_matmul(a, b, t, chip="teach")
    assert simulate(t, "teach").cycles == tr_f.cycles


def test_bad_inputs():
    a16 = np.ones((4, 5), np.float16)
    with pytest.raises(ShapeError, match="inner dimensions"):
        matmul(a16, np.ones((4, 5), np.float16))
    with pytest.raises(ShapeError, match="one dtype"):
        matmul(a16, np.ones((5, 4), np.float32))
    with pytest.raises(ShapeError, match="not supported"):
        matmul(np.ones((4, 5)), np.ones((5, 4)))
    with pytest.raises(ShapeError, match="bias must have shape"):
        matmul(a16, np.ones((5, 4), np.float16), bias=np.ones(5))
    with pytest.raises(ShapeError, match="leading"):
        batch_matmul(np.ones((2, 4, 5), np.float16), np.ones((3, 5, 4), np.float16))
