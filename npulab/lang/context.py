"""Which device, core and block the kernel code being run belongs to.

Ascend C kernels read ``GetBlockIdx()`` from the hardware; here :func:`launch` sets the
current block before it calls the kernel body, and every kernel-language call finds its core
through :func:`current`.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..errors import ContextError


@dataclass
class KernelContext:
    device: object
    core: object
    block_idx: int
    block_num: int
    pipes: list = field(default_factory=list)


# one stack per host thread: launches from two threads at once each see their own kernel
_local = threading.local()


def stack() -> list[KernelContext]:
    """This thread's contexts, innermost last (``launch`` pushes one per block)."""
    s = getattr(_local, "stack", None)
    if s is None:
        s = _local.stack = []
    return s


def current() -> KernelContext:
    s = getattr(_local, "stack", None)
    if not s:
        raise ContextError("kernel-language calls only work inside a kernel run by npulab.lang.launch(...)")
    return s[-1]


def get_block_idx() -> int:
    """This block's index, 0 .. block_num - 1 (Ascend C ``GetBlockIdx()``)."""
    return current().block_idx


def running_chip():
    """The ChipSpec the kernel runs on (a real kernel is compiled for its chip, and branches on
    what the chip has at compile time)."""
    return current().device.chip


def get_block_num() -> int:
    """How many blocks the kernel was launched with (Ascend C ``GetBlockNum()``)."""
    return current().block_num
