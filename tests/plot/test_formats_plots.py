"""The format pictures show the storage the format conversions produce: every offset drawn is
where npulab.formats puts that element, each picture draws into the Axes it is given (or a new
one) and returns it, and the img2col picture colours what the simulator wrote into L0A."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import npulab.plot as P  # noqa: E402
from npulab import formats as F  # noqa: E402
from npulab.kernels.examples.img2col import img2col_on_npu  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize("m, n", [(20, 40), (5, 17), (16, 16), (33, 48)])
def test_nz_offsets_are_where_nd_to_nz_stores_each_element(m, n):
    x = np.random.default_rng(m * n).integers(1, 1000, size=(m, n))
    off = P.nz_offsets(m, n)
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
    off = P.nc1hwc0_offsets(c, h, w, dtype)
    assert off.shape == (c1 * c0, h * w)
    assert sorted(off.reshape(-1)) == list(range(c1 * c0 * h * w))
    x = np.arange(1, c * h * w + 1).reshape(1, c, h, w)
    stored = F.nchw_to_nc1hwc0(x, c0=c0).reshape(-1)
    assert np.array_equal(stored[off[:c]], x[0].reshape(c, h * w))
    assert not stored[off[c:]].any()                      # the padding channels hold zeros
    ch, p = np.indices(off.shape)
    assert np.array_equal(off, ((ch // c0) * h * w + p) * c0 + ch % c0)


def test_plot_nz_labels_every_fourth_offset_into_the_given_axes():
    _, ax = plt.subplots()
    m, n = 20, 40
    assert P.plot_nz(m, n, ax=ax) is ax
    off = P.nz_offsets(m, n)
    texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in ax.texts}
    assert len(texts) == m * (n // 4)
    assert all(texts[r, c] == str(off[r, c]) for r, c in texts)
    assert "NZ" in ax.get_title()
    assert sorted(ln.get_xdata()[0] for ln in ax.lines if ln.get_xdata()[0] == ln.get_xdata()[1]) == [15.5, 31.5]


def test_plot_img2col_colours_the_channels_load_3d_wrote():
    shape, k, stride, pad = (1, 3, 4, 4), 3, 1, 1
    ax = P.plot_img2col(shape, k, stride, pad)
    a = img2col_on_npu(shape, k, stride, pad)
    img = ax.images[0].get_array()
    assert img.shape == a.shape
    assert np.array_equal(np.ma.getmaskarray(img), a < 0)            # white: padding
    assert np.array_equal(img.compressed(), ((a[a >= 0] // 16) % 3).astype(float))
    assert len(ax.texts) == int(np.sum(a >= 0))                        # every real tap labelled h w
    assert "read back from L0A" in ax.get_title()


def test_plot_nc1hwc0_writes_every_offset_and_marks_the_padding():
    c, h, w = 20, 2, 3
    ax = P.plot_nc1hwc0(c, h, w, np.float32)
    off = P.nc1hwc0_offsets(c, h, w, np.float32)
    assert sorted(int(t.get_text()) for t in ax.texts) == sorted(off.reshape(-1).tolist())
    grey = [t for t in ax.texts if t.get_color() == "grey"]
    assert len(grey) == (off.shape[0] - c) * h * w
    assert any(ln.get_ydata()[0] == c - 0.5 and ln.get_color() == "red" for ln in ax.lines)
    assert "C0 = 8, C1 = 3" in ax.get_title()
