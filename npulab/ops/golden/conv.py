"""Goldens of the convolutions: conv2d and conv3d (stride, padding as ints, 'same' or 'valid',
dilation, groups), conv_transpose2d (output_padding) and the fused conv2d_bn_relu, written as
one sum of shifted inputs a kernel tap (no img2col, no zero insertion): independent of how the
kernels compute.

float inputs multiply in float64; int8 in int64, exactly, giving int32, or with ``scale=`` the
dequantised float64 value. ``out_dtype`` only sets the operator's output rounding: the golden
is the value before it. The epilogue order is FixPipe's: bias, scale, ReLU.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..args import int_tuple, positive_int
from .arith import cube_operands, epilogue
from .norm import batch_norm

_ALL = (slice(None),) * 3            # the batch, group and channel axes of a grouped array


def _checked(input, weight, nd: int, what: str):
    x, w, integer = cube_operands(input, weight, what, ("input", "weight"))
    if x.ndim != nd + 2 or w.ndim != nd + 2:
        raise ShapeError(f"{what}: input and weight must be {nd + 2}-D, got shapes {x.shape} and {w.shape}")
    return x, w, integer


def _pads(padding, k, dilation, stride, what) -> tuple:
    """(before, after) per spatial axis; 'same' puts the odd one of d (k - 1) after, as torch."""
    if not isinstance(padding, str):
        return tuple((p, p) for p in int_tuple(padding, len(k), "padding", what, 0))
    if padding == "valid":
        return ((0, 0),) * len(k)
    if padding == "same" and all(s == 1 for s in stride):
        return tuple((d * (kk - 1) // 2, d * (kk - 1) - d * (kk - 1) // 2) for kk, d in zip(k, dilation))
    raise ShapeError(f"{what}: padding must be an int, {len(k)} ints, 'valid' or 'same' (with "
                     f"stride 1), got {padding!r} with stride {stride}")


def _conv(input, weight, bias, stride, padding, dilation, groups, scale, relu, nd, what):
    """conv2d / conv3d: y[n, o] = sum over the taps t and the group's channels c of
    x_padded[n, c, t x dilation + out x stride] w[o, c, t]."""
    x, w, integer = _checked(input, weight, nd, what)
    stride = int_tuple(stride, nd, "stride", what, 1)
    dilation = int_tuple(dilation, nd, "dilation", what, 1)
    (n, cin), (cout, cin_g), k = x.shape[:2], w.shape[:2], w.shape[2:]
    groups = positive_int(groups, "groups", what)
    if cin % groups or cout % groups:
        raise ShapeError(f"{what}: groups={groups} must divide in_channels={cin} and out_channels={cout}")
    if cin_g * groups != cin:
        raise ShapeError(f"{what}: weight {w.shape} expects {cin_g * groups} input channels "
                         f"(weight.shape[1] x groups), the input has {cin}")
    xp = np.pad(x, ((0, 0), (0, 0)) + _pads(padding, k, dilation, stride, what))
    out = tuple((sz - d * (kk - 1) - 1) // s + 1 for sz, kk, d, s in zip(xp.shape[2:], k, dilation, stride))
    if min(out) < 1:
        raise ShapeError(f"{what}: the dilated kernel does not fit the padded input {xp.shape[2:]} "
                         f"(kernel {k}, dilation {dilation}): the output would be {out}")
    xg = xp.reshape((n, groups, cin_g) + xp.shape[2:])
    wg = w.reshape((groups, cout // groups, cin_g) + k)
    y = np.zeros((n, groups, cout // groups) + out, x.dtype)
    for tap in np.ndindex(*k):
        win = xg[_ALL + tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                              for t, d, o, s in zip(tap, dilation, out, stride))]
        y += np.einsum("ngc...,goc->ngo...", win, wg[_ALL + tap])
    return epilogue(y.reshape((n, cout) + out), integer, what, bias, scale, relu, axis=1)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, scale=None,
           out_dtype=None, relu=False):
    """2-D convolution: input (N, Cin, H, W), weight (Cout, Cin / groups, kh, kw), bias (Cout,);
    the value ``ops.conv2d`` approximates."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, scale, relu, 2, "conv2d")


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, scale=None,
           out_dtype=None, relu=False):
    """3-D convolution: input (N, Cin, D, H, W), weight (Cout, Cin / groups, kd, kh, kw); the
    value ``ops.conv3d`` approximates."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, scale, relu, 3, "conv3d")


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1, *, scale=None, out_dtype=None):
    """Transposed 2-D convolution: each input pixel i adds x[i] w[c, o, t] at output position
    i x stride + t x dilation - padding; input (N, Cin, H, W), weight (Cin, Cout / groups, kh,
    kw); output (H - 1) stride - 2 padding + dilation (kh - 1) + output_padding + 1. The value
    ``ops.conv_transpose2d`` approximates."""
    what = "conv_transpose2d"
    x, w, integer = _checked(input, weight, 2, what)
    stride, padding, output_padding, dilation = (
        int_tuple(v, 2, name, what, low) for v, name, low in
        ((stride, "stride", 1), (padding, "padding", 0), (output_padding, "output_padding", 0),
         (dilation, "dilation", 1)))
    (n, cin), (cin_w, cout_g), k = x.shape[:2], w.shape[:2], w.shape[2:]
    if cin_w != cin:
        raise ShapeError(f"{what}: weight {w.shape} has {cin_w} input channels (axis 0), the input has {cin}")
    groups = positive_int(groups, "groups", what)
    if cin % groups:
        raise ShapeError(f"{what}: groups={groups} must divide in_channels={cin}")
    if any(op >= max(s, d) for op, s, d in zip(output_padding, stride, dilation)):
        raise ShapeError(f"{what}: output_padding {output_padding} must be smaller than stride "
                         f"or dilation ({stride}, {dilation}), as in torch")
    span = tuple((sz - 1) * s + d * (kk - 1) + 1 for sz, s, d, kk in zip(x.shape[2:], stride, dilation, k))
    out = tuple(sp - 2 * p + op for sp, p, op in zip(span, padding, output_padding))
    if min(out) < 1:
        raise ShapeError(f"{what}: the output would be {out} for input {x.shape} and weight {w.shape}; "
                         f"lower the padding")
    cin_g = cin // groups
    xg = x.reshape((n, groups, cin_g) + x.shape[2:])
    wg = w.reshape((groups, cin_g, cout_g) + k)
    full = np.zeros((n, groups, cout_g) + tuple(sp + op for sp, op in zip(span, output_padding)), x.dtype)
    for tap in np.ndindex(*k):
        dst = tuple(slice(t * d, t * d + (sz - 1) * s + 1, s)
                    for t, d, sz, s in zip(tap, dilation, x.shape[2:], stride))
        full[_ALL + dst] += np.einsum("ngc...,gco->ngo...", xg, wg[_ALL + tap])
    y = full[_ALL + tuple(slice(p, p + o) for p, o in zip(padding, out))]
    return epilogue(y.reshape((n, groups * cout_g) + out), integer, what, bias, scale, axis=1)


def conv2d_bn_relu(input, weight, bias=None, running_mean=None, running_var=None, bn_weight=None,
                   bn_bias=None, eps=1e-5, stride=1, padding=0, dilation=1, groups=1, *, relu=True):
    """relu(batch_norm(conv2d(input, weight, bias, ...), running_mean, running_var, bn_weight,
    bn_bias, eps=eps)), without the ReLU when ``relu=False``: the value ``ops.conv2d_bn_relu``
    approximates (the operator folds BN into FixPipe's per-channel scale gamma / sqrt(var + eps)
    and offset beta - mean x scale, the same value). float16 or float32 inputs, as the operator."""
    if np.asarray(input).dtype.kind in "iu":
        raise ShapeError("conv2d_bn_relu: takes float16 or float32 inputs (the operator refuses int8: "
                         "fold BN into the dequant scale)")
    y = conv2d(input, weight, bias, stride, padding, dilation, groups)
    y = batch_norm(y, running_mean, running_var, bn_weight, bn_bias, False, 0.1, eps)
    return np.maximum(y, 0.0) if relu else y
