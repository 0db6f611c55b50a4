"""The pooling modules: :class:`MaxPool2d` and :class:`AvgPool2d`, over ``npulab.ops.max_pool2d``
and ``avg_pool2d``, with torch's arguments in torch's order."""
from __future__ import annotations

from ...arch import DEFAULT_CHIP
from ...errors import ShapeError
from ..pooling import pool_window
from .module import Module, _ops


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
