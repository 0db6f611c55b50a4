"""The base of every module, :class:`Module` (a chip, a dtype, the trace of the last call,
``from_torch``), and the parameter initialisation the modules share: PyTorch's uniform draw
(:func:`_uniform`), scaled to the int8 range for an int8 module, whose bias lives in int32
(:func:`_bias_dtype`)."""
from __future__ import annotations

import math

import numpy as np

from ...arch import DEFAULT_CHIP
from ...chips import get_chip
from ...errors import ArgumentError
from .torch_twin import _expect_torch

INT8_MAX = 127              # an int8 module's weights: the float draw scaled to +-INT8_MAX


def _ops():
    """The functional operators, looked up at call time (``npulab.ops`` imports this package)."""
    from ... import ops
    return ops


class Module:
    """What every module shares: a chip, a dtype, the trace of the last call."""

    def __init__(self, *, chip=DEFAULT_CHIP, dtype=np.float32):
        self.chip = chip
        self.dtype = np.dtype(dtype)
        self.last_trace = None
        self.device_id = None

    def npu(self, chip=None, device_id: int = 0) -> "Module":
        """Place the module on simulated NPU ``device_id`` (of ``chip``, default the module's
        own), as torch_npu's ``module.npu()`` places it on an Ascend device: its calls then run
        there. Returns the module, so ``Conv2d(...).npu()`` chains as the seeds write it."""
        if not isinstance(device_id, int) or isinstance(device_id, bool) or device_id < 0:
            raise ArgumentError(f"{type(self).__name__}.npu: device_id must be a device number >= 0, "
                                f"got {device_id!r}")
        if chip is not None:
            get_chip(chip)                     # an unknown chip fails here, not at the first call
            self.chip = chip
        self.device_id = device_id
        for child in getattr(self, "modules", ()):
            child.npu(self.chip, device_id)
        return self

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
