"""Fractal layouts (npulab.formats.layouts and its Cython twin npulab._layouts): every test body
runs on both twins (``side``) against the readable specification and hand-built references:
pack / unpack and their ``*_into`` forms, load_data's NZ window, data_copy_nd2nz's pack, the
buffer forms the simulator calls, and the errors, which are the same on both."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import npulab.formats as F
from fixtures import random_ints, same_error_on_both_twins
from npulab import ShapeError, _layouts, twins
from npulab.arch import round_up
from npulab.formats import layouts as spec

DTYPES = [np.float16, np.int8, np.float32]
SIDES = twins.SIDES
dims = st.integers(1, 70)


def layouts_of(side):
    return twins.pick(_layouts, spec, side)


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("fmt", ["NZ", "ZZ", "ZN"])
@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=25, deadline=None)
@given(rows=dims, cols=dims)
def test_round_trip_and_twins_agree(side, fmt, dtype, rows, cols):
    L = layouts_of(side)
    x = random_ints((rows, cols), dtype, rows * 100 + cols)
    with twins.use(side):
        z = F.to_fractal(x, fmt)
        assert z.shape == F.fractal_shape(fmt, rows, cols, dtype)
        np.testing.assert_array_equal(F.from_fractal(z, fmt, rows, cols), x)
    fr, fc, col_order, col_inner = F._geometry(fmt, dtype, None)
    want = spec.pack(x, fr, fc, col_order, col_inner)
    np.testing.assert_array_equal(z, want)
    np.testing.assert_array_equal(L.pack(x, fr, fc, col_order, col_inner), want)
    np.testing.assert_array_equal(L.unpack(want, rows, cols, col_order, col_inner), x)
    # the *_into forms, writing into a flat buffer and out of it into a strided window
    flat = np.full(want.size, 7, dtype=x.dtype)
    L.pack_into(x, flat, fr, fc, col_order, col_inner)
    np.testing.assert_array_equal(flat, want.reshape(-1))
    big = np.zeros((rows + 3, cols + 5), dtype=x.dtype)
    L.unpack_into(flat, big[1:1 + rows, 2:2 + cols], fr, fc, col_order, col_inner)
    np.testing.assert_array_equal(big[1:1 + rows, 2:2 + cols], x)
    assert not big[0].any() and not big[:, 0].any()
    out = np.zeros((rows, cols), x.dtype)
    L.unpack_into(flat, out, fr, fc, col_order, col_inner)
    np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("side", SIDES)
@settings(max_examples=25, deadline=None)
@given(rows=dims, cols=dims, r0=st.integers(0, 5), c0=st.integers(0, 5))
def test_pack_reads_a_strided_window(side, rows, cols, r0, c0):
    big = random_ints((rows + 8, cols + 8), np.float16, 3)
    view = big[r0:r0 + rows, c0:c0 + cols]          # a tile of a larger matrix, not contiguous
    np.testing.assert_array_equal(layouts_of(side).pack(view, 16, 16, True, False),
                                  spec.pack(np.ascontiguousarray(view), 16, 16, True, False))


def test_unpack_by_hand_against_the_loops():
    """The specification's transposes are the loops its docstring states."""
    x = np.arange(20 * 37, dtype=np.int16).reshape(20, 37)
    for col_order in (False, True):
        for col_inner in (False, True):
            z = spec.pack(x, 16, 8, col_order, col_inner)
            for R in range(2):
                for C in range(5):
                    for r in range(16):
                        for c in range(8):
                            outer = (C, R) if col_order else (R, C)
                            inner = (c, r) if col_inner else (r, c)
                            row, col = R * 16 + r, C * 8 + c
                            want = x[row, col] if row < 20 and col < 37 else 0
                            assert z[outer + inner] == want


@pytest.mark.parametrize("side", SIDES)
@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(DTYPES), s_rows=st.integers(1, 50), s_cols=st.integers(1, 70),
       r0=st.integers(0, 20), c0_off=st.integers(0, 40), transpose=st.booleans(), zz=st.booleans())
def test_load_window_agrees_with_the_window_cut_out_and_packed(side, dtype, s_rows, s_cols, r0, c0_off,
                                                                transpose, zz):
    """load_data's one-pass move (L1 NZ window -> ZZ or ZN fractals) against a reference made
    of simpler parts: the ND window cut out of the matrix, transposed if asked, packed."""
    full_rows = r0 + s_rows + 3
    full_cols = c0_off + s_cols + 5
    s = random_ints((full_rows, full_cols), dtype, s_rows * 7 + s_cols)
    c0 = F.c0_of(dtype)
    src_rows = round_up(full_rows, 16)
    nz = spec.pack(s, 16, c0, True, False).reshape(-1)          # S in NZ, as L1 holds it
    window = s[r0:r0 + s_rows, c0_off:c0_off + s_cols]
    op = window.T if transpose else window
    fr, fc = (16, c0) if zz else (c0, 16)
    want = spec.pack(np.ascontiguousarray(op), fr, fc, False, not zz).reshape(-1)
    rows, cols = op.shape
    dst = np.full(want.size, 3, dtype=dtype)
    layouts_of(side).nz_window_into(nz, src_rows, c0, r0, c0_off, rows, cols, transpose, dst, fr, fc, not zz)
    np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("zz", [True, False])
@pytest.mark.parametrize("r0,q0", [(0, 0), (16, 1), (5, 2)])
def test_load_window_whole_fractals(side, dtype, zz, r0, q0):
    """The fractal-by-fractal path (aligned windows, the matmul template's every load)."""
    c0 = F.c0_of(dtype)
    fr, fc = (16, c0) if zz else (c0, 16)
    rows, cols = 2 * fr, 3 * fc                      # whole fractals of the operand
    s = random_ints((r0 + rows + 16, q0 * c0 + cols + c0), dtype, 11)
    src_rows = round_up(s.shape[0], 16)
    nz = spec.pack(s, 16, c0, True, False).reshape(-1)
    want = spec.pack(np.ascontiguousarray(s[r0:r0 + rows, q0 * c0:q0 * c0 + cols]), fr, fc, False,
                     not zz).reshape(-1)
    dst = np.full(want.size, 3, dtype=dtype)
    layouts_of(side).nz_window_into(nz, src_rows, c0, r0, q0 * c0, rows, cols, False, dst, fr, fc, not zz)
    np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize("side", SIDES)
def test_buffer_moves_match_the_array_moves(side):
    """load_data calls the move on a buffer's byte array at byte offsets: it gives the array
    function's result and writes nothing outside its fractals."""
    L = layouts_of(side)
    s = random_ints((48, 40), np.float16, 5)
    nz = spec.pack(s, 16, 16, True, False).reshape(-1)
    src_buf = np.zeros(4096 + nz.nbytes, np.uint8)
    src_buf[64:64 + nz.nbytes] = nz.view(np.uint8)
    for transpose, zz, (rows, cols) in ((False, True, (32, 16)), (False, False, (16, 32)),
                                        (True, True, (20, 7)), (False, False, (13, 21))):
        fr, fc = (16, 16)
        r1, c1 = -(-rows // fr), -(-cols // fc)
        want = np.empty(r1 * c1 * 256, np.float16)
        spec.nz_window_into(nz, 48, 16, 3, 2, rows, cols, transpose, want, fr, fc, not zz)
        dst_buf = np.full(8192, 255, np.uint8)
        L.nz_window_buffers(src_buf, 64, nz.size, 2, 48, 16, 3, 2, rows, cols, transpose,
                            dst_buf, 512, want.size, fr, fc, not zz)
        np.testing.assert_array_equal(dst_buf[512:512 + want.nbytes].view(np.float16), want)
        assert (dst_buf[:512] == 255).all() and (dst_buf[512 + want.nbytes:] == 255).all()
    with pytest.raises(ShapeError):
        L.nz_window_buffers(src_buf, src_buf.size - 8, nz.size, 2, 48, 16, 0, 0, 16, 16, False,
                            dst_buf, 0, 256, 16, 16, False)


@pytest.mark.parametrize("side", SIDES)
@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 70), cols=st.integers(1, 80), extra=st.integers(0, 40),
       off=st.integers(0, 50), dst_off=st.integers(0, 3), dtype=st.sampled_from([np.float16, np.float32, np.int8]))
def test_pack_nz_buffers_writes_the_tiles_fractals(side, rows, cols, extra, off, dst_off, dtype):
    """data_copy_nd2nz's move: the (rows, cols) tile of a strided GM matrix as NZ fractals, zero
    padding, the same bytes as pack of the tile, and nothing outside the tile's fractals."""
    c0 = F.c0_of(dtype)
    stride = cols + extra
    src = (np.arange(off + rows * stride) % 251 - 120).astype(dtype)
    r16, c1 = -(-rows // 16) * 16, -(-cols // c0)
    need = r16 * c1 * 32
    want = spec.pack(np.lib.stride_tricks.as_strided(
        src[off:], shape=(rows, cols), strides=(stride * src.itemsize, src.itemsize)), 16, c0, True, False)
    buf = np.full(need + 64 * (dst_off + 2), 7, np.uint8)
    layouts_of(side).pack_nz_buffers(src, off, rows, cols, stride, buf, 32 * dst_off, c0)
    np.testing.assert_array_equal(buf[32 * dst_off:32 * dst_off + need].view(dtype), want.reshape(-1))
    assert (buf[:32 * dst_off] == 7).all() and (buf[32 * dst_off + need:] == 7).all()


_SRC, _BUF = np.zeros(100, np.float16), np.zeros(4096, np.uint8)
_X, _Z = np.zeros((20, 20), np.float16), np.zeros((2, 2, 16, 16), np.float16)
#: misuses of every layout function, each with the start of the message both twins give
BAD_CALLS = [
    ("pack_nz_buffers", (_SRC, 0, 10, 16, 16, _BUF, 0, 16), "pack_nz_buffers: the tile at element 0"),
    ("pack_nz_buffers", (_SRC, 0, 4, 16, 8, _BUF, 0, 16), "pack_nz_buffers: 4 x 16 (row stride 8)"),
    ("pack_nz_buffers", (_SRC, 0, 4, 16, 16, _BUF, 4096 - 32, 16), "pack_nz_buffers: the tile at element 0"),
    ("pack_nz_buffers", (_SRC, 0, 4, 16, 16, _BUF, 0, 8), "pack_nz_buffers: 4 x 16 (row stride 16) in fractal rows of 8"),
    ("pack_nz_buffers", (_SRC.reshape(10, 10), 0, 4, 16, 16, _BUF, 0, 16), "pack_nz_buffers: src must be a 1-D"),
    ("pack", (np.zeros(4, np.float16), 16, 16, True, False), "pack: x must be 2-D, got shape (4,)"),
    ("pack", (np.zeros((4, 4), np.complex128), 16, 16, True, False), "fractal formats move 1-, 2-, 4- or 8-byte"),
    ("pack_into", (_X, np.zeros(100, np.float16), 16, 16, True, False), "pack_into: out holds 100 elements"),
    ("pack_into", (_X, np.zeros(1024, np.float32), 16, 16, True, False), "pack_into: out must be C-contiguous float16"),
    ("unpack", (_Z[0], 16, 16, True, False), "a fractal array is 4-D, got shape (2, 16, 16)"),
    ("unpack", (_Z, 33, 16, True, False), "a fractal array of shape (2, 2, 16, 16) holds at most 32 x 32"),
    ("unpack_into", (_Z, np.zeros(4, np.float16), 16, 16, True, False), "unpack_into: out must be 2-D"),
    ("unpack_into", (_Z, np.zeros((40, 40), np.float16), 16, 16, True, False), "unpack_into: z (1024 x float16)"),
    ("nz_window_into", (np.zeros(512, np.float16), 16, 16, 0, 0, 16, 16, False, np.zeros(256, np.float32),
                        16, 16, False), "nz_window_into: src and dst must be C-contiguous arrays of one dtype"),
    ("nz_window_into", (np.zeros(512, np.float16), 16, 16, 0, 0, 16, 16, False, np.zeros(300, np.float16),
                        16, 16, False), "nz_window_into: dst holds 300 elements"),
    ("nz_window_into", (np.zeros(512, np.float16), 16, 16, 8, 0, 16, 16, False, np.zeros(256, np.float16),
                        16, 16, False), "nz_window_into: the window (8+16, 0+16) is outside"),
    ("nz_window_into", (np.zeros(512, np.float16), 16, 16, 0, 0, 16, 16, False, np.zeros(256, np.float16),
                        0, 16, False), "nz_window_into: sizes must be positive"),
    ("nz_window_buffers", (_BUF, 4000, 512, 2, 16, 16, 0, 0, 16, 16, False, _BUF, 0, 256, 16, 16, False),
     "nz_window_buffers: 512 or 256 elements of 2 B at bytes 4000 / 0 do not fit their buffers"),
    ("nz_window_buffers", (_BUF, 0, 512, 2, 16, 16, 0, 0, 16, 16, False, _BUF.view(np.int8), 0, 256, 16, 16,
                           False), "nz_window_buffers: the buffers must be C-contiguous uint8 arrays"),
    ("nz_window_buffers", (_BUF, 0, 512, 3, 16, 16, 0, 0, 16, 16, False, _BUF, 0, 256, 16, 16, False),
     "fractal formats move 1-, 2-, 4- or 8-byte elements, got 3-byte ones"),
]


@pytest.mark.parametrize("name,args,message", BAD_CALLS, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD_CALLS)])
def test_both_twins_refuse_a_bad_call_with_the_same_error(name, args, message):
    got = same_error_on_both_twins([layouts_of(side) for side in SIDES], name, args, ShapeError)
    assert got.startswith(message), got
