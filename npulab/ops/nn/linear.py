"""The cube's matrix modules: :class:`Linear` (torch.nn.Linear), and :class:`MatMul` and
:class:`BatchMatMul`, the MatMul ops as modules (they have no torch twin)."""
from __future__ import annotations

import numpy as np

from ...arch import DEFAULT_CHIP
from ..args import positive_int
from .module import Module, _bias_dtype, _ops, _uniform
from .torch_twin import _copy_weights


class Linear(Module):
    """torch.nn.Linear: y = x W^T + b on the cube (MatMul with the bias in the epilogue)."""

    def __init__(self, in_features, out_features, bias=True, *, chip=DEFAULT_CHIP, dtype=np.float32, seed=0):
        super().__init__(chip=chip, dtype=dtype)
        self.in_features = positive_int(in_features, "in_features", "Linear")
        self.out_features = positive_int(out_features, "out_features", "Linear")
        rng = np.random.default_rng(seed)
        self.weight = _uniform(rng, (out_features, in_features), in_features, self.dtype)
        self.bias = _uniform(rng, (out_features,), in_features, _bias_dtype(self.dtype)) if bias else None

    def forward(self, x, return_trace):
        return _ops().linear(x, self.weight, self.bias, chip=self.chip, return_trace=return_trace)

    @classmethod
    def _from_torch(cls, lin, chip, dtype):
        m = cls(lin.in_features, lin.out_features, lin.bias is not None, chip=chip, dtype=dtype)
        _copy_weights(m, lin, ("weight", "bias"), "Linear")
        return m


class MatMul(Module):
    """y = x @ weight (weight: K x N), the MatMul op as a module (no torch twin: a torch.nn.Linear
    goes to :class:`Linear`)."""

    def __init__(self, weight, bias=None, *, chip=DEFAULT_CHIP):
        weight = np.asarray(weight)
        super().__init__(chip=chip, dtype=weight.dtype)
        self.weight, self.bias = weight, None if bias is None else np.asarray(bias)

    def forward(self, x, return_trace):
        return _ops().matmul(x, self.weight, bias=self.bias, chip=self.chip, return_trace=return_trace)


class BatchMatMul(Module):
    """Called on a pair: ``BatchMatMul()((a, b))`` = a @ b over the leading dimensions."""

    def __call__(self, pair):
        a, b = pair
        y, self.last_trace = _ops().batch_matmul(a, b, chip=self.chip, return_trace=True)
        return y
