"""The named formats of npulab.formats (ND, NZ, ZZ, ZN, NC1HWC0, FRACTAL_Z): hand-computed
layouts, round trips, and errors that name the rule. The functions run on the switch's side;
the ``side`` fixture runs the fractal cases (built on formats.layouts) on both twins."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import npulab.formats as F
from fixtures import random_ints
from npulab import ShapeError

DTYPES = [np.float16, np.int8, np.float32]


def test_c0_is_32_bytes_of_elements():
    assert (F.c0_of(np.float16), F.c0_of(np.int8), F.c0_of(np.float32)) == (16, 32, 8)
    for dt in DTYPES:                       # every input fractal is 16 x 32 bytes = 512 B
        assert F.FRACTAL_ROWS * F.c0_of(dt) * np.dtype(dt).itemsize == F.FRACTAL_BYTES


def test_nz_by_hand(side):
    x = np.arange(2 * 20, dtype=np.float16).reshape(2, 20)
    z = F.nd_to_nz(x)
    assert z.shape == (2, 1, 16, 16)        # (N1, M1, M0, N0): N padded 20 -> 32, M 2 -> 16
    assert z[0, 0, 1, 3] == x[1, 3]
    assert z[1, 0, 0, 2] == x[0, 18]        # column 18 lives in the second fractal column
    assert z[1, 0, 0, 4] == 0 and z[0, 0, 5, 0] == 0   # zero padding
    # the second fractal column starts after the first whole (M1*16 x 16) block
    assert z.reshape(-1)[16 * 16 + 2] == x[0, 18]


def test_zz_and_zn_by_hand(side):
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


def test_int8_zn_fractal_is_32_by_16(side):
    b = random_ints((40, 20), np.int8)
    zn = F.nd_to_zn(b)
    assert zn.shape == (2, 2, 16, 32)       # K1 = ceil(40/32), N1 = ceil(20/16)
    assert zn[1, 1, 3, 5] == b[32 + 5, 16 + 3]


def test_nc1hwc0_and_fractal_z_by_hand():
    x = random_ints((2, 20, 3, 4), np.float16)
    y = F.nchw_to_nc1hwc0(x)
    assert y.shape == (2, 2, 3, 4, 16)
    assert y[1, 1, 2, 3, 2] == x[1, 18, 2, 3] and y[1, 1, 2, 3, 5] == 0
    assert F.nchw_to_nc1hwc0(random_ints((1, 40, 1, 1), np.int8)).shape == (1, 2, 1, 1, 32)
    w = random_ints((20, 17, 3, 2), np.float16)   # (Cout, Cin, H, W)
    z = F.nchw_to_fractal_z(w)
    assert z.shape == (2 * 3 * 2, 2, 16, 16)     # (C1*H*W, N1, N0, C0)
    c1, h, x_, n1, n0, c0 = 1, 2, 1, 1, 3, 0     # w[n1*16+n0, c1*16+c0, h, x_]
    assert z[(c1 * 3 + h) * 2 + x_, n1, n0, c0] == w[19, 16, 2, 1]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 70), h=st.integers(1, 4), w=st.integers(1, 4),
       dtype=st.sampled_from(DTYPES))
def test_feature_map_and_weight_round_trips(n, c, h, w, dtype):
    x = random_ints((n, c, h, w), dtype, c)
    y = F.nchw_to_nc1hwc0(x)
    assert y.shape[-1] == F.c0_of(dtype) and y.shape[1] * y.shape[-1] >= c
    np.testing.assert_array_equal(F.nc1hwc0_to_nchw(y, c), x)
    wt = random_ints((c, n * 7, h, w), dtype, h)           # (Cout, Cin, H, W)
    z = F.nchw_to_fractal_z(wt)
    assert z.shape[1:3] == (-(-c // 16), 16)
    np.testing.assert_array_equal(F.fractal_z_to_nchw(z, c, n * 7, h, w), wt)


def test_bad_input_names_the_rule(side):
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


# -- where each element sits ---------------------------------------------------------------------
@pytest.mark.parametrize("m, n", [(20, 40), (5, 17), (16, 16), (33, 48)])
def test_nz_offsets_are_where_nd_to_nz_stores_each_element(m, n):
    x = np.random.default_rng(m * n).integers(1, 1000, size=(m, n))
    off = F.nz_offsets(m, n)
    stored = F.nd_to_nz(x, c0=16).reshape(-1)
    assert off.shape == (m, n) and off.dtype == np.int64
    assert np.array_equal(stored[off], x)
    assert len(np.unique(off)) == m * n
    r, c = np.indices((m, n))                             # fractal columns first, rows padded to 16
    assert np.array_equal(off, (c // 16) * (-(-m // 16) * 16) * 16 + r * 16 + c % 16)


@pytest.mark.parametrize("c, h, w, dtype", [(20, 2, 3, np.float32), (3, 4, 5, np.float16), (40, 2, 2, np.int8)])
def test_nc1hwc0_offsets_are_where_the_conversion_stores_each_channel(c, h, w, dtype):
    c0 = F.c0_of(dtype)
    c1 = -(-c // c0)
    off = F.nc1hwc0_offsets(c, h, w, dtype)
    assert off.shape == (c1 * c0, h * w)
    assert sorted(off.reshape(-1)) == list(range(c1 * c0 * h * w))
    x = np.arange(1, c * h * w + 1).reshape(1, c, h, w)
    stored = F.nchw_to_nc1hwc0(x, c0=c0).reshape(-1)
    assert np.array_equal(stored[off[:c]], x[0].reshape(c, h * w))
    assert not stored[off[c:]].any()                      # the padding channels hold zeros
    ch, p = np.indices(off.shape)
    assert np.array_equal(off, ((ch // c0) * h * w + p) * c0 + ch % c0)
