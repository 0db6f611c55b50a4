"""Normalisations (ops-nn's norm family): layer_norm, rms_norm, batch_norm, as in
``torch.nn.functional`` on numpy arrays.

Each registers its op type (LayerNorm, RMSNorm, BatchNorm) with the dispatcher; the functional
op checks its inputs and dispatches. Optional tensors (weight, bias) travel as extra inputs
and ``has_weight`` / ``has_bias`` attributes say which are there.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError
from ..kernels.norm import (batch_norm_tiling, check_float, check_layer_norm, launch_batch_norm,
                            launch_layer_norm, launch_rms_norm, layer_norm_tiling, rms_norm_tiling)
from .registry import dispatch, register


def _optional(arrays, flags):
    """Rebuild [a or None, ...] from the present arrays and has_* flags."""
    it = iter(arrays)
    return [next(it) if f else None for f in flags]


def _finish(out, trace, return_trace):
    return (out, trace) if return_trace else out


# -- LayerNorm -------------------------------------------------------------------------------
def _ln_tiling(specs, chip, normalized_shape=(), eps=1e-5, has_weight=False, has_bias=False):
    x = specs[0]
    w, b = _optional(specs[1:], (has_weight, has_bias))
    cols = check_layer_norm(x.shape, x.dtype, normalized_shape, w, b)
    # gamma / beta broadcast to a whole tile (one FusedMulAdd a tile) when there are any and
    # the tile costs no tile rows (layer_norm_tiling's default)
    return layer_norm_tiling(max(1, math.prod(x.shape) // cols), cols, x.dtype, chip,
                             param_tile=None if (has_weight or has_bias) else False)


def _ln_run(arrays, t, chip, mode, normalized_shape=(), eps=1e-5, has_weight=False, has_bias=False):
    w, b = _optional(arrays[1:], (has_weight, has_bias))
    return launch_layer_norm(arrays[0], w, b, t, eps, chip, mode)


register("LayerNorm", "norm", _ln_tiling, _ln_run,
         "y = (x - mean) / sqrt(var + eps) * weight + bias over the last dims; fp16 (fp32 inside)/fp32")


def _shape_tuple(normalized_shape):
    if isinstance(normalized_shape, (int, np.integer)):
        return (int(normalized_shape),)
    return tuple(int(d) for d in normalized_shape)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5, *, chip="910",
               return_trace: bool = False):
    """``torch.nn.functional.layer_norm`` on the simulated NPU.

    input: (..., *normalized_shape), float16 or float32; weight, bias: normalized_shape, same
    dtype (or None). Statistics over the last ``len(normalized_shape)`` dims, biased variance.
    fp16 is computed in fp32 inside the kernel and rounded once. Returns y (and the trace).
    """
    x = np.asarray(input)
    ns = _shape_tuple(normalized_shape)
    arrays = [x] + [np.asarray(a) for a in (weight, bias) if a is not None]
    y, trace = dispatch("LayerNorm", *arrays, chip=chip, normalized_shape=ns, eps=float(eps),
                        has_weight=weight is not None, has_bias=bias is not None)
    return _finish(y, trace, return_trace)


# -- RMSNorm ---------------------------------------------------------------------------------
def _rms_tiling(specs, chip, normalized_shape=(), eps=1e-6, has_weight=False):
    x = specs[0]
    cols = check_layer_norm(x.shape, x.dtype, normalized_shape, specs[1] if has_weight else None)
    return rms_norm_tiling(max(1, math.prod(x.shape) // cols), cols, x.dtype, chip)


def _rms_run(arrays, t, chip, mode, normalized_shape=(), eps=1e-6, has_weight=False):
    return launch_rms_norm(arrays[0], arrays[1] if has_weight else None, t, eps, chip, mode)


register("RMSNorm", "norm", _rms_tiling, _rms_run,
         "y = x / sqrt(mean(x^2) + eps) * weight over the last dims; fp16 (fp32 inside)/fp32")


def rms_norm(input, normalized_shape, weight=None, eps: float | None = None, *, chip="910",
             return_trace: bool = False):
    """``torch.nn.functional.rms_norm`` on the simulated NPU. ``eps=None`` uses the input dtype's
    machine epsilon, as torch does."""
    x = np.asarray(input)
    ns = _shape_tuple(normalized_shape)
    check_float("rms_norm", "input", x.dtype)
    if eps is None:
        eps = float(np.finfo(x.dtype).eps)
    arrays = [x] + ([np.asarray(weight)] if weight is not None else [])
    try:
        y, trace = dispatch("RMSNorm", *arrays, chip=chip, normalized_shape=ns, eps=float(eps),
                            has_weight=weight is not None)
    except ShapeError as e:
        raise ShapeError(str(e).replace("layer_norm", "rms_norm")) from None
    return _finish(y, trace, return_trace)


# -- BatchNorm (inference) -------------------------------------------------------------------
def _bn_tiling(specs, chip, eps=1e-5, has_weight=False, has_bias=False):
    x = specs[0]
    check_float("batch_norm", "input", x.dtype)
    if len(x.shape) < 2:
        raise ShapeError(f"batch_norm: input must be (N, C, ...) with at least 2 dims, got shape {x.shape}")
    n, c = x.shape[:2]
    for s, name in zip(specs[1:], ["running_mean", "running_var", "weight", "bias"][: len(specs) - 1]):
        if tuple(s.shape) != (c,):
            raise ShapeError(f"batch_norm: {name} has shape {tuple(s.shape)}; expected ({c},) (one value a channel)")
        if s.dtype != x.dtype:
            raise ShapeError(f"batch_norm: {name} is {s.dtype} and the input {x.dtype}; they must match")
    return batch_norm_tiling(n, c, max(1, math.prod(x.shape[2:])), x.dtype, chip)


def _bn_run(arrays, t, chip, mode, eps=1e-5, has_weight=False, has_bias=False):
    x, mean, var = arrays[:3]
    w, b = _optional(arrays[3:], (has_weight, has_bias))
    return launch_batch_norm(x, mean, var, w, b, t, eps, chip, mode)


register("BatchNorm", "norm", _bn_tiling, _bn_run,
         "inference BatchNorm over channel 1: y = (x - mean) / sqrt(var + eps) * weight + bias")


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5, *, chip="910", return_trace: bool = False):
    """``torch.nn.functional.batch_norm`` in inference mode (running statistics), NCHW (any
    (N, C, ...) input). ``training=True`` is not supported: the kernel does inference only."""
    if training:
        raise ShapeError("batch_norm: training=True is not supported; npulab's BatchNorm kernel is "
                         "inference only (it normalises with running_mean and running_var). "
                         "Pass training=False.")
    if running_mean is None or running_var is None:
        raise ShapeError("batch_norm: inference needs running_mean and running_var (got None)")
    x = np.asarray(input)
    arrays = [x, np.asarray(running_mean), np.asarray(running_var)]
    arrays += [np.asarray(a) for a in (weight, bias) if a is not None]
    y, trace = dispatch("BatchNorm", *arrays, chip=chip, eps=float(eps),
                        has_weight=weight is not None, has_bias=bias is not None)
    return _finish(y, trace, return_trace)


__all__ = ["layer_norm", "rms_norm", "batch_norm"]
