"""The convolution modules: :class:`Conv2d` (with the fused Conv + BatchNorm + ReLU variant),
:class:`Conv3d` and :class:`ConvTranspose2d`, over ``npulab.ops.conv2d`` and its kin, with
torch's arguments in torch's order and torch's weight layout and fan_in."""
from __future__ import annotations

import math

import numpy as np

from ...arch import DEFAULT_CHIP
from ...errors import ShapeError
from ..args import int_tuple, positive_int
from .module import Module, _bias_dtype, _ops, _uniform
from .torch_twin import _as_numpy, _check_batch_norm, _copy_weights, _expect_torch


def _check_padding_mode(padding_mode, who: str) -> None:
    if padding_mode != "zeros":
        raise ShapeError(f"{who}: padding_mode={padding_mode!r} is not supported; npulab's convs pad "
                         f"with zeros only (supported: 'zeros'). Pad the input first (numpy.pad with "
                         f"mode 'reflect', 'edge' or 'wrap' for reflect, replicate, circular) and use "
                         f"padding=0")


class _Conv(Module):
    """The parameters every conv module shares: channels, kernel, groups, weight and bias."""
    nd = 2
    transposed = False

    def _init_weights(self, in_channels, out_channels, kernel_size, groups, bias, padding_mode, seed):
        who = type(self).__name__
        cin = positive_int(in_channels, "in_channels", who)
        cout = positive_int(out_channels, "out_channels", who)
        groups = positive_int(groups, "groups", who)
        for name, c in (("in_channels", cin), ("out_channels", cout)):
            if c % groups:
                raise ShapeError(f"{who}: {name} ({c}) must be divisible by groups ({groups}), as in "
                                 f"torch: each group takes {name} / groups channels")
        _check_padding_mode(padding_mode, who)
        k = int_tuple(kernel_size, self.nd, "kernel_size", who, 1)
        self.in_channels, self.out_channels, self.kernel_size, self.groups = cin, cout, k, groups
        self.padding_mode = padding_mode
        # torch's fan_in is weight.shape[1] x the kernel's taps (out_channels / groups when transposed)
        shape = (cin, cout // groups) + k if self.transposed else (cout, cin // groups) + k
        fan_in = shape[1] * math.prod(k)
        rng = np.random.default_rng(seed)
        self.weight = _uniform(rng, shape, fan_in, self.dtype)
        self.bias = _uniform(rng, (cout,), fan_in, _bias_dtype(self.dtype)) if bias else None

    @classmethod
    def _from_torch(cls, conv, chip, dtype, **extra):
        _check_padding_mode(conv.padding_mode, f"{cls.__name__}.from_torch")
        pad = conv.padding if isinstance(conv.padding, str) else tuple(conv.padding)
        if cls.transposed:
            extra["output_padding"] = tuple(conv.output_padding)
        m = cls(conv.in_channels, conv.out_channels, tuple(conv.kernel_size), stride=tuple(conv.stride),
                padding=pad, dilation=tuple(conv.dilation), groups=conv.groups, bias=conv.bias is not None,
                padding_mode=conv.padding_mode, chip=chip, dtype=dtype, **extra)
        _copy_weights(m, conv, ("weight", "bias"), cls.__name__)
        return m


class _ConvNd(_Conv):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", *, relu=False, chip=DEFAULT_CHIP,
                 dtype=np.float32, seed=0):
        super().__init__(chip=chip, dtype=dtype)
        self._init_weights(in_channels, out_channels, kernel_size, groups, bias, padding_mode, seed)
        self.stride, self.padding, self.dilation = stride, padding, dilation
        self.relu = bool(relu)

    def _conv(self, x, return_trace):
        fn = _ops().conv2d if self.nd == 2 else _ops().conv3d
        return fn(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups,
                  relu=self.relu, chip=self.chip, return_trace=return_trace)


class Conv2d(_ConvNd):
    """torch.nn.Conv2d on the cube (img2col). ``relu=True`` applies ReLU in the conv's
    epilogue. ``fused=True`` adds BatchNorm2d (inference) there too, followed by ReLU unless
    ``relu=False``: set the statistics with :meth:`set_batch_norm` or :meth:`from_torch`."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", *, fused=False, relu=None, eps=1e-5,
                 chip=DEFAULT_CHIP, dtype=np.float32, seed=0):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                         bias, padding_mode, relu=fused if relu is None else relu, chip=chip,
                         dtype=dtype, seed=seed)
        self.fused, self.eps = fused, eps
        if fused:           # an identity BN until real statistics are set
            self.set_batch_norm(np.zeros(out_channels), np.ones(out_channels), eps=eps)

    def set_batch_norm(self, running_mean, running_var, weight=None, bias=None, eps=None):
        """The BatchNorm2d (inference) folded into the fused epilogue: one value a channel each."""
        c = self.out_channels

        def vector(v, name, default):
            v = np.full(c, default, np.float32) if v is None else _as_numpy(v, np.float32)
            if v.shape != (c,):
                raise ShapeError(f"Conv2d.set_batch_norm: {name} has shape {v.shape}; expected ({c},) "
                                 f"(one value per output channel of the conv)")
            return v
        self.running_mean = vector(running_mean, "running_mean", 0.0)
        self.running_var = vector(running_var, "running_var", 1.0)
        self.bn_weight = vector(weight, "weight", 1.0)
        self.bn_bias = vector(bias, "bias", 0.0)
        if eps is not None:
            self.eps = eps

    def forward(self, x, return_trace):
        if not self.fused:
            return self._conv(x, return_trace)
        return _ops().conv2d_bn_relu(x, self.weight, self.bias, self.running_mean, self.running_var,
                                     self.bn_weight, self.bn_bias, self.eps, self.stride,
                                     self.padding, self.dilation, self.groups, relu=self.relu,
                                     chip=self.chip, return_trace=return_trace)

    @classmethod
    def from_torch(cls, conv, bn=None, relu: bool | None = None, *, chip=DEFAULT_CHIP, dtype=np.float32):
        """A Conv2d carrying ``conv``'s weights (a torch.nn.Conv2d). With ``bn`` (a torch
        BatchNorm2d with running statistics, applied with eval-mode semantics) a fused Conv+BN,
        followed by ReLU unless ``relu=False``; without ``bn``, ``relu=True`` applies ReLU in
        the conv's epilogue: relu(conv(x)) in one kernel."""
        _expect_torch(conv, "Conv2d")
        relu = bn is not None if relu is None else bool(relu)
        if bn is not None:
            _check_batch_norm(bn, "Conv2d", channels=conv.out_channels)
        m = cls._from_torch(conv, chip, np.dtype(dtype), fused=bn is not None, relu=relu)
        if bn is not None:
            m.set_batch_norm(bn.running_mean, bn.running_var, bn.weight, bn.bias, bn.eps)
        return m


class Conv3d(_ConvNd):
    """torch.nn.Conv3d on the cube (``relu=True``: ReLU in the epilogue)."""
    nd = 3

    def forward(self, x, return_trace):
        return self._conv(x, return_trace)


class ConvTranspose2d(_Conv):
    """torch.nn.ConvTranspose2d (weight: in_channels, out_channels / groups, kH, kW)."""
    transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0,
                 groups=1, bias=True, dilation=1, padding_mode="zeros", *, chip=DEFAULT_CHIP, dtype=np.float32,
                 seed=0):
        super().__init__(chip=chip, dtype=dtype)
        self._init_weights(in_channels, out_channels, kernel_size, groups, bias, padding_mode, seed)
        self.stride, self.padding, self.output_padding = stride, padding, output_padding
        self.dilation = dilation

    def forward(self, x, return_trace):
        return _ops().conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                       self.output_padding, self.groups, self.dilation,
                                       chip=self.chip, return_trace=return_trace)
