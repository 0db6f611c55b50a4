"""What the cube families' problems and tilings share (catlass: Arguments and Params).

* :class:`CubeProblem`: a problem of the cube, as the user states it: its dtype and the matmul it
  is (``gemm_shape``: batch x M x N x K; a convolution's groups x output pixels x Cout of a group x
  K); its accumulator dtype and its useful MACs follow;
* :class:`TilingData`: what the host hands the kernel: the problem, the tiles a tiling function
  (or a search, or a learner) chose, and where they came from (``name``: a recipe, "default",
  "tuned", "custom"). The block-tile loops follow from the GEMM and the block tile; a new tiling
  of the same problem is ``t.with_tiles(tile_m=64)``.
"""
from __future__ import annotations

from dataclasses import asdict, replace
from functools import cached_property

import numpy as np

from ..arch import ACC_DTYPE, ceil_div
from ..errors import BufferOverflowError, ShapeError
from ..sim.memory import fmt_bytes


class CubeProblem:
    """Mixed into the frozen problem dataclasses: needs ``dtype`` and ``gemm_shape``."""

    @cached_property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def acc_dtype(self) -> np.dtype:
        return ACC_DTYPE[self.np_dtype]


class TilingData:
    """Mixed into the frozen tiling dataclasses, whose fields are ``problem``, ``tiles`` (with
    ``tile_m``, ``tile_n``, ``block_dim``) and ``name``."""

    @property
    def m_loops(self) -> int:
        return ceil_div(self.problem.gemm_shape[1], self.tiles.tile_m)

    @property
    def n_loops(self) -> int:
        return ceil_div(self.problem.gemm_shape[2], self.tiles.tile_n)

    @property
    def core_loops(self) -> int:
        """Block tiles in the whole problem (the block scheduler's loop count)."""
        return self.problem.gemm_shape[0] * self.m_loops * self.n_loops

    @property
    def block_dim(self) -> int:
        return self.tiles.block_dim

    def with_tiles(self, **changes):
        """The same problem with some tiles changed: ``t.with_tiles(tile_m=64)``."""
        return replace(self, tiles=replace(self.tiles, **changes))

    def to_dict(self) -> dict:
        return asdict(self)


def over_capacity(demand: dict, chip) -> list[str]:
    """A reason for every buffer ``demand`` ({buffer: (bytes, how the figure is made)})
    overflows on ``chip``."""
    out = []
    for buf, (need, how) in demand.items():
        cap = chip.buffer_bytes(buf)
        if need > cap:
            out.append(f"{buf} needs {fmt_bytes(need)} ({need} B: {how}) but holds "
                       f"{fmt_bytes(cap)} ({cap} B) on chip '{chip.name}'")
    return out


def raise_unless_fits(found: list[str], what: str, fix: str) -> bool:
    """catlass's ``CanImplement`` verdict on the reasons ``found``: True when there are none,
    else a BufferOverflowError (a buffer overflows) or a ShapeError (a tile breaks a rule) that
    names ``what`` cannot run, every reason, and ``fix``."""
    if not found:
        return True
    cls = BufferOverflowError if any(" needs " in p for p in found) else ShapeError
    raise cls(f"{what} cannot run: " + "; ".join(found) + f". Fix: {fix}")


__all__ = ["CubeProblem", "TilingData", "over_capacity", "raise_unless_fits"]
