"""Torch-style modules over the functional operators: ``npulab.ops.nn.Conv2d(...)(x)``.

Each module holds its parameters as numpy arrays, runs on the simulated NPU when called, and
keeps the Trace of its last call in ``last_trace``. ``Module.from_torch(torch_module)`` copies
a PyTorch module's weights (torch is optional: only that method imports it), which is the flow
the seeds show: build a model in PyTorch, swap its Conv2d + BatchNorm2d + ReLU for one fused
``Conv2d(..., fused=True)``, and get the same outputs.

Parameters are initialised as PyTorch does (uniform in +-1/sqrt(fan_in)), from a seeded
generator so that two runs give the same module.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError

__all__ = ["Module", "Conv2d", "Conv3d", "ConvTranspose2d", "Linear", "MatMul", "BatchMatMul",
           "BatchNorm2d", "LayerNorm", "RMSNorm", "ReLU", "GELU", "SiLU", "Softmax", "MaxPool2d",
           "AvgPool2d", "Sequential", "Conv2D"]


def _ops():
    from .. import ops
    return ops


def _as_numpy(t, dtype) -> np.ndarray | None:
    """A torch tensor (or array, or None) as a numpy array of ``dtype``."""
    if t is None:
        return None
    if hasattr(t, "detach"):
        t = t.detach().cpu().numpy()
    return np.asarray(t, dtype=dtype)


class Module:
    """What every module shares: a chip, a dtype, the trace of the last call."""

    def __init__(self, *, chip="910", dtype=np.float32):
        self.chip = chip
        self.dtype = np.dtype(dtype)
        self.last_trace = None

    def forward(self, x, return_trace):
        raise NotImplementedError

    def __call__(self, x):
        y, self.last_trace = self.forward(np.asarray(x), True)
        return y

    def parameters(self) -> dict[str, np.ndarray]:
        return {k: v for k, v in vars(self).items() if isinstance(v, np.ndarray)}

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}={v.shape}" for k, v in self.parameters().items())
        return f"{type(self).__name__}({shapes}{', ' if shapes else ''}chip={self.chip!r})"


def _uniform(rng, shape, fan_in, dtype):
    bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
    return rng.uniform(-bound, bound, size=shape).astype(dtype)


class _ConvNd(Module):
    nd = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, *, chip="910", dtype=np.float32, seed=0):
        super().__init__(chip=chip, dtype=dtype)
        if in_channels % groups or out_channels % groups:
            raise ShapeError(f"{type(self).__name__}: in_channels ({in_channels}) and out_channels "
                             f"({out_channels}) must both be divisible by groups ({groups})")
        k = (kernel_size,) * self.nd if isinstance(kernel_size, int) else tuple(kernel_size)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, k
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        rng = np.random.default_rng(seed)
        fan_in = in_channels // groups * math.prod(k)
        self.weight = _uniform(rng, (out_channels, in_channels // groups) + k, fan_in, self.dtype)
        self.bias = _uniform(rng, (out_channels,), fan_in, self.dtype) if bias else None

    def _conv(self, x, return_trace):
        fn = _ops().conv2d if self.nd == 2 else _ops().conv3d
        return fn(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups,
                  chip=self.chip, return_trace=return_trace)


class Conv2d(_ConvNd):
    """torch.nn.Conv2d on the cube (img2col). ``fused=True`` adds BatchNorm2d (inference) and
    ReLU in the conv's epilogue: set them with :meth:`set_batch_norm` or :meth:`from_torch`."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, *, fused=False, eps=1e-5, chip="910", dtype=np.float32, seed=0):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                         bias, chip=chip, dtype=dtype, seed=seed)
        self.fused, self.eps = fused, eps
        if fused:           # an identity BN until real statistics are set
            self.set_batch_norm(np.zeros(out_channels), np.ones(out_channels), eps=eps)

    def set_batch_norm(self, running_mean, running_var, weight=None, bias=None, eps=None):
        """The BatchNorm2d (inference) folded into the fused epilogue."""
        c = self.out_channels
        self.running_mean = _as_numpy(running_mean, np.float32).reshape(c)
        self.running_var = _as_numpy(running_var, np.float32).reshape(c)
        self.bn_weight = _as_numpy(weight, np.float32) if weight is not None else np.ones(c, np.float32)
        self.bn_bias = _as_numpy(bias, np.float32) if bias is not None else np.zeros(c, np.float32)
        if eps is not None:
            self.eps = eps

    def forward(self, x, return_trace):
        if not self.fused:
            return self._conv(x, return_trace)
        return _ops().conv2d_bn_relu(x, self.weight, self.bias, self.running_mean, self.running_var,
                                     self.bn_weight, self.bn_bias, self.eps, self.stride,
                                     self.padding, self.dilation, self.groups, chip=self.chip,
                                     return_trace=return_trace)

    @classmethod
    def from_torch(cls, conv, bn=None, relu: bool | None = None, *, chip="910", dtype=np.float32):
        """A Conv2d carrying ``conv``'s weights; with ``bn`` (a torch BatchNorm2d in eval mode)
        a fused Conv+BN+ReLU (``relu`` must then be True: the fused kernel ends in ReLU)."""
        if bn is not None and relu is False:
            raise ShapeError("Conv2d.from_torch: the fused kernel is Conv+BN+ReLU; pass relu=True with bn")
        pad = conv.padding if isinstance(conv.padding, str) else tuple(conv.padding)
        m = cls(conv.in_channels, conv.out_channels, tuple(conv.kernel_size), tuple(conv.stride), pad,
                tuple(conv.dilation), conv.groups, conv.bias is not None, fused=bn is not None,
                chip=chip, dtype=dtype)
        m.weight = _as_numpy(conv.weight, dtype)
        m.bias = _as_numpy(conv.bias, dtype)
        if bn is not None:
            m.set_batch_norm(bn.running_mean, bn.running_var, bn.weight, bn.bias, bn.eps)
        return m


class Conv3d(_ConvNd):
    """torch.nn.Conv3d on the cube."""
    nd = 3

    def forward(self, x, return_trace):
        return self._conv(x, return_trace)


class ConvTranspose2d(Module):
    """torch.nn.ConvTranspose2d (weight: in_channels, out_channels / groups, kH, kW)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0,
                 groups=1, bias=True, dilation=1, *, chip="910", dtype=np.float32, seed=0):
        super().__init__(chip=chip, dtype=dtype)
        k = (kernel_size,) * 2 if isinstance(kernel_size, int) else tuple(kernel_size)
        self.stride, self.padding, self.output_padding = stride, padding, output_padding
        self.groups, self.dilation = groups, dilation
        rng = np.random.default_rng(seed)
        fan_in = out_channels // groups * math.prod(k)
        self.weight = _uniform(rng, (in_channels, out_channels // groups) + k, fan_in, self.dtype)
        self.bias = _uniform(rng, (out_channels,), fan_in, self.dtype) if bias else None

    def forward(self, x, return_trace):
        return _ops().conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                       self.output_padding, self.groups, self.dilation,
                                       chip=self.chip, return_trace=return_trace)


class Linear(Module):
    """torch.nn.Linear: y = x W^T + b on the cube (MatMul with the bias in the epilogue)."""

    def __init__(self, in_features, out_features, bias=True, *, chip="910", dtype=np.float32, seed=0):
        super().__init__(chip=chip, dtype=dtype)
        rng = np.random.default_rng(seed)
        self.weight = _uniform(rng, (out_features, in_features), in_features, self.dtype)
        self.bias = _uniform(rng, (out_features,), in_features, self.dtype) if bias else None

    def forward(self, x, return_trace):
        return _ops().linear(x, self.weight, self.bias, chip=self.chip, return_trace=return_trace)


class MatMul(Module):
    """y = x @ weight (weight: K x N), the MatMul op as a module."""

    def __init__(self, weight, bias=None, *, chip="910"):
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


class BatchNorm2d(Module):
    """torch.nn.BatchNorm2d in eval mode (running statistics)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, *, chip="910", dtype=np.float32):
        super().__init__(chip=chip, dtype=dtype)
        self.eps, self.momentum = eps, momentum
        self.running_mean = np.zeros(num_features, np.float32)
        self.running_var = np.ones(num_features, np.float32)
        self.weight = np.ones(num_features, np.float32) if affine else None
        self.bias = np.zeros(num_features, np.float32) if affine else None

    def forward(self, x, return_trace):
        return _ops().batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                 False, self.momentum, self.eps, chip=self.chip, return_trace=return_trace)


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, *, chip="910", dtype=np.float32):
        super().__init__(chip=chip, dtype=dtype)
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = np.ones(self.normalized_shape, self.dtype) if elementwise_affine else None
        self.bias = np.zeros(self.normalized_shape, self.dtype) if elementwise_affine else None

    def forward(self, x, return_trace):
        return _ops().layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps,
                                 chip=self.chip, return_trace=return_trace)


class RMSNorm(Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, *, chip="910", dtype=np.float32):
        super().__init__(chip=chip, dtype=dtype)
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = np.ones(self.normalized_shape, self.dtype) if elementwise_affine else None

    def forward(self, x, return_trace):
        return _ops().rms_norm(x, self.normalized_shape, self.weight, self.eps, chip=self.chip,
                               return_trace=return_trace)


class ReLU(Module):
    def forward(self, x, return_trace):
        return _ops().relu(x, chip=self.chip, return_trace=return_trace)


class SiLU(Module):
    def forward(self, x, return_trace):
        return _ops().silu(x, chip=self.chip, return_trace=return_trace)


class GELU(Module):
    def __init__(self, approximate="none", *, chip="910"):
        super().__init__(chip=chip)
        self.approximate = approximate

    def forward(self, x, return_trace):
        return _ops().gelu(x, self.approximate, chip=self.chip, return_trace=return_trace)


class Softmax(Module):
    def __init__(self, dim=-1, *, chip="910"):
        super().__init__(chip=chip)
        self.dim = dim

    def forward(self, x, return_trace):
        return _ops().softmax(x, self.dim, chip=self.chip, return_trace=return_trace)


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, *, chip="910"):
        super().__init__(chip=chip)
        self.args = (kernel_size, stride, padding, dilation, ceil_mode)

    def forward(self, x, return_trace):
        return _ops().max_pool2d(x, *self.args, chip=self.chip, return_trace=return_trace)


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 *, chip="910"):
        super().__init__(chip=chip)
        self.args = (kernel_size, stride, padding, ceil_mode, count_include_pad)

    def forward(self, x, return_trace):
        return _ops().avg_pool2d(x, *self.args, chip=self.chip, return_trace=return_trace)


class Sequential(Module):
    """Modules run one after another; ``traces`` holds each one's last Trace."""

    def __init__(self, *modules):
        super().__init__(chip=modules[0].chip if modules else "910")
        self.modules = list(modules)

    def __call__(self, x):
        for m in self.modules:
            x = m(x)
        self.traces = [m.last_trace for m in self.modules]
        return x


def Conv2D(filters, kernel_size, strides=1, padding="valid", use_bias=True, dtype="float32", *,
           in_channels, dilation_rate=1, groups=1, chip="910", seed=0):
    """Keras-style ``Conv2D(filters, kernel_size, strides, padding="same"|"valid", use_bias,
    dtype)``, a thin alias of :class:`Conv2d` (NCHW, so it needs ``in_channels``)."""
    if padding not in ("same", "valid"):
        raise ShapeError(f"Conv2D: padding must be 'same' or 'valid', got {padding!r}")
    return Conv2d(in_channels, filters, kernel_size, strides, 0 if padding == "valid" else "same",
                  dilation_rate, groups, use_bias, chip=chip, dtype=np.dtype(dtype), seed=seed)
