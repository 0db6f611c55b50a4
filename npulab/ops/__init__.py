"""The interface layer: functional operators on numpy arrays, run on the simulated NPU.

Each operator checks its inputs, then goes through the dispatcher (:mod:`npulab.ops.registry`),
which picks the registered kernel and its tiling for the shapes at hand.
"""
from __future__ import annotations

from .math import add
from .matmul import batch_matmul, matmul
from .registry import dispatch, op_types

__all__ = ["add", "matmul", "batch_matmul", "dispatch", "op_types"]
