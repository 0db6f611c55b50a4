"""The normalisation modules: :class:`BatchNorm2d` (eval mode), :class:`LayerNorm` and
:class:`RMSNorm`, over ``npulab.ops.batch_norm``, ``layer_norm`` and ``rms_norm``."""
from __future__ import annotations

import numpy as np

from ...arch import DEFAULT_CHIP
from ...errors import ShapeError
from ..args import int_tuple, positive_int
from .module import Module, _ops
from .torch_twin import _check_batch_norm, _copy_weights


class BatchNorm2d(Module):
    """torch.nn.BatchNorm2d in eval mode (running statistics, which follow the module's dtype,
    as do weight and bias; ``bias=False``: weight only, as torch's keyword)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, *,
                 bias=True, chip=DEFAULT_CHIP, dtype=np.float32):
        super().__init__(chip=chip, dtype=dtype)
        c = positive_int(num_features, "num_features", "BatchNorm2d")
        if not track_running_stats:
            raise ShapeError("BatchNorm2d: track_running_stats=False is not supported; npulab's "
                             "BatchNorm is inference only and normalises with running statistics")
        self.num_features, self.eps, self.momentum = c, eps, momentum
        self.running_mean = np.zeros(c, self.dtype)
        self.running_var = np.ones(c, self.dtype)
        self.weight = np.ones(c, self.dtype) if affine else None
        self.bias = np.zeros(c, self.dtype) if affine and bias else None

    def forward(self, x, return_trace):
        return _ops().batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                 False, self.momentum, self.eps, chip=self.chip, return_trace=return_trace)

    @classmethod
    def _from_torch(cls, bn, chip, dtype):
        _check_batch_norm(bn, "BatchNorm2d")
        m = cls(bn.num_features, bn.eps, bn.momentum, bn.affine, bias=bn.bias is not None, chip=chip,
                dtype=dtype)
        _copy_weights(m, bn, ("running_mean", "running_var", "weight", "bias"), "BatchNorm2d")
        return m


def _shape(normalized_shape, who) -> tuple:
    """normalized_shape (an int or a non-empty tuple of positive ints) as a tuple."""
    n = len(normalized_shape) if isinstance(normalized_shape, (tuple, list)) else 1
    if n == 0:
        raise ShapeError(f"{who}: normalized_shape must have at least one dim, got {normalized_shape!r}")
    return int_tuple(normalized_shape, n, "normalized_shape", who, 1)


class LayerNorm(Module):
    """torch.nn.LayerNorm over the last ``len(normalized_shape)`` dims (``bias=False``: weight only)."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, *, chip=DEFAULT_CHIP,
                 dtype=np.float32):
        super().__init__(chip=chip, dtype=dtype)
        self.normalized_shape = _shape(normalized_shape, "LayerNorm")
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight = np.ones(self.normalized_shape, self.dtype) if elementwise_affine else None
        self.bias = np.zeros(self.normalized_shape, self.dtype) if elementwise_affine and bias else None

    def forward(self, x, return_trace):
        return _ops().layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps,
                                 chip=self.chip, return_trace=return_trace)

    @classmethod
    def _from_torch(cls, ln, chip, dtype):
        m = cls(tuple(ln.normalized_shape), ln.eps, ln.elementwise_affine, ln.bias is not None,
                chip=chip, dtype=dtype)
        _copy_weights(m, ln, ("weight", "bias"), "LayerNorm")
        return m


class RMSNorm(Module):
    """torch.nn.RMSNorm (``eps=None``: the input dtype's machine epsilon, as torch)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, *, chip=DEFAULT_CHIP, dtype=np.float32):
        super().__init__(chip=chip, dtype=dtype)
        self.normalized_shape = _shape(normalized_shape, "RMSNorm")
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight = np.ones(self.normalized_shape, self.dtype) if elementwise_affine else None

    def forward(self, x, return_trace):
        return _ops().rms_norm(x, self.normalized_shape, self.weight, self.eps, chip=self.chip,
                               return_trace=return_trace)

    @classmethod
    def _from_torch(cls, rms, chip, dtype):
        m = cls(tuple(rms.normalized_shape), rms.eps, rms.elementwise_affine, chip=chip, dtype=dtype)
        _copy_weights(m, rms, ("weight",), "RMSNorm")
        return m
