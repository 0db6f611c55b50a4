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


def test_plot_nz_labels_every_fourth_offset_into_the_given_axes():
    _, ax = plt.subplots()
    m, n = 20, 40
    assert P.plot_nz(m, n, ax=ax) is ax
    off = F.nz_offsets(m, n)
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
    off = F.nc1hwc0_offsets(c, h, w, np.float32)
    assert sorted(int(t.get_text()) for t in ax.texts) == sorted(off.reshape(-1).tolist())
    grey = [t for t in ax.texts if t.get_color() == "grey"]
    assert len(grey) == (off.shape[0] - c) * h * w
    assert any(ln.get_ydata()[0] == c - 0.5 and ln.get_color() == "red" for ln in ax.lines)
    assert "C0 = 8, C1 = 3" in ax.get_title()
