"""Normalisations (ops-nn's norm family): layer_norm, rms_norm, batch_norm, as in
``torch.nn.functional`` on numpy arrays.

Each registers its op type (LayerNorm, RMSNorm, BatchNorm) with the dispatcher; the functional
op checks its inputs and dispatches. Optional tensors (weight, bias) travel as extra inputs
and ``has_weight`` / ``has_bias`` attributes say which are there.

Empty inputs: an empty batch (or BatchNorm's empty channel or spatial axes) gives an empty
output, as torch does; a normalized_shape with no elements (nothing to normalise over) is an
error.
"""
from __future__ import annotations

import math

import numpy as np

from ..arch import DEFAULT_CHIP
from ..errors import ShapeError
from ..kernels.norm import (batch_norm_tiling, check_layer_norm, launch_batch_norm, launch_layer_norm,
                            launch_rms_norm, layer_norm_tiling, rms_norm_tiling)
from ..kernels.vector_base import check_float
from .registry import TensorSpec, dispatch, register


def _optional(arrays, flags, what="norm"):
    """Rebuild [a or None, ...] from the present arrays and has_* flags."""
    if len(arrays) != sum(bool(f) for f in flags):
        raise ShapeError(f"{what}: {len(arrays)} optional arrays (weight, bias) were passed and the "
                         f"has_weight / has_bias attributes announce {sum(bool(f) for f in flags)}")
    it = iter(arrays)
    return [next(it) if f else None for f in flags]


def _finish(out, trace, return_trace):
    return (out, trace) if return_trace else out


def _check_rows(specs, normalized_shape, flags, what) -> int:
    """Validate a LayerNorm / RMSNorm call (x, then the optional weight, bias); returns the
    number of values a row normalises (>= 1)."""
    x = specs[0]
    cols = check_layer_norm(x.shape, x.dtype, normalized_shape, *_optional(specs[1:], flags, what))
    if cols == 0:
        raise ShapeError(f"{what}: normalized_shape {tuple(normalized_shape)} has no elements; "
                         f"the statistics need at least one value a row")
    return cols


def _same_as_input(check):
    """Shape inference of a norm: the input's spec, once ``check`` passes."""
    def infer(specs, chip, **attrs):
        check(specs, **attrs)
        return TensorSpec(specs[0].shape, specs[0].dtype)
    return infer


# -- LayerNorm -------------------------------------------------------------------------------
def _ln_check(specs, normalized_shape=(), eps=1e-5, has_weight=False, has_bias=False):
    return _check_rows(specs, normalized_shape, (has_weight, has_bias), "layer_norm")


def _ln_tiling(specs, chip, normalized_shape=(), eps=1e-5, has_weight=False, has_bias=False):
    x = specs[0]
    cols = _ln_check(specs, normalized_shape, eps, has_weight, has_bias)
    # gamma / beta broadcast to a whole tile (one FusedMulAdd a tile) when there are any and
    # the tile costs no tile rows (layer_norm_tiling's default)
    return layer_norm_tiling(max(1, math.prod(x.shape) // cols), cols, x.dtype, chip,
                             param_tile=None if (has_weight or has_bias) else False)


def _ln_run(arrays, t, chip, mode, normalized_shape=(), eps=1e-5, has_weight=False, has_bias=False):
    w, b = _optional(arrays[1:], (has_weight, has_bias))
    return launch_layer_norm(arrays[0], w, b, t, eps, chip, mode)


register("LayerNorm", "norm", _ln_tiling, _ln_run,
         "y = (x - mean) / sqrt(var + eps) * weight + bias over the last dims; fp16 (fp32 inside)/fp32",
         inputs=("x", "weight?", "bias?"), infer=_same_as_input(_ln_check))


def _shape_tuple(normalized_shape):
    if isinstance(normalized_shape, (int, np.integer)):
        return (int(normalized_shape),)
    return tuple(int(d) for d in normalized_shape)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5, *, chip=DEFAULT_CHIP,
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
def _rms_check(specs, normalized_shape=(), eps=1e-6, has_weight=False):
    return _check_rows(specs, normalized_shape, (has_weight,), "rms_norm")


def _rms_tiling(specs, chip, normalized_shape=(), eps=1e-6, has_weight=False):
    x = specs[0]
    cols = _rms_check(specs, normalized_shape, eps, has_weight)
    return rms_norm_tiling(max(1, math.prod(x.shape) // cols), cols, x.dtype, chip)


def _rms_run(arrays, t, chip, mode, normalized_shape=(), eps=1e-6, has_weight=False):
    return launch_rms_norm(arrays[0], arrays[1] if has_weight else None, t, eps, chip, mode)


register("RMSNorm", "norm", _rms_tiling, _rms_run,
         "y = x / sqrt(mean(x^2) + eps) * weight over the last dims; fp16 (fp32 inside)/fp32",
         inputs=("x", "weight?"), infer=_same_as_input(_rms_check))


def rms_norm(input, normalized_shape, weight=None, eps: float | None = None, *, chip=DEFAULT_CHIP,
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
def _bn_check(specs, eps=1e-5, has_weight=False, has_bias=False):
    x = specs[0]
    check_float("batch_norm", "input", x.dtype)
    if len(x.shape) < 2:
        raise ShapeError(f"batch_norm: input must be (N, C, ...) with at least 2 dims, got shape {x.shape}")
    c = x.shape[1]
    names = ["running_mean", "running_var"] + ["weight"] * bool(has_weight) + ["bias"] * bool(has_bias)
    if len(specs) - 1 != len(names):
        raise ShapeError(f"batch_norm: got {len(specs) - 1} vectors after the input, expected "
                         f"{len(names)} ({', '.join(names)})")
    for s, name in zip(specs[1:], names):
        if tuple(s.shape) != (c,):
            raise ShapeError(f"batch_norm: {name} has shape {tuple(s.shape)}; expected ({c},) (one value a channel)")
        if s.dtype != x.dtype:
            raise ShapeError(f"batch_norm: {name} is {s.dtype} and the input {x.dtype}; they must match")


def _bn_tiling(specs, chip, eps=1e-5, has_weight=False, has_bias=False):
    x = specs[0]
    _bn_check(specs, eps, has_weight, has_bias)
    n, c = x.shape[:2]
    return batch_norm_tiling(n, c, max(1, math.prod(x.shape[2:])), x.dtype, chip)


def _bn_run(arrays, t, chip, mode, eps=1e-5, has_weight=False, has_bias=False):
    x, mean, var = arrays[:3]
    w, b = _optional(arrays[3:], (has_weight, has_bias))
    return launch_batch_norm(x, mean, var, w, b, t, eps, chip, mode)


register("BatchNorm", "norm", _bn_tiling, _bn_run,
         "inference BatchNorm over channel 1: y = (x - mean) / sqrt(var + eps) * weight + bias",
         inputs=("x", "running_mean", "running_var", "weight?", "bias?"), infer=_same_as_input(_bn_check))


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5, *, chip=DEFAULT_CHIP, return_trace: bool = False):
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
