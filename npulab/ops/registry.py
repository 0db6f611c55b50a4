"""The scheduling layer: which kernel runs an op type, and with which tiling and block_dim.

ops-nn splits an operator into its interface (op_api), its host side (shape checks and the
tiling function) and its kernel. Between the interface and the kernels sits a dispatcher: given
an op type and the shapes at hand it finds the registered kernel, asks its tiling function for
a TilingData (which carries ``block_dim``), caches that per (chip, op, shapes, dtypes, attrs)
and launches. Here:

* :func:`register` records an :class:`OpDef` (op type, family, tiling, run);
* :func:`dispatch` runs one op on numpy arrays and returns ``(outputs, trace)``;
* an unknown op type raises :class:`~npulab.errors.UnsupportedOpError`, whose message begins
  ``Op type not supported: <name>`` and says how to add one as a custom operator.

The contract of a registered kernel:

``tiling(specs, chip, **attrs)``
    specs: one :class:`TensorSpec` (shape, dtype) per input; chip: a ChipSpec. Returns a
    frozen dataclass (hashable, JSON-ready through ``dataclasses.asdict``) with a ``block_dim``.
``run(arrays, tiling, chip, mode, **attrs)``
    arrays: the inputs as numpy arrays. Returns ``(output, trace)``; output is None in timing
    mode.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from ..chips import get_chip
from ..errors import UnsupportedOpError


class TensorSpec(NamedTuple):
    shape: tuple
    dtype: np.dtype


@dataclass(frozen=True)
class OpDef:
    op_type: str          # CANN's op type name: "Add", "MatMul", "LayerNorm", ...
    family: str           # the ops-nn folder it belongs to: "math", "matmul", "norm", ...
    tiling: Callable      # (specs, chip, **attrs) -> TilingData with .block_dim
    run: Callable         # (arrays, tiling, chip, mode, **attrs) -> (output, trace)
    summary: str = ""


_REGISTRY: dict[str, OpDef] = {}


def register(op_type: str, family: str, tiling: Callable, run: Callable, summary: str = "") -> OpDef:
    """Register the kernel of ``op_type``; registering a name twice is an error."""
    if op_type in _REGISTRY:
        raise ValueError(f"op type {op_type!r} is already registered (family "
                         f"{_REGISTRY[op_type].family!r}); pick another name for a new kernel")
    op = OpDef(op_type, family, tiling, run, summary)
    _REGISTRY[op_type] = op
    return op


def op_types() -> list[str]:
    """Every registered op type, sorted."""
    return sorted(_REGISTRY)


def lookup(op_type: str) -> OpDef:
    op = _REGISTRY.get(op_type)
    if op is None:
        raise UnsupportedOpError(
            f"Op type not supported: {op_type}. npulab has kernels for {', '.join(op_types())}. "
            f"To run another operator, write it as a custom operator (a tiling function and a "
            f"kernel in npulab.lang) and register it with npulab.ops.registry.register("
            f"{op_type!r}, family, tiling, run).")
    return op


class Dispatcher:
    """Picks and caches the tiling of every (chip, op type, shapes, dtypes, attrs) it sees."""

    def __init__(self):
        self._cache: dict[tuple, object] = {}
        self.hits = self.misses = 0

    def tiling(self, op: OpDef, specs, chip, attrs: dict):
        key = (chip.name, chip.source, op.op_type, tuple((s.shape, s.dtype.str) for s in specs),
               tuple(sorted(attrs.items())))
        t = self._cache.get(key)
        if t is None:
            self.misses += 1
            t = self._cache[key] = op.tiling(specs, chip, **attrs)
        else:
            self.hits += 1
        return t

    def clear(self) -> None:
        self._cache.clear()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._cache)


dispatcher = Dispatcher()


def dispatch(op_type: str, *arrays, chip="910", mode: str = "functional", **attrs):
    """Run ``op_type`` on numpy ``arrays``: look up its kernel, get (or reuse) its tiling for
    these shapes, launch. Returns ``(output, trace)``."""
    op = lookup(op_type)
    chip = get_chip(chip)
    arrays = [np.asarray(a) for a in arrays]
    specs = [TensorSpec(tuple(a.shape), a.dtype) for a in arrays]
    t = dispatcher.tiling(op, specs, chip, attrs)
    return op.run(arrays, t, chip, mode, **attrs)
