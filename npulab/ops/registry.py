"""The scheduling layer: which kernel runs an op type, and with which tiling and block_dim.

ops-nn splits an operator into its interface (op_api), its host side (shape checks and the
tiling function) and its kernel. Between the interface and the kernels sits a dispatcher: given
an op type and the shapes at hand it finds the registered kernel, asks its tiling function for
a TilingData (which carries ``block_dim``), caches that per (chip, op, shapes, dtypes, attrs)
and launches. Here:

* :func:`register` records an :class:`OpDef` (op type, family, tiling, run, and optionally the
  names of its inputs and its shape inference);
* :func:`dispatch` runs one op on numpy arrays and returns ``(outputs, trace)``;
* an unknown op type raises :class:`~npulab.errors.UnsupportedOpError`, whose message begins
  ``Op type not supported: <name>`` and says how to add one as a custom operator; a wrong
  number of inputs or an attribute the op does not have raises :class:`~npulab.errors.ShapeError`;
* empty tensors: when an input has no elements and shape inference says the output has none
  either (an empty batch, as torch allows), dispatch returns that empty output at once, without
  a tiling or a launch (the trace is then None).

The contract of a registered kernel:

``tiling(specs, chip, **attrs)``
    specs: one :class:`TensorSpec` (shape, dtype) per input; chip: a ChipSpec. Returns a
    frozen dataclass (hashable, JSON-ready through ``dataclasses.asdict``) with a ``block_dim``.
``run(arrays, tiling, chip, mode, **attrs)``
    arrays: the inputs as numpy arrays. Returns ``(output, trace)``; output is None in timing
    mode.
``infer(specs, chip, **attrs)`` (optional; ops-nn's InferShape)
    The output's TensorSpec; raises the op's ShapeError for inputs it cannot take. Dispatch
    calls it only when an input is empty.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from ..arch import DEFAULT_CHIP
from ..chips import get_chip
from ..errors import ArgumentError, ShapeError, UnsupportedOpError
from ..kernels.search import CACHE


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
    inputs: tuple | None = None   # input names, "?" marks an optional one; None: not checked
    infer: Callable | None = None  # (specs, chip, **attrs) -> the output's TensorSpec

    def check_call(self, n_inputs: int, attrs: dict) -> None:
        """The inputs' count and the attributes' names against what the op takes."""
        if self.inputs is not None:
            need = sum(not name.endswith("?") for name in self.inputs)
            if not need <= n_inputs <= len(self.inputs):
                count = str(need) if need == len(self.inputs) else f"{need} to {len(self.inputs)}"
                names = ", ".join(n[:-1] + " (optional)" if n.endswith("?") else n for n in self.inputs)
                raise ShapeError(f"{self.op_type}: takes {count} input arrays ({names}), got {n_inputs}")
        known, required, any_more = _attributes(self.tiling)
        missing = [name for name in required if name not in attrs]
        if missing:
            raise ShapeError(f"{self.op_type}: missing attribute{'s' * (len(missing) > 1)} {', '.join(missing)}")
        unknown = [] if any_more else sorted(set(attrs) - set(known))
        if unknown:
            raise ShapeError(f"{self.op_type}: unknown attribute{'s' * (len(unknown) > 1)} "
                             f"{', '.join(unknown)}; its attributes are {', '.join(known) or 'none'}")


@functools.lru_cache(maxsize=None)
def _attributes(tiling: Callable) -> tuple:
    """(names, required names, takes any others) of the attributes a tiling function takes,
    the parameters after specs and chip."""
    params = list(inspect.signature(tiling).parameters.values())[2:]
    named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return (tuple(p.name for p in named), tuple(p.name for p in named if p.default is p.empty),
            any(p.kind is p.VAR_KEYWORD for p in params))


_REGISTRY: dict[str, OpDef] = {}


def register(op_type: str, family: str, tiling: Callable, run: Callable, summary: str = "", *,
             inputs: tuple | None = None, infer: Callable | None = None) -> OpDef:
    """Register the kernel of ``op_type``; registering a name twice is an error.

    inputs: the names of the input arrays, in order, an optional one ending in "?" (dispatch
    checks the count); infer: the shape inference (see the module docstring), which lets an
    empty input give an empty output without a launch."""
    if op_type in _REGISTRY:
        raise ArgumentError(f"op type {op_type!r} is already registered (family "
                         f"{_REGISTRY[op_type].family!r}); pick another name for a new kernel")
    op = OpDef(op_type, family, tiling, run, summary, None if inputs is None else tuple(inputs), infer)
    _REGISTRY[op_type] = op
    return op


def batch_of_one(shape) -> tuple:
    """``shape`` with an empty leading (batch) axis set to 1, for shape inference that validates
    one batch item; any other shape as it is."""
    shape = tuple(shape)
    if shape and shape[0] == 0 and 0 not in shape[1:]:
        return (1,) + shape[1:]
    return shape


def op_types() -> list[str]:
    """Every registered op type, sorted."""
    return sorted(_REGISTRY)


def attributes(op_type: str) -> tuple:
    """The names of the attributes ``op_type``'s kernel takes."""
    return _attributes(lookup(op_type).tiling)[0]


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
    """Picks the tiling of every (chip, op type, shapes, dtypes, attrs) it sees, remembered in the
    one tiling cache (:data:`npulab.kernels.search.CACHE`, namespace "dispatch"), which also
    holds what the tiling searches found."""

    NAMESPACE = "dispatch"

    def tiling(self, op: OpDef, specs, chip, attrs: dict):
        key = (chip.name, chip.source, op.op_type, tuple((s.shape, s.dtype.str) for s in specs),
               tuple(sorted(attrs.items())))
        try:
            hash(key)
        except TypeError:
            raise ShapeError(f"{op.op_type}: attribute values must be hashable (a tuple, not a list), "
                             f"got {attrs}") from None
        return CACHE.memo(self.NAMESPACE, key, lambda: op.tiling(specs, chip, **attrs))

    @property
    def hits(self) -> int:
        return CACHE.stats.get(self.NAMESPACE, [0, 0])[0]

    @property
    def misses(self) -> int:
        return CACHE.stats.get(self.NAMESPACE, [0, 0])[1]

    def clear(self) -> None:
        """Forget every tiling held in memory (the file of searched tilings stays)."""
        CACHE.clear_memory()

    def __len__(self) -> int:
        return sum(1 for ns, _ in CACHE.memory if ns == self.NAMESPACE)


dispatcher = Dispatcher()


def dispatch(op_type: str, *arrays, chip=DEFAULT_CHIP, mode: str = "functional", **attrs):
    """Run ``op_type`` on numpy ``arrays``: look up its kernel, get (or reuse) its tiling for
    these shapes, launch. Returns ``(output, trace)``; an empty output (say, a batch of 0)
    returns ``(empty array, None)`` without a launch."""
    op = lookup(op_type)
    op.check_call(len(arrays), attrs)
    chip = get_chip(chip)
    arrays = [np.asarray(a) for a in arrays]
    specs = [TensorSpec(tuple(a.shape), a.dtype) for a in arrays]
    if op.infer is not None and any(0 in s.shape for s in specs):
        out = op.infer(specs, chip, **attrs)
        if 0 in out.shape:
            return np.empty(out.shape, out.dtype), None
    t = dispatcher.tiling(op, specs, chip, attrs)
    return op.run(arrays, t, chip, mode, **attrs)
