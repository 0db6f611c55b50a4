"""The activation modules: :class:`ReLU`, :class:`SiLU`, :class:`GELU` (``approximate``) and
:class:`Softmax` (``dim``), over ``npulab.ops.relu``, ``silu``, ``gelu`` and ``softmax``."""
from __future__ import annotations

from ...arch import DEFAULT_CHIP
from ...errors import ShapeError
from ..activation import check_approximate
from .module import Module, _ops


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
