"""The 2-D vector forms (row reductions, per-row / per-column broadcasts) and gather, against
numpy; and their cost counted repeat by repeat."""
import numpy as np
import pytest

from npulab import lang
from npulab.chips import get_chip
from npulab.sim.isa import Kind, Pipe
from fixtures import run_vector

ROWS, COLS = 7, 100          # a row is not a whole number of repeats
rng = np.random.default_rng(3)
X = (rng.standard_normal(ROWS * COLS) * 3).astype(np.float32)
V = (rng.standard_normal(max(ROWS, COLS)) + 2).astype(np.float32)


@pytest.mark.parametrize("name, fn", [("reduce_sum_rows", np.sum), ("reduce_max_rows", np.max)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_row_reductions(name, fn, dtype):
    x = X.astype(dtype)
    out, _ = run_vector(lambda d, s: getattr(lang, name)(d, s, ROWS, COLS), x, dtype=dtype)
    expect = fn(x.reshape(ROWS, COLS).astype(np.float32), axis=1)
    np.testing.assert_allclose(out[:ROWS].astype(np.float32), expect, rtol=1e-3 if dtype == np.float16 else 1e-6)


@pytest.mark.parametrize("name, ref", [("add_per_row", np.add), ("sub_per_row", np.subtract),
                                       ("mul_per_row", np.multiply), ("div_per_row", np.divide)])
def test_per_row_broadcast(name, ref):
    v = np.zeros_like(X)
    v[:ROWS] = V[:ROWS]
    out, _ = run_vector(lambda d, s, w: getattr(lang, name)(d, s, w, ROWS, COLS), X, v)
    np.testing.assert_array_equal(out.reshape(ROWS, COLS), ref(X.reshape(ROWS, COLS), V[:ROWS, None]))


@pytest.mark.parametrize("name, ref", [("add_per_col", np.add), ("sub_per_col", np.subtract),
                                       ("mul_per_col", np.multiply), ("max_per_col", np.maximum)])
def test_per_col_broadcast_with_a_row_stride(name, ref):
    # 6 rows of 40 elements, 48 apart (a padded tile): the gaps are left alone
    v = np.zeros_like(X)
    v[:40] = V[:40]
    out, _ = run_vector(lambda d, s, w: (lang.duplicate(d, -7.0, ROWS * COLS),
                                         getattr(lang, name)(d, s, w, 6, 40, 48)), X, v)
    got = out[: 6 * 48].reshape(6, 48)
    np.testing.assert_array_equal(got[:, :40], ref(X[: 6 * 48].reshape(6, 48)[:, :40], V[None, :40]))
    assert np.all(got[:, 40:] == -7.0)


def test_gather_picks_by_byte_offset():
    idx = rng.integers(0, ROWS * COLS, ROWS * COLS)

    def body(d, s, o):
        lang.gather(d, s, o.reinterpret_cast(np.int32), ROWS * COLS)
    offs = (idx * 4).astype(np.int32).view(np.float32)        # carried through a float32 buffer
    out, _ = run_vector(body, X, offs)
    np.testing.assert_array_equal(out, X[idx])


def _vector_cycles(body, *arrays):
    _, trace = run_vector(body, *arrays, chip="910")
    sel = (trace.pipe == Pipe.V) & (trace.kind == Kind.WORK) & (trace.end > trace.start)   # not markers
    return int((trace.end - trace.start)[sel].sum()), int(sel.sum())


def test_costs_count_every_repeat():
    vec = get_chip("910").vector
    rows, cols = 20, 256                       # 4 repeats of fp32 a row
    x = np.ones(rows * cols, np.float32)
    # per-row broadcast: one Brcb (3 repeats for 20 values) + 4 column chunks of 20 repeats
    cyc, n = _vector_cycles(lambda d, s: lang.mul_per_row(d, s, s, rows, cols), x)
    assert n == 1 + 4
    assert cyc == 5 * vec.startup_cycles + 3 + 4 * rows
    # row reduction: one contiguous pass of 80 repeats, then one repeat a row for the partials,
    # each pass draining a log2(64) = 6-deep tree
    cyc, n = _vector_cycles(lambda d, s: lang.reduce_sum_rows(d, s, rows, cols), x)
    assert n == 2 and cyc == 2 * (vec.startup_cycles + 6) + rows * cols // 64 + rows
    # rows that do not start on a 32-byte block: one instruction a row
    cyc, n = _vector_cycles(lambda d, s: lang.add_per_col(d, s, s, rows, 250, 250), x)
    assert n == rows


# -- fused multiply-add (Ascend C FusedMulAdd, MulAddDst) -------------------------------------
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_fused_mul_add_and_mul_add_dst(dtype):
    """FusedMulAdd: dst = src0 * dst + src1; MulAddDst: dst = src0 * src1 + dst (one
    instruction each, costing what Add costs)."""
    x, y = X.astype(dtype), V[:ROWS * COLS].repeat(-(-ROWS * COLS // V.size))[:ROWS * COLS].astype(dtype)
    tol = dict(rtol=2e-3, atol=2e-3) if dtype == np.float16 else dict(rtol=1e-6, atol=1e-6)
    n = x.size
    f32 = lambda a: a.astype(np.float32)                                       # noqa: E731
    out, tr = run_vector(lambda d, a, b: (lang.duplicate(d, 1.5, n), lang.fused_mul_add(d, a, b, n)),
                         x, y, dtype=dtype)
    np.testing.assert_allclose(f32(out), f32(x) * 1.5 + f32(y), **tol)
    out, _ = run_vector(lambda d, a, b: (lang.duplicate(d, -2.0, n), lang.mul_add_dst(d, a, b, n)),
                        x, y, dtype=dtype)
    np.testing.assert_allclose(f32(out), f32(x) * f32(y) - 2.0, **tol)
    add_cyc, _ = _vector_cycles(lambda d, a, b: lang.add(d, a, b, n), x.astype(np.float32), y.astype(np.float32))
    fma_cyc, _ = _vector_cycles(lambda d, a, b: lang.fused_mul_add(d, a, b, n), x.astype(np.float32),
                                y.astype(np.float32))
    assert fma_cyc == add_cyc


def test_fused_mul_add_const_is_a_horner_step():
    """h = h * s + c with c held in one repeat: a polynomial in s, one instruction a degree."""
    s = (X / 4).astype(np.float32)
    coeffs = [0.5, -1.25, 2.0, 0.75]                 # h = ((0.5 s - 1.25) s + 2) s + 0.75
    n = s.size

    def body(d, src, c):
        lang.duplicate(d, coeffs[0], n)
        for k in coeffs[1:]:
            lang.duplicate(c, k, 64)
            lang.fused_mul_add_const(d, src, c, n)
    out, _ = run_vector(body, s, np.zeros(n, np.float32))
    np.testing.assert_allclose(out, np.polyval(coeffs, s), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="consts"):
        run_vector(lambda d, src, c: lang.fused_mul_add_const(d, src, c.reinterpret_cast(np.int32), n),
                   s, np.zeros(n, np.float32))


def test_fused_mul_add_per_row_and_col():
    a, b = V[:ROWS] + 1, V[:ROWS] - 3
    va = np.zeros_like(X); va[:ROWS] = a
    vb = np.zeros_like(X); vb[:ROWS] = b
    out, _ = run_vector(lambda d, s, p, q: (lang.adds(d, s, 0.0, ROWS * COLS),
                                            lang.fused_mul_add_per_row(d, p, q, ROWS, COLS)), X, va, vb)
    np.testing.assert_allclose(out.reshape(ROWS, COLS), a[:, None] * X.reshape(ROWS, COLS) + b[:, None],
                               rtol=1e-6)
    ca, cb = V[:COLS] * 0.5, V[:COLS] + 1
    va = np.zeros_like(X); va[:COLS] = ca
    vb = np.zeros_like(X); vb[:COLS] = cb
    out, _ = run_vector(lambda d, s, p, q: (lang.adds(d, s, 0.0, ROWS * COLS),
                                            lang.fused_mul_add_per_col(d, p, q, ROWS, COLS)), X, va, vb)
    np.testing.assert_allclose(out.reshape(ROWS, COLS), ca[None, :] * X.reshape(ROWS, COLS) + cb[None, :],
                               rtol=1e-6)


def test_ramp_tiles_cover_the_block_exactly():
    from npulab.kernels.vector_base import ramp_tiles
    for total, tile, unit in ((1000, 64, 1), (128, 16, 1), (37, 8, 1), (5, 8, 1), (96, 32, 16)):
        parts = ramp_tiles(total, tile, unit)
        assert sum(parts) == total and all(0 < p <= tile for p in parts)
        assert all(p % unit == 0 for p in parts[:-1])
    parts = ramp_tiles(1000, 64)
    assert parts[0] < parts[1] < 64 and parts[-1] < 64     # smaller tiles at both ends


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_rsqrt_is_one_transcendental_instruction(dtype):
    """Rsqrt: dst = 1 / sqrt(src), one instruction costing what Sqrt costs (where sqrt then
    reciprocal are two)."""
    x = (np.abs(X) + 0.25).astype(dtype)
    n = x.size
    out, _ = run_vector(lambda d, s: lang.vector.rsqrt(d, s, n), x, dtype=dtype)
    tol = dict(rtol=1e-3) if dtype == np.float16 else dict(rtol=1e-6)
    np.testing.assert_allclose(out.astype(np.float64), 1 / np.sqrt(x.astype(np.float64)), **tol)
    x32 = x.astype(np.float32)
    rs_cyc, rs_n = _vector_cycles(lambda d, s: lang.vector.rsqrt(d, s, n), x32)
    sq_cyc, _ = _vector_cycles(lambda d, s: lang.sqrt(d, s, n), x32)
    two_cyc, two_n = _vector_cycles(lambda d, s: (lang.sqrt(d, s, n), lang.reciprocal(d, d, n)), x32)
    assert rs_cyc == sq_cyc and rs_n == 1 and two_n == 2 and two_cyc == 2 * rs_cyc


# -- the across-rows form: a repeat's 8 blocks from 8 rows (block stride one row) ------------
def test_per_row_ops_sweep_8_rows_a_repeat():
    vec = get_chip("910").vector
    cols = 768                                 # 96 fp32 blocks a row, 12 repeats
    for rows in (16, 10):                      # two groups of 8 rows; the second masked to 2
        x = np.ones(rows * cols, np.float32)
        cyc, n = _vector_cycles(lambda d, s: lang.mul_per_row(d, s, s, rows, cols), x)
        groups = -(-rows // 8)
        brcb = vec.startup_cycles + -(-rows // 8)
        assert n == 1 + groups and cyc == brcb + groups * (vec.startup_cycles + 96)
        # cheaper than a chunk of columns a instruction (12 of them) or a row a instruction
        assert cyc - brcb < min(12 * (vec.startup_cycles + rows), rows * (vec.startup_cycles + 12))
    # the per-column operand is read with block stride 0: the same form, no Brcb
    x = np.ones(16 * cols, np.float32)
    cyc, n = _vector_cycles(lambda d, s: lang.mul_per_col(d, s, s, 16, cols), x)
    assert n == 2 and cyc == 2 * (vec.startup_cycles + 96)
    # a block stride is a uint8 count of blocks: rows longer than 255 blocks keep the old forms
    x = np.ones(8 * 2048, np.float32)
    _, n = _vector_cycles(lambda d, s: lang.mul_per_col(d, s, s, 8, 2048), x)
    assert n == 8                              # one instruction a row, 32 repeats each


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_rows_forms_fold_a_rows_halves(dtype):
    """add_rows / mul_rows / mul_add_dst_rows: elementwise over rows x cols tiles with separate
    row strides for dst and sources; folding each row's second half onto its first."""
    rows, cols = 9, 64
    half = cols // 2
    x = (X[: rows * cols] / 2).astype(dtype)
    m = x.reshape(rows, cols).astype(np.float64)
    tol = dict(rtol=2e-3, atol=2e-3) if dtype == np.float16 else dict(rtol=1e-6, atol=1e-6)
    out, _ = run_vector(lambda d, s: lang.vector_rows.add_rows(d, s, s[half:], rows, half, half, cols), x, dtype=dtype)
    np.testing.assert_allclose(out[: rows * half].reshape(rows, half), m[:, :half] + m[:, half:], **tol)

    def squares(d, s):
        lang.vector_rows.mul_rows(d, s, s, rows, half, half, cols)
        lang.vector_rows.mul_add_dst_rows(d, s[half:], s[half:], rows, half, half, cols)
    out, _ = run_vector(squares, x, dtype=dtype)
    np.testing.assert_allclose(out[: rows * half].reshape(rows, half), m[:, :half] ** 2 + m[:, half:] ** 2, **tol)


def test_rows_forms_check_their_operands():
    x = np.ones(64, np.float32)
    with pytest.raises(Exception, match="stride 8 is shorter than a row"):
        run_vector(lambda d, s: lang.vector_rows.add_rows(d, s, s, 4, 16, 8, 16), x)
    with pytest.raises(Exception, match="must match"):
        run_vector(lambda d, s: lang.vector_rows.mul_rows(d, s, s.reinterpret_cast(np.int32), 2, 8), x)
