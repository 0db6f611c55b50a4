"""2-D pooling (ops-nn's pooling family) as in ``torch.nn.functional``, NCHW numpy arrays:
max_pool2d, avg_pool2d, and the fused avg_pool2d_scale (average pool times a scale, one kernel).

Op types: MaxPool, AvgPool (attribute ``scale`` = 1), AvgPoolScale (the fused kernel).

As in torch, kernel_size, stride, padding and dilation are each an int or a pair of ints
(:func:`~npulab.ops.args.int_tuple`), and an empty batch (N = 0) gives an empty output.
"""
from __future__ import annotations

import numpy as np

from ..arch import DEFAULT_CHIP
from ..errors import ShapeError
from ..kernels.pooling import launch_pool, pool_tiling
from .args import int_tuple
from .registry import TensorSpec, batch_of_one, dispatch, register


def _pool(mode):
    def tiling(specs, chip, kernel_size=1, stride=None, padding=0, dilation=1, ceil_mode=False,
               count_include_pad=True, scale=1.0):
        (x,) = specs
        return pool_tiling(mode, x.shape, x.dtype, kernel_size, stride, padding, dilation, ceil_mode,
                           count_include_pad, scale, chip)

    def infer(specs, chip, **attrs):              # the tiling of one image validates the call
        (x,) = specs
        t = tiling([TensorSpec(batch_of_one(x.shape), x.dtype)], chip, **attrs)
        return TensorSpec((x.shape[0], t.c, t.oh, t.ow), x.dtype)
    return dict(tiling=tiling, run=_run, inputs=("x",), infer=infer)


def _run(arrays, t, chip, mode, **attrs):
    return launch_pool(arrays[0], t, chip, mode)


register("MaxPool", "pooling", summary="2-D max pooling, NCHW, padding/stride/dilation/ceil_mode", **_pool("max"))
register("AvgPool", "pooling", summary="2-D average pooling, NCHW, count_include_pad/ceil_mode", **_pool("avg"))
register("AvgPoolScale", "pooling", summary="fused 2-D average pooling x scale: the pooled plane never goes to GM",
         **_pool("avg"))


def pool_window(what, kernel_size, stride, padding, dilation=1) -> dict:
    """The window attributes as pairs of ints (stride None: the kernel size, as in torch)."""
    no_stride = stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0)
    return dict(kernel_size=int_tuple(kernel_size, 2, "kernel_size", what, 1),
                stride=None if no_stride else int_tuple(stride, 2, "stride", what, 1),
                padding=int_tuple(padding, 2, "padding", what, 0),
                dilation=int_tuple(dilation, 2, "dilation", what, 1))


def _out(y, trace, return_trace):
    return (y, trace) if return_trace else y


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``torch.nn.functional.max_pool2d`` on an (N, C, H, W) array; padding counts as -inf.
    ``return_indices`` is not supported."""
    if return_indices:
        raise ShapeError("max_pool2d: return_indices=True is not supported by npulab's MaxPool kernel")
    y, trace = dispatch("MaxPool", np.asarray(input), chip=chip,
                        **pool_window("max_pool2d", kernel_size, stride, padding, dilation), ceil_mode=bool(ceil_mode))
    return _out(y, trace, return_trace)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override=None, *, chip=DEFAULT_CHIP,
               return_trace: bool = False):
    """``torch.nn.functional.avg_pool2d`` on an (N, C, H, W) array (``divisor_override`` is not
    supported)."""
    if divisor_override is not None:
        raise ShapeError("avg_pool2d: divisor_override is not supported by npulab's AvgPool kernel")
    y, trace = dispatch("AvgPool", np.asarray(input), chip=chip,
                        **pool_window("avg_pool2d", kernel_size, stride, padding),
                        ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad))
    return _out(y, trace, return_trace)


def avg_pool2d_scale(input, kernel_size, scale: float, stride=None, padding=0, ceil_mode: bool = False,
                     count_include_pad: bool = True, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """Fused ``avg_pool2d(input, ...) * scale`` in one kernel: the scale is folded into the
    divisor, so the pooled plane is never written to GM and no extra pass is paid."""
    try:
        scale = float(scale)
    except (TypeError, ValueError):
        raise ShapeError(f"avg_pool2d_scale: scale must be a number, got {scale!r}") from None
    y, trace = dispatch("AvgPoolScale", np.asarray(input), chip=chip,
                        **pool_window("avg_pool2d_scale", kernel_size, stride, padding), ceil_mode=bool(ceil_mode),
                        count_include_pad=bool(count_include_pad), scale=scale)
    return _out(y, trace, return_trace)


__all__ = ["max_pool2d", "avg_pool2d", "avg_pool2d_scale"]
