"""mmad's widening read and FixPipe's drain (npulab.formats.drains and its Cython twin
npulab._drains): every test body runs on both twins (``side``): the widening is exact for every
half, whole and partial fractals, at byte offsets of a buffer; the drain gives numpy's bytes;
the errors are the same on both."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures import random_ints, same_error_on_both_twins
from npulab import ShapeError, _drains, twins
from npulab.formats import drains as spec
from npulab.formats.layouts import pack

SIDES = twins.SIDES
dims = st.integers(1, 70)


def drains_of(side):
    return twins.pick(_drains, spec, side)


@pytest.mark.parametrize("side", SIDES)
@settings(max_examples=40, deadline=None)
@given(rows=dims, cols=dims, col_order=st.booleans(), col_inner=st.booleans(), pad=st.integers(0, 9))
def test_widening_unpack_twins_agree(side, rows, cols, col_order, col_inner, pad):
    """The mmad numerics read fp16 fractals straight into fp32 (the widening is exact)."""
    x = random_ints((rows, cols), np.float16, rows + 31 * cols)
    z = pack(x, 16, 16, col_order, col_inner)
    big = np.full((rows, cols + pad), -1.0, np.float32)       # rows strided, as in a chain
    drains_of(side).unpack_f16_to_f32(z, big[:, :cols], 16, 16, col_order, col_inner)
    np.testing.assert_array_equal(big[:, :cols], x.astype(np.float32))
    assert (big[:, cols:] == -1).all()


@pytest.mark.parametrize("side", SIDES)
def test_widening_is_exact_for_every_half(side):
    h = np.arange(65536, dtype=np.uint16).view(np.float16)
    out = np.empty((1, 65536), np.float32)
    drains_of(side).unpack_f16_to_f32(h, out, 1, 65536, False)
    ref = h.astype(np.float32)
    same = (out[0].view(np.uint32) == ref.view(np.uint32)) | (np.isnan(out[0]) & np.isnan(ref))
    assert same.all()


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("col_inner", [False, True])
@pytest.mark.parametrize("rows,cols", [(16, 16), (64, 48), (48, 37), (35, 64)])
def test_widening_of_whole_and_partial_fractals(side, rows, cols, col_inner):
    """Whole 16 x 16 fractals take the direct path, the edges the general one: both give
    numpy's float32 of every half, from a byte offset of a buffer into a row-strided matrix."""
    x = (np.random.default_rng(rows * cols).standard_normal((rows, cols)) * 100).astype(np.float16)
    x.flat[:3] = [np.inf, -0.0, 6e-8]
    z = pack(x, 16, 16, False, col_inner)
    buf = np.zeros(64 + z.nbytes, np.uint8)
    buf[64:] = z.reshape(-1).view(np.uint8)
    out = np.full((rows + 3, cols + 20), -1, np.float32)
    drains_of(side).unpack_f16_buffer(buf, 64, out, 2, rows, 5, cols, 16, 16, False, col_inner)
    np.testing.assert_array_equal(out[2:2 + rows, 5:5 + cols], x.astype(np.float32))
    out[2:2 + rows, 5:5 + cols] = -1
    assert (out == -1).all()


@pytest.mark.parametrize("side", SIDES)
def test_buffer_widening_matches_the_array_widening(side):
    """mmad reads L0A at a byte offset into columns of its chain: nothing else is written."""
    s = random_ints((48, 40), np.float16, 5)
    z = pack(s[:32, :40], 16, 16, False, False)
    buf = np.zeros(1024 + z.nbytes, np.uint8)
    buf[1024:] = z.reshape(-1).view(np.uint8)
    out = np.full((32, 50), -1, np.float32)
    drains_of(side).unpack_f16_buffer(buf, 1024, out, 0, 32, 5, 40, 16, 16, False, False)
    np.testing.assert_array_equal(out[:, 5:45], s[:32, :40].astype(np.float32))
    assert (out[:, :5] == -1).all() and (out[:, 45:] == -1).all()


@pytest.mark.parametrize("side", SIDES)
def test_buffer_widening_checks_the_fractal_shape_before_dividing_by_it(side):
    buf, out = np.zeros(1024, np.uint8), np.zeros((4, 4), np.float32)
    for fr, fc in ((0, 16), (16, 0)):
        with pytest.raises(ShapeError, match="fractals of"):
            drains_of(side).unpack_f16_buffer(buf, 0, out, 0, 1, 0, 1, fr, fc, False, False)


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("m,n", [(1, 1), (16, 16), (37, 50), (128, 256)])
def test_fixpipe_drain_matches_numpy(side, m, n, with_bias, relu):
    """FixPipe's one-pass fp32 NZ -> fp16 drain gives numpy's bytes: bias, ReLU, round to
    nearest even, overflow to inf, subnormals, nan."""
    rng = np.random.default_rng(m * n)
    x = (rng.standard_normal((m, n)) * 10.0 ** rng.integers(-9, 6, (m, n))).astype(np.float32)
    x.flat[:4] = [np.nan, np.inf, -70000.0, 2.0 ** -25][: x.size] if x.size >= 4 else x.flat[:4]
    z = pack(x, 16, 16, True, False).reshape(-1)
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    ref = x + bias if with_bias else x.copy()
    if relu:
        ref = np.maximum(ref, 0)
    with np.errstate(over="ignore"):               # large values overflow to inf, as on the chip
        ref = ref.astype(np.float16)
    big = np.full((m, n + 3), 7, np.float16)
    done = drains_of(side).drain_nz_f32_to_f16(z, m, n, big[:, :n], bias, relu)
    if not done:                                    # a CPU without F16C: nothing touched
        assert side == "cython" and (big == 7).all()
        return
    np.testing.assert_array_equal(big[:, :n].view(np.uint16), ref.view(np.uint16))
    assert (big[:, n:] == 7).all()


@pytest.mark.parametrize("side", SIDES)
def test_relu_keeps_negative_zero_and_nan_as_the_f16c_drain_does(side):
    """max(0, v) of the F16C instructions returns v unless 0 > v: -0.0 and NaN pass through."""
    x = np.zeros((16, 16), np.float32)
    x[0, :4] = [-0.0, np.nan, -1.0, 3.0]
    out = np.full((16, 16), 7, np.float16)
    if not drains_of(side).drain_nz_f32_to_f16(pack(x, 16, 16, True, False).reshape(-1), 16, 16, out, None, True):
        assert side == "cython" and (out == 7).all()      # a CPU without F16C: nothing touched
        return
    assert out[0, :4].view(np.uint16).tolist() == [0x8000, 0x7E00, 0, 0x4200]


_Z, _OUT = np.zeros(1024, np.float32), np.zeros((16, 16), np.float16)
#: misuses of every drain function, each with the start of the message both twins give
BAD_CALLS = [
    ("unpack_f16_to_f32", (np.zeros(256, np.float16), np.zeros((16, 16), np.float64), 16, 16, False),
     "unpack_f16_to_f32: out must be a 2-D float32 array with contiguous rows, got float64"),
    ("unpack_f16_to_f32", (np.zeros(256, np.float32), np.zeros((16, 16), np.float32), 16, 16, False),
     "unpack_f16_to_f32: z must be float16, got float32"),
    ("unpack_f16_to_f32", (np.zeros(100, np.float16), np.zeros((16, 16), np.float32), 16, 16, False),
     "unpack_f16_to_f32: z holds 100 elements; 16 x 16 in 16 x 16 fractals needs 256"),
    ("unpack_f16_buffer", (np.zeros(500, np.uint8), 0, np.zeros((16, 16), np.float32), 0, 16, 0, 16, 16, 16,
                           False, False), "unpack_f16_buffer: rows 0+16, columns 0+16 of a 16 x 16 matrix"),
    ("unpack_f16_buffer", (np.zeros(512, np.uint8), 0, np.zeros((16, 16), np.float64), 0, 16, 0, 16, 16, 16,
                           False, False), "unpack_f16_buffer: buf must be a C-contiguous uint8 array"),
    ("drain_nz_f32_to_f16", (_Z[:100], 16, 16, _OUT, None, False),
     "drain_nz_f32_to_f16: z holds 100 values; an 16 x 16 result needs 256"),
    ("drain_nz_f32_to_f16", (_Z, 16, 16, np.zeros((16, 16), np.float32), None, False),
     "drain_nz_f32_to_f16: expected float32 NZ fractals and a float16 (m, n) array"),
    ("drain_nz_f32_to_f16", (_Z, 16, 16, _OUT, np.zeros(8, np.float32), False),
     "drain_nz_f32_to_f16: bias holds 8 values, n = 16"),
]


@pytest.mark.parametrize("name,args,message", BAD_CALLS, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD_CALLS)])
def test_both_twins_refuse_a_bad_call_with_the_same_error(name, args, message):
    got = same_error_on_both_twins([drains_of(side) for side in SIDES], name, args, ShapeError)
    assert got.startswith(message), got
