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

from ..arch import ACC_DTYPE, FRACTAL_ROWS, MAX_MNK, ceil_div
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


class Tiling:
    """Mixed into every tiling dataclass, vector and cube: its fields as a dict, the form the
    bench rows, the widgets and the tiling cache hold."""

    def to_dict(self) -> dict:
        return asdict(self)


class TilingData(Tiling):
    """Mixed into the frozen cube tiling dataclasses, whose fields are ``problem``, ``tiles``
    (with ``tile_m``, ``tile_n``, ``block_dim``) and ``name``."""

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


def tile_rules(s, c0: int, c0_name: str, dtype) -> list[str]:
    """A reason for every rule of the cube the tiles ``s`` break (empty: none), the rules every
    cube tiling keeps: tile_m and tile_n whole fractals (16) up to the mmad limit, tile_k0 whole
    C0 steps (``c0``, named ``c0_name``: K0 of a matmul, C0 of a convolution, of ``dtype``),
    one or two of each buffer, at least one block."""
    out = []
    for name, v in (("tile_m", s.tile_m), ("tile_n", s.tile_n)):
        if v < FRACTAL_ROWS or v % FRACTAL_ROWS or v > MAX_MNK:
            out.append(f"{name}={v} must be a multiple of {FRACTAL_ROWS} in {FRACTAL_ROWS}.."
                       f"{MAX_MNK // FRACTAL_ROWS * FRACTAL_ROWS}")
    if s.tile_k0 < c0 or s.tile_k0 % c0 or s.tile_k0 > MAX_MNK:
        out.append(f"tile_k0={s.tile_k0} must be a multiple of {c0_name}={c0} ({dtype}) up to {MAX_MNK}")
    for name in ("l1_buffers", "l0_buffers", "l0c_buffers"):
        if getattr(s, name) not in (1, 2):
            out.append(f"{name}={getattr(s, name)} must be 1 or 2")
    if s.block_dim < 1:
        out.append(f"block_dim={s.block_dim} must be at least 1")
    return out


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


__all__ = ["CubeProblem", "Tiling", "TilingData", "tile_rules", "over_capacity", "raise_unless_fits"]
