"""Goldens of the normalisations: layer_norm and rms_norm over the last dims, batch_norm
(inference: running statistics) over channel axis 1, each with its optional affine weight and
bias; statistics in float64 (biased variance, as torch)."""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..args import is_int
from .arith import as_float64, result


def _param(v, shape: tuple, name: str, what: str, view=None) -> np.ndarray:
    """A statistic or affine parameter of ``shape``, in float64 and reshaped to ``view``."""
    v = as_float64(v)
    if v.shape != tuple(shape):
        raise ShapeError(f"{what}: {name} has shape {v.shape}; expected {tuple(shape)}")
    return v if view is None else v.reshape(view)


def _rows(x: np.ndarray, normalized_shape, what: str):
    """The axes a row normalises over (the last ``len(normalized_shape)``) and the shape."""
    ns = (normalized_shape,) if is_int(normalized_shape) else tuple(normalized_shape)
    ns = tuple(int(d) for d in ns)
    if len(ns) > x.ndim or x.shape[x.ndim - len(ns):] != ns:
        raise ShapeError(f"{what}: input {x.shape} must end in normalized_shape {ns}")
    if not ns or 0 in ns:
        raise ShapeError(f"{what}: normalized_shape {ns} has no elements; the statistics need at "
                         f"least one value a row")
    return tuple(range(x.ndim - len(ns), x.ndim)), ns


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dims; the value
    ``ops.layer_norm`` approximates."""
    x = as_float64(input)
    axes, ns = _rows(x, normalized_shape, "layer_norm")
    d = x - x.mean(axis=axes, keepdims=True)
    y = d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + eps)
    if weight is not None:
        y = y * _param(weight, ns, "weight", "layer_norm")
    if bias is not None:
        y = y + _param(bias, ns, "bias", "layer_norm")
    return result(y)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2) + eps) * weight over the last dims (``eps=None``: the input dtype's
    machine epsilon, as torch and the operator take it); the value ``ops.rms_norm``
    approximates."""
    x = np.asarray(input)
    if eps is None:
        if x.dtype.kind != "f":
            raise ShapeError(f"rms_norm: eps=None is the input dtype's machine epsilon, and a "
                             f"{x.dtype} input has none; pass eps")
        eps = float(np.finfo(x.dtype).eps)
    x = as_float64(x)
    axes, ns = _rows(x, normalized_shape, "rms_norm")
    y = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    if weight is not None:
        y = y * _param(weight, ns, "weight", "rms_norm")
    return result(y)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """(x - running_mean) / sqrt(running_var + eps) * weight + bias per channel (axis 1 of an
    (N, C, ...) input); the value ``ops.batch_norm`` approximates. As the operator,
    inference only: ``training=True`` (batch statistics; ``momentum`` only updates them) is
    refused."""
    if training:
        raise ShapeError("batch_norm: training=True is not supported (the operator is inference "
                         "only: it normalises with running_mean and running_var); pass training=False")
    if running_mean is None or running_var is None:
        raise ShapeError("batch_norm: inference needs running_mean and running_var (got None)")
    x = as_float64(input)
    if x.ndim < 2:
        raise ShapeError(f"batch_norm: input must be (N, C, ...) with at least 2 dims, got shape {x.shape}")
    c = x.shape[1]
    view = (1, c) + (1,) * (x.ndim - 2)
    mean, var = (_param(v, (c,), name, "batch_norm", view) for v, name in
                 ((running_mean, "running_mean"), (running_var, "running_var")))
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * _param(weight, (c,), "weight", "batch_norm", view)
    if bias is not None:
        y = y + _param(bias, (c,), "bias", "batch_norm", view)
    return result(y)
