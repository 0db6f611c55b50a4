"""The Keras-style alias: :func:`Conv2D` (filters, kernel_size, strides, padding "same" or
"valid", use_bias, dtype) builds a :class:`~npulab.ops.nn.Conv2d`."""
from __future__ import annotations

import numpy as np

from ...arch import DEFAULT_CHIP
from ...errors import ShapeError
from .conv import Conv2d


def Conv2D(filters, kernel_size, strides=1, padding="valid", use_bias=True, dtype="float32", *,
           in_channels, dilation_rate=1, groups=1, chip=DEFAULT_CHIP, seed=0):
    """Keras-style ``Conv2D(filters, kernel_size, strides, padding="same"|"valid", use_bias,
    dtype)``, a thin alias of :class:`Conv2d` (NCHW, so it needs ``in_channels``)."""
    if padding not in ("same", "valid"):
        raise ShapeError(f"Conv2D: padding must be 'same' or 'valid', got {padding!r}")
    return Conv2d(in_channels, filters, kernel_size, strides, 0 if padding == "valid" else "same",
                  dilation_rate, groups, use_bias, chip=chip, dtype=np.dtype(dtype), seed=seed)
