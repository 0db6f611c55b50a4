"""The 2-D vector forms (row reductions, per-row / per-column broadcasts) and gather, against
numpy; and their cost counted repeat by repeat."""
import numpy as np
import pytest

from npulab import lang
from npulab.chips import get_chip
from npulab.sim.isa import Kind, Pipe
from test_lang import run_vector

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
