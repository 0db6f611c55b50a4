"""Torch-style modules over the functional operators: ``npulab.ops.nn.Conv2d(...)(x)``.

Each module holds its parameters as numpy arrays, runs on the simulated NPU when called, and
keeps the Trace of its last call in ``last_trace``. Every module whose class torch.nn also has
(Conv2d, Conv3d, ConvTranspose2d, Linear, BatchNorm2d, LayerNorm, RMSNorm, ReLU, GELU, SiLU,
Softmax, MaxPool2d, AvgPool2d, Sequential) builds from its torch twin with
``Module.from_torch(torch_module)``, which takes the twin's attributes and copies its weights
(torch is optional: only that method imports it). That is the flow the seeds show: build a
model in PyTorch, swap its Conv2d + BatchNorm2d + ReLU for one fused
``Conv2d.from_torch(conv, bn, relu=True)``, and get the same outputs.

Constructors take torch's arguments in torch's order. Parameters are initialised as PyTorch
does (uniform in +-1/sqrt(fan_in)), from a seeded generator so that two runs give the same
module. An int8 module gets the same draw scaled to the int8 range and rounded,
round(u / bound * 127), so its weights spread over -127..127 (a symmetric quantisation of the
float draw with scale bound / 127); its bias, added in the int32 accumulator, is the same
scaled draw as int32.
"""
from __future__ import annotations

import math

import numpy as np

from ..arch import DEFAULT_CHIP
from ..errors import ShapeError
from .activation import check_approximate
from .args import int_tuple, positive_int
from .pooling import pool_window

__all__ = ["Module", "Conv2d", "Conv3d", "ConvTranspose2d", "Linear", "MatMul", "BatchMatMul",
           "BatchNorm2d", "LayerNorm", "RMSNorm", "ReLU", "GELU", "SiLU", "Softmax", "MaxPool2d",
           "AvgPool2d", "Sequential", "Conv2D"]

INT8_MAX = 127              # an int8 module's weights: the float draw scaled to +-INT8_MAX


def _ops():
    from .. import ops
    return ops


def _as_numpy(t, dtype) -> np.ndarray | None:
    """A torch tensor (or array, or None) as a numpy array of ``dtype``, copied: a module never
    shares memory with the tensor it came from."""
    if t is None:
        return None
    if hasattr(t, "detach"):
        t = t.detach().cpu().numpy()
    return np.array(t, dtype=dtype)


def _expect_torch(module, who: str) -> None:
    """``module`` must be an instance of torch.nn.<who>; the error names what came instead and,
    when npulab has a module of that name, which from_torch takes it."""
    import torch
    twin = getattr(torch.nn, who, None)
    if twin is None:
        raise ShapeError(f"{who}.from_torch: torch.nn has no {who}, so there is nothing to copy "
                         f"from (a torch.nn.Linear goes to npulab.ops.nn.Linear.from_torch)")
    if isinstance(module, twin):
        return
    got = type(module).__name__
    if got in _MODULES:
        hint = f"; for a torch.nn.{got} use npulab.ops.nn.{got}.from_torch"
    else:
        hint = f"; npulab has no {got} module"
    raise ShapeError(f"{who}.from_torch: expects a torch.nn.{who}, got {got}{hint}")


def _copy_weights(m: "Module", torch_module, names, who: str) -> None:
    """Set ``m``'s parameters ``names`` to copies of the torch module's, in ``m.dtype``; the
    one place weights cross from torch."""
    if m.dtype.kind != "f":
        raise ShapeError(f"{who}.from_torch: copies float weights, so dtype must be float16 or "
                         f"float32, got {m.dtype}; quantise to int8 yourself")
    for name in names:
        new = _as_numpy(getattr(torch_module, name, None), m.dtype)
        old = getattr(m, name, None)
        if (new is None) != (old is None) or (new is not None and new.shape != old.shape):
            raise ShapeError(f"{who}.from_torch: {name} of the torch module is "
                             f"{None if new is None else new.shape}, expected "
                             f"{None if old is None else old.shape}")
        setattr(m, name, new)


class Module:
    """What every module shares: a chip, a dtype, the trace of the last call."""

    def __init__(self, *, chip=DEFAULT_CHIP, dtype=np.float32):
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

    @classmethod
    def from_torch(cls, module, *, chip=DEFAULT_CHIP, dtype=np.float32):
        """This module built from ``module``, an instance of the torch.nn class of the same name:
        its attributes, and its weights copied in ``dtype`` (float16 or float32)."""
        _expect_torch(module, cls.__name__)
        return cls._from_torch(module, chip, np.dtype(dtype))

    @classmethod
    def _from_torch(cls, module, chip, dtype):
        """The class's own part of :meth:`from_torch` (the kind is checked)."""
        return cls(chip=chip)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}={v.shape}" for k, v in self.parameters().items())
        return f"{type(self).__name__}({shapes}{', ' if shapes else ''}chip={self.chip!r})"


def _uniform(rng, shape, fan_in, dtype):
    """PyTorch's default init, uniform in +-1/sqrt(fan_in); an integer dtype gets the same draw
    scaled to +-INT8_MAX and rounded to the nearest integer."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
    u = rng.uniform(-bound, bound, size=shape)
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return np.rint(u * (INT8_MAX / bound if bound else 0.0)).astype(dt)
    return u.astype(dt)


def _bias_dtype(dtype: np.dtype) -> np.dtype:
    """An int8 module's bias lives in the accumulator's int32; a float one in its own dtype."""
    return np.dtype(np.int32) if dtype.kind in "iu" else dtype


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
    """torch.nn.Conv2d on the cube (img2col). ``relu=True`` applies ReLU in the conv's FixPipe
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


def _check_batch_norm(bn, who: str, channels: int | None = None) -> None:
    """A torch BatchNorm2d npulab can copy: one with running statistics (npulab's BatchNorm is
    inference only) and, fused into a conv, one value per conv output channel."""
    import torch
    if not isinstance(bn, torch.nn.BatchNorm2d):
        raise ShapeError(f"{who}.from_torch: bn must be a torch.nn.BatchNorm2d, got {type(bn).__name__}")
    if bn.running_mean is None or bn.running_var is None:
        raise ShapeError(f"{who}.from_torch: the BatchNorm2d has no running statistics "
                         f"(track_running_stats=False); npulab's BatchNorm is inference only and "
                         f"normalises with running_mean and running_var. Build it with "
                         f"track_running_stats=True and train or load its statistics")
    if channels is not None and bn.num_features != channels:
        raise ShapeError(f"{who}.from_torch: the BatchNorm2d has {bn.num_features} features and the "
                         f"conv {channels} output channels; they must be equal (BN follows the conv)")


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


class ReLU(Module):
    def forward(self, x, return_trace):
        return _ops().relu(x, chip=self.chip, return_trace=return_trace)


class SiLU(Module):
    def forward(self, x, return_trace):
        return _ops().silu(x, chip=self.chip, return_trace=return_trace)


class GELU(Module):
    def __init__(self, approximate="none", *, chip=DEFAULT_CHIP):
        super().__init__(chip=chip)
        check_approximate(approximate, "GELU")
        self.approximate = approximate

    def forward(self, x, return_trace):
        return _ops().gelu(x, self.approximate, chip=self.chip, return_trace=return_trace)

    @classmethod
    def _from_torch(cls, gelu, chip, dtype):
        return cls(gelu.approximate, chip=chip)


class Softmax(Module):
    def __init__(self, dim=-1, *, chip=DEFAULT_CHIP):
        super().__init__(chip=chip)
        self.dim = dim

    def forward(self, x, return_trace):
        return _ops().softmax(x, self.dim, chip=self.chip, return_trace=return_trace)

    @classmethod
    def _from_torch(cls, sm, chip, dtype):
        if sm.dim is None:
            raise ShapeError("Softmax.from_torch: the torch Softmax has dim=None (torch's deprecated "
                             "implicit dim); build it with an explicit dim")
        return cls(sm.dim, chip=chip)


class MaxPool2d(Module):
    """torch.nn.MaxPool2d, with torch's arguments in torch's order (``return_indices=True`` is
    not supported)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False, *, chip=DEFAULT_CHIP):
        super().__init__(chip=chip)
        if return_indices:
            raise ShapeError("MaxPool2d: return_indices=True is not supported; npulab's MaxPool kernel "
                             "returns the maxima only")
        pool_window("MaxPool2d", kernel_size, stride, padding, dilation)
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation
        self.ceil_mode = bool(ceil_mode)

    def forward(self, x, return_trace):
        return _ops().max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                                 self.ceil_mode, chip=self.chip, return_trace=return_trace)

    @classmethod
    def _from_torch(cls, pool, chip, dtype):
        return cls(pool.kernel_size, pool.stride, pool.padding, pool.dilation, pool.return_indices,
                   pool.ceil_mode, chip=chip)


class AvgPool2d(Module):
    """torch.nn.AvgPool2d, with torch's arguments in torch's order (``divisor_override`` is not
    supported)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None, *, chip=DEFAULT_CHIP):
        super().__init__(chip=chip)
        if divisor_override is not None:
            raise ShapeError("AvgPool2d: divisor_override is not supported; npulab's AvgPool kernel "
                             "divides by the window size")
        pool_window("AvgPool2d", kernel_size, stride, padding)
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = bool(ceil_mode), bool(count_include_pad)

    def forward(self, x, return_trace):
        return _ops().avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                                 self.count_include_pad, chip=self.chip, return_trace=return_trace)

    @classmethod
    def _from_torch(cls, pool, chip, dtype):
        return cls(pool.kernel_size, pool.stride, pool.padding, pool.ceil_mode, pool.count_include_pad,
                   pool.divisor_override, chip=chip)


class Sequential(Module):
    """Modules run one after another; ``traces`` holds each one's last Trace."""

    def __init__(self, *modules):
        super().__init__(chip=modules[0].chip if modules else DEFAULT_CHIP)
        self.modules = list(modules)

    def __call__(self, x):
        for m in self.modules:
            x = m(x)
        self.traces = [m.last_trace for m in self.modules]
        return x

    @classmethod
    def _from_torch(cls, seq, chip, dtype):
        """Each child through the from_torch of the npulab module of its class's name."""
        mods = []
        for i, child in enumerate(seq):
            name = type(child).__name__
            if name not in _MODULES:
                raise ShapeError(f"Sequential.from_torch: child {i} is a {name}, and npulab has no {name} "
                                 f"module; it has {', '.join(sorted(_MODULES))}")
            mods.append(_MODULES[name].from_torch(child, chip=chip, dtype=dtype))
        return cls(*mods)


def Conv2D(filters, kernel_size, strides=1, padding="valid", use_bias=True, dtype="float32", *,
           in_channels, dilation_rate=1, groups=1, chip=DEFAULT_CHIP, seed=0):
    """Keras-style ``Conv2D(filters, kernel_size, strides, padding="same"|"valid", use_bias,
    dtype)``, a thin alias of :class:`Conv2d` (NCHW, so it needs ``in_channels``)."""
    if padding not in ("same", "valid"):
        raise ShapeError(f"Conv2D: padding must be 'same' or 'valid', got {padding!r}")
    return Conv2d(in_channels, filters, kernel_size, strides, 0 if padding == "valid" else "same",
                  dilation_rate, groups, use_bias, chip=chip, dtype=np.dtype(dtype), seed=seed)


# the modules from_torch knows by their torch twin's class name
_MODULES = {c.__name__: c for c in (Conv2d, Conv3d, ConvTranspose2d, Linear, BatchNorm2d, LayerNorm,
                                    RMSNorm, ReLU, GELU, SiLU, Softmax, MaxPool2d, AvgPool2d, Sequential)}
