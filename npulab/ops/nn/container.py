"""The container: :class:`Sequential`, modules run one after another; from a torch Sequential,
each child goes through the ``from_torch`` of the npulab module of its class's name."""
from __future__ import annotations

from ...arch import DEFAULT_CHIP
from ...errors import ShapeError
from .module import Module
from .torch_twin import _MODULES


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
