"""Fractal formats: hand-computed layouts, numpy spec vs Cython twin, round trips."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import npulab.formats as F
from npulab.arch import round_up
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


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(DTYPES), s_rows=st.integers(1, 50), s_cols=st.integers(1, 70),
       r0=st.integers(0, 20), c0_off=st.integers(0, 40), transpose=st.booleans(), zz=st.booleans())
def test_load_window_twins_agree_with_the_spec(dtype, s_rows, s_cols, r0, c0_off, transpose, zz):
    """load_data's one-pass move (L1 NZ window -> ZZ or ZN fractals) against the readable spec:
    the ND window cut out of the matrix, transposed if asked, packed with pack_numpy."""
    full_rows = r0 + s_rows + 3
    full_cols = c0_off + s_cols + 5
    s = _rand((full_rows, full_cols), dtype, s_rows * 7 + s_cols)
    c0 = F.c0_of(dtype)
    src_rows = round_up(full_rows, 16)
    nz = F.pack_numpy(s, 16, c0, True, False).reshape(-1)          # S in NZ, as L1 holds it
    window = s[r0:r0 + s_rows, c0_off:c0_off + s_cols]
    op = window.T if transpose else window
    fr, fc = (16, c0) if zz else (c0, 16)
    spec = F.pack_numpy(np.ascontiguousarray(op), fr, fc, False, not zz).reshape(-1)
    rows, cols = op.shape
    for fn in (C.nz_window_into, F.nz_window_into_numpy):
        dst = np.full(spec.size, 3, dtype=dtype)
        fn(nz, src_rows, c0, r0, c0_off, rows, cols, transpose, dst, fr, fc, not zz)
        np.testing.assert_array_equal(dst, spec)


@settings(max_examples=40, deadline=None)
@given(rows=dims, cols=dims, col_order=st.booleans(), col_inner=st.booleans(), pad=st.integers(0, 9))
def test_widening_unpack_twins_agree(rows, cols, col_order, col_inner, pad):
    """The mmad numerics read fp16 fractals straight into fp32 (the widening is exact)."""
    x = _rand((rows, cols), np.float16, rows + 31 * cols)
    z = F.pack_numpy(x, 16, 16, col_order, col_inner)
    for fn in (C.unpack_f16_to_f32, F.unpack_f16_to_f32_numpy):
        big = np.full((rows, cols + pad), -1.0, np.float32)       # rows strided, as in a chain
        fn(z, big[:, :cols], 16, 16, col_order, col_inner)
        np.testing.assert_array_equal(big[:, :cols], x.astype(np.float32))
        assert (big[:, cols:] == -1).all()


def test_widening_is_exact_for_every_half():
    h = np.arange(65536, dtype=np.uint16).view(np.float16)
    out = np.empty((1, 65536), np.float32)
    C.unpack_f16_to_f32(h, out, 1, 65536, False)
    ref = h.astype(np.float32)
    same = (out[0].view(np.uint32) == ref.view(np.uint32)) | (np.isnan(out[0]) & np.isnan(ref))
    assert same.all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("zz", [True, False])
@pytest.mark.parametrize("r0,q0", [(0, 0), (16, 1), (5, 2)])
def test_load_window_whole_fractals(dtype, zz, r0, q0):
    """The fractal-by-fractal path (aligned windows, the matmul template's every load)."""
    c0 = F.c0_of(dtype)
    fr, fc = (16, c0) if zz else (c0, 16)
    rows, cols = 2 * fr, 3 * fc                      # whole fractals of the operand
    s = _rand((r0 + rows + 16, q0 * c0 + cols + c0), dtype, 11)
    src_rows = round_up(s.shape[0], 16)
    nz = F.pack_numpy(s, 16, c0, True, False).reshape(-1)
    spec = F.pack_numpy(np.ascontiguousarray(s[r0:r0 + rows, q0 * c0:q0 * c0 + cols]), fr, fc, False,
                        not zz).reshape(-1)
    dst = np.full(spec.size, 3, dtype=dtype)
    C.nz_window_into(nz, src_rows, c0, r0, q0 * c0, rows, cols, False, dst, fr, fc, not zz)
    np.testing.assert_array_equal(dst, spec)


@pytest.mark.parametrize("fast", [True, False])
def test_buffer_moves_match_the_array_moves(fast, monkeypatch):
    """load_data and mmad call the moves on a buffer's byte array at byte offsets; with the
    Cython build and without it (the numpy twins) they give the array functions' results."""
    if not fast:
        monkeypatch.setattr(F, "_fast", None)
    s = _rand((48, 40), np.float16, 5)
    nz = F.pack_numpy(s, 16, 16, True, False).reshape(-1)
    src_buf = np.zeros(4096 + nz.nbytes, np.uint8)
    src_buf[64:64 + nz.nbytes] = nz.view(np.uint8)
    for transpose, zz, (rows, cols) in ((False, True, (32, 16)), (False, False, (16, 32)),
                                        (True, True, (20, 7)), (False, False, (13, 21))):
        fr, fc = (16, 16)
        r1, c1 = -(-rows // fr), -(-cols // fc)
        spec = np.empty(r1 * c1 * 256, np.float16)
        F.nz_window_into_numpy(nz, 48, 16, 3, 2, rows, cols, transpose, spec, fr, fc, not zz)
        dst_buf = np.full(8192, 255, np.uint8)
        F.nz_window_buffers(src_buf, 64, nz.size, 2, 48, 16, 3, 2, rows, cols, transpose,
                            dst_buf, 512, spec.size, fr, fc, not zz)
        np.testing.assert_array_equal(dst_buf[512:512 + spec.nbytes].view(np.float16), spec)
        assert (dst_buf[:512] == 255).all() and (dst_buf[512 + spec.nbytes:] == 255).all()
    z = F.pack_numpy(s[:32, :40], 16, 16, False, False)
    buf = np.zeros(1024 + z.nbytes, np.uint8)
    buf[1024:] = z.reshape(-1).view(np.uint8)
    out = np.full((32, 50), -1, np.float32)
    F.unpack_f16_buffer(buf, 1024, out, 0, 32, 5, 40, 16, 16, False, False)
    np.testing.assert_array_equal(out[:, 5:45], s[:32, :40].astype(np.float32))
    assert (out[:, :5] == -1).all() and (out[:, 45:] == -1).all()
    with pytest.raises(ShapeError):
        F.nz_window_buffers(src_buf, src_buf.size - 8, nz.size, 2, 48, 16, 0, 0, 16, 16, False,
                            dst_buf, 0, 256, 16, 16, False)


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("m,n", [(1, 1), (16, 16), (37, 50), (128, 256)])
def test_fixpipe_drain_matches_numpy(m, n, with_bias, relu):
    """FixPipe's one-pass fp32 NZ -> fp16 drain gives numpy's bytes: bias, ReLU, round to
    nearest even, overflow to inf, subnormals, nan."""
    rng = np.random.default_rng(m * n)
    x = (rng.standard_normal((m, n)) * 10.0 ** rng.integers(-9, 6, (m, n))).astype(np.float32)
    x.flat[:4] = [np.nan, np.inf, -70000.0, 2.0 ** -25][: x.size] if x.size >= 4 else x.flat[:4]
    z = F.pack_numpy(x, 16, 16, True, False).reshape(-1)
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    ref = x + bias if with_bias else x.copy()
    if relu:
        ref = np.maximum(ref, 0)
    with np.errstate(over="ignore"):               # large values overflow to inf, as on the chip
        ref = ref.astype(np.float16)
    big = np.full((m, n + 3), 7, np.float16)
    done = C.drain_nz_f32_to_f16(z, m, n, big[:, :n], bias, relu)
    if not done:                                    # a CPU without F16C: nothing touched
        assert (big == 7).all()
        return
    np.testing.assert_array_equal(big[:, :n].view(np.uint16), ref.view(np.uint16))
    assert (big[:, n:] == 7).all()
