"""Mish, ``z = x * tanh(softplus(x)) = x * tanh(ln(1 + exp(x)))``, the activation of YOLOv4's
backbone: the vector-heavy kernel lab 04 sets beside SiLU to ask how many queue slots pay.

``tanh(ln(u)) = (u^2 - 1) / (u^2 + 1) = 1 - 2 / (u^2 + 1)`` with ``u = 1 + exp(x)``, so Mish is
eight dependent vector instructions a tile, three of them slow (``exp``, ``reciprocal`` and the
rest one cycle a repeat), all in the output slot (no scratch buffer): per byte about 1.4 times
SiLU's vector work and twice its start-ups. The stages are SiLU's
(:class:`~npulab.kernels.examples.silu.SiluStages`) with this Compute; in fp16 for large ``x``
``u^2`` overflows to inf and ``2 / inf = 0``, so ``z = x``, the right limit.

* :class:`MishStages`: SiLU's stages with Mish's Compute;
* :func:`mish_kernel`: a MishStages class with ``buffer_num`` slots of ``tile`` elements.
"""
from __future__ import annotations

from ... import lang
from .silu import SiluStages, silu_kernel


class MishStages(SiluStages):
    """SiLU's copy_in / copy_out; Compute is Mish's eight instructions."""

    def compute(self, count: int) -> None:
        x = self.in_x.deque()
        z = self.out_z.alloc_tensor(self.dtype)
        lang.exp(z, x, count)                                 # z = exp(x)            (slow)
        lang.adds(z, z, 1.0, count)                           # z = u = 1 + exp(x)
        lang.mul(z, z, z, count)                              # z = u^2
        lang.adds(z, z, 1.0, count)                           # z = u^2 + 1
        lang.reciprocal(z, z, count)                          # z = 1 / (u^2 + 1)     (slow)
        lang.muls(z, z, -2.0, count)                          # z = -2 / (u^2 + 1)
        lang.adds(z, z, 1.0, count)                           # z = tanh(softplus(x))
        lang.mul(z, z, x, count)                              # z = x * tanh(softplus(x))
        self.out_z.enque(z)
        self.in_x.free_tensor(x)


def mish_kernel(buffer_num: int, tile: int | None = None) -> type:
    """A MishStages class with ``buffer_num`` slots per queue of ``tile`` elements (None: the
    largest that fits, as :func:`~npulab.kernels.examples.silu.silu_kernel`)."""
    base = silu_kernel(buffer_num, tile)
    return type(f"Mish_bn{buffer_num}_tile{tile}", (MishStages,), {"__init__": base.__init__})


__all__ = ["MishStages", "mish_kernel"]
