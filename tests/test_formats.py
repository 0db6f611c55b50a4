"""Fractal formats: hand-computed layouts, numpy spec vs Cython twin, round trips."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import npulab.formats as F
from npulab import ShapeError
from npulab import _formats as C

DTYPES = [np.float16, np.int8, np.float32]
dims = st.integers(1, 70)


def _rand(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(-100, 100, shape).astype(dtype)


def test_c0_is_32_bytes_of_elements():
    assert (F.c0_of(np.float16), F.c0_of(np.int8), F.c0_of(np.float32)) == (16, 32, 8)
    for dt in DTYPES:                       # every input fractal is 16 x 32 bytes = 512 B
        assert F.FRACTAL_ROWS * F.c0_of(dt) * np.dtype(dt).itemsize == F.FRACTAL_BYTES


def test_nz_by_hand():
    x = np.arange(2 * 20, dtype=np.float16).reshape(2, 20)
    z = F.nd_to_nz(x)
    assert z.shape == (2, 1, 16, 16)        # (N1, M1, M0, N0): N padded 20 -> 32, M 2 -> 16
    assert z[0, 0, 1, 3] == x[1, 3]
    assert z[1, 0, 0, 2] == x[0, 18]        # column 18 lives in the second fractal column
    assert z[1, 0, 0, 4] == 0 and z[0, 0, 5, 0] == 0   # zero padding
    # the second fractal column starts after the first whole (M1*16 x 16) block
    assert z.reshape(-1)[16 * 16 + 2] == x[0, 18]


def test_zz_and_zn_by_hand():
    a = np.arange(32 * 32, dtype=np.float16).reshape(32, 32)
    zz = F.nd_to_zz(a)                      # (M1, K1, 16, K0), fractals row-major
    assert zz.shape == (2, 2, 16, 16)
    assert zz[0, 1, 2, 3] == a[2, 16 + 3]
    assert zz[1, 0, 0, 0] == a[16, 0]
    zn = F.nd_to_zn(a)                      # (K1, N1, 16 (n), K0 (k)): each fractal column-major
    assert zn[0, 0, 1, 0] == a[0, 1]        # stored row 1 = column n=1
    assert zn[0, 0, 0, 1] == a[1, 0]        # next element in a stored row = next k
    assert zn[1, 0, 0, 0] == a[16, 0]
    assert zn[0, 1, 0, 0] == a[0, 16]


def test_int8_zn_fractal_is_32_by_16():
    b = _rand((40, 20), np.int8)
    zn = F.nd_to_zn(b)
    assert zn.shape == (2, 2, 16, 32)       # K1 = ceil(40/32), N1 = ceil(20/16)
    assert zn[1, 1, 3, 5] == b[32 + 5, 16 + 3]


def test_nc1hwc0_and_fractal_z_by_hand():
    x = _rand((2, 20, 3, 4), np.float16)
    y = F.nchw_to_nc1hwc0(x)
    assert y.shape == (2, 2, 3, 4, 16)
    assert y[1, 1, 2, 3, 2] == x[1, 18, 2, 3] and y[1, 1, 2, 3, 5] == 0
    assert F.nchw_to_nc1hwc0(_rand((1, 40, 1, 1), np.int8)).shape == (1, 2, 1, 1, 32)
    w = _rand((20, 17, 3, 2), np.float16)   # (Cout, Cin, H, W)
    z = F.nchw_to_fractal_z(w)
    assert z.shape == (2 * 3 * 2, 2, 16, 16)     # (C1*H*W, N1, N0, C0)
    c1, h, x_, n1, n0, c0 = 1, 2, 1, 1, 3, 0     # w[n1*16+n0, c1*16+c0, h, x_]
    assert z[(c1 * 3 + h) * 2 + x_, n1, n0, c0] == w[19, 16, 2, 1]


@pytest.mark.parametrize("fmt", ["NZ", "ZZ", "ZN"])
@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=25, deadline=None)
@given(rows=dims, cols=dims)
def test_round_trip_and_twins_agree(fmt, dtype, rows, cols):
    x = _rand((rows, cols), dtype, rows * 100 + cols)
    z = F.to_fractal(x, fmt)
    assert z.shape == F.fractal_shape(fmt, rows, cols, dtype)
    np.testing.assert_array_equal(F.from_fractal(z, fmt, rows, cols), x)
    fr, fc, col_order, col_inner = F._geometry(fmt, dtype, None)
    spec = F.pack_numpy(x, fr, fc, col_order, col_inner)
    np.testing.assert_array_equal(C.pack(x, fr, fc, col_order, col_inner), spec)
    np.testing.assert_array_equal(C.unpack(spec, rows, cols, col_order, col_inner), x)
    np.testing.assert_array_equal(F.unpack_numpy(spec, rows, cols, col_order, col_inner), x)
    # the *_into twins, writing into a flat buffer and out of it into a strided window
    flat = np.full(spec.size, 7, dtype=x.dtype)
    C.pack_into(x, flat, fr, fc, col_order, col_inner)
    np.testing.assert_array_equal(flat, spec.reshape(-1))
    flat2 = np.full(spec.size, 7, dtype=x.dtype)
    F.pack_into_numpy(x, flat2, fr, fc, col_order, col_inner)
    np.testing.assert_array_equal(flat2, flat)
    big = np.zeros((rows + 3, cols + 5), dtype=x.dtype)
    C.unpack_into(flat, big[1:1 + rows, 2:2 + cols], fr, fc, col_order, col_inner)
    np.testing.assert_array_equal(big[1:1 + rows, 2:2 + cols], x)
    assert not big[0].any() and not big[:, 0].any()
    out = np.zeros((rows, cols), x.dtype)
    F.unpack_into_numpy(flat, out, fr, fc, col_order, col_inner)
    np.testing.assert_array_equal(out, x)


@settings(max_examples=25, deadline=None)
@given(rows=dims, cols=dims, r0=st.integers(0, 5), c0=st.integers(0, 5))
def test_pack_reads_a_strided_window(rows, cols, r0, c0):
    big = _rand((rows + 8, cols + 8), np.float16, 3)
    view = big[r0:r0 + rows, c0:c0 + cols]          # a tile of a larger matrix, not contiguous
    np.testing.assert_array_equal(C.pack(view, 16, 16, True, False),
                                  F.pack_numpy(np.ascontiguousarray(view), 16, 16, True, False))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 70), h=st.integers(1, 4), w=st.integers(1, 4),
       dtype=st.sampled_from(DTYPES))
def test_feature_map_and_weight_round_trips(n, c, h, w, dtype):
    x = _rand((n, c, h, w), dtype, c)
    y = F.nchw_to_nc1hwc0(x)
    assert y.shape[-1] == F.c0_of(dtype) and y.shape[1] * y.shape[-1] >= c
    np.testing.assert_array_equal(F.nc1hwc0_to_nchw(y, c), x)
    wt = _rand((c, n * 7, h, w), dtype, h)           # (Cout, Cin, H, W)
    z = F.nchw_to_fractal_z(wt)
    assert z.shape[1:3] == (-(-c // 16), 16)
    np.testing.assert_array_equal(F.fractal_z_to_nchw(z, c, n * 7, h, w), wt)


def test_bad_input_names_the_rule():
    with pytest.raises(ShapeError, match="format must be one of"):
        F.to_fractal(np.zeros((2, 2), np.float16), "XY")
    with pytest.raises(ShapeError, match="2-D"):
        F.nd_to_nz(np.zeros((2, 2, 2), np.float16))
    with pytest.raises(ShapeError, match="1-, 2- or 4-byte"):
        F.c0_of(np.float64)
    with pytest.raises(ShapeError, match="holds at most"):
        F.nz_to_nd(F.nd_to_nz(np.zeros((4, 4), np.float16)), 17, 4)
    with pytest.raises(ShapeError, match="17 channels asked"):
        F.nc1hwc0_to_nchw(F.nchw_to_nc1hwc0(np.zeros((1, 3, 1, 1), np.float16)), 17)
