"""Checks of the integer arguments the conv and pool ops and their modules share: kernel_size,
stride, padding, dilation, output_padding (an int or a tuple of ints), groups and channel counts
(a positive int).

torch's rule: an int stands for the same value on every spatial axis; a tuple (or list) gives
one value an axis, and a single-element tuple is repeated. Bools, floats and strings are not
ints here (torch refuses them too), so ``max_pool2d(x, 2.5)`` and ``max_pool2d(x, "2")`` are
errors that name the op and the argument.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError


def is_int(v) -> bool:
    """An int or a numpy integer, not a bool."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def int_tuple(value, n: int, name: str, what: str, minimum: int = 0) -> tuple:
    """``value`` (an int, or a tuple/list of 1 or ``n`` ints) as ``n`` ints, each >= ``minimum``.
    ``what`` (the op or module) and ``name`` (the argument) open the error message."""
    if is_int(value):
        v = (int(value),) * n
    elif isinstance(value, (tuple, list)) and len(value) in (1, n) and all(is_int(a) for a in value):
        v = tuple(int(a) for a in value) * (n if len(value) == 1 else 1)
    else:
        raise ShapeError(f"{what}: {name} must be an int or a tuple of {n} ints, got {value!r} "
                         f"({type(value).__name__})")
    if min(v) < minimum:
        rule = "positive" if minimum == 1 else f">= {minimum}"
        raise ShapeError(f"{what}: {name} must be {rule}, got {value!r}")
    return v


def positive_int(value, name: str, what: str) -> int:
    """``value`` as an int >= 1 (groups, a channel count)."""
    if not is_int(value) or value < 1:
        raise ShapeError(f"{what}: {name} must be a positive int, got {value!r}")
    return int(value)


__all__ = ["is_int", "int_tuple", "positive_int"]
