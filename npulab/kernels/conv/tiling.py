"""Host side of the img2col convolution: the tiles (catlass's Params, derived from the problem),
the buffers they need and the "can implement" check.

The tiling cuts the conv's matmul as the matmul templates do (:mod:`npulab.kernels.matmul.tiling`):

* **block tiles** TILE_M x TILE_N of C, one L0C tile each, spread over the cores by a schedule
  (:mod:`npulab.kernels.conv.schedule`);
* **L1 steps** of C1_STEP channel blocks: the feature-map *slab* (the input rows, x C1_STEP
  x W x C0, that the tile's output pixels read) and the FRACTAL_Z weight window
  (C1_STEP x taps x C0 by TILE_N) sit in L1, ``l1_buffers`` of each;
* **L0 steps** of TILE_K0 columns of K: ``load_3d`` expands the slab into L0A (img2col),
  ``load_data`` brings the weights into L0B, one ``mmad`` each.

A :class:`ConvTiling` is the problem (:class:`~npulab.kernels.conv.problem.ConvProblem`) with its
:class:`ConvTiles`: what the host hands the kernel. ``ConvTiles`` are what a tiling function, a
search or a learner chooses; pass them (or a whole ConvTiling, whose tiles are taken) to
``npulab.ops.conv2d(..., tiling=...)``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...arch import DEFAULT_CHIP, FRACTAL_ROWS, round_up
from ...chips import ChipSpec, get_chip
from ...sim.memory import fmt_bytes
from ..matmul.problem import MatmulProblem
from ..matmul.tiling import MatmulTiles, MatmulTiling
from ..epilogue import Epilogue, UbPlan, ub_demand, ub_plan
from ..tiling_data import TilingData, over_capacity, raise_unless_fits, tile_rules
from .problem import ConvProblem
from .schedule import slab_elems

EPI_SLOTS = 2              # the epilogue vectors of tile t+1 load while FixPipe reads tile t's
SCHEDULES = ("cyclic", "teams")


@dataclass(frozen=True)
class ConvTiles:
    """The knobs of a conv tiling."""
    tile_m: int = 128
    tile_n: int = 128
    c1_step: int = 1           # C1_STEP: channel blocks per L1 step
    tile_k0: int = 16          # TILE_K0: columns of K per mmad
    l1_buffers: int = 2
    l0_buffers: int = 2
    l0c_buffers: int = 2
    w_resident: bool = False   # the tile column's weights (K x TILE_N) stay in L1, loaded one
                               # L1 step at a time while the first tile computes
    map_resident: bool = False # teams, 2-D: the input rows of a core's whole run stay in L1;
                               # each tile loads only the rows it adds (no halo read twice)
    block_dim: int = 1
    schedule: str = "cyclic"   # "cyclic" or "teams" (npulab.kernels.conv.schedule)
    ramp: int = 0              # teams: > 0 starts each core's run with tiles of ramp, 2 x ramp,
                               # ... fractal rows (the first output reaches FixPipe early)
    taper: int = 0             # teams: > 0 ends each core's run with tiles of ..., 2 x taper,
                               # taper fractal rows (a small last tile drains fast)
    swizzle_offset: int = 1
    swizzle_direction: int = 0


@dataclass(frozen=True)
class ConvTiling(TilingData):
    """The TilingData struct of the conv kernel: the problem, its tiles, and where the tiles came
    from (``name``: "default", "tuned", "custom")."""
    problem: ConvProblem
    tiles: ConvTiles = ConvTiles()
    name: str = "custom"

    @property
    def columns(self) -> int:
        """Tile columns of the whole problem: (enlarged) groups x N tiles."""
        return self.problem.groups * self.n_loops

    @property
    def gemm(self) -> MatmulTiling:
        """The matmul the conv is, as the matmul templates' block scheduler sees it."""
        p, s = self.problem, self.tiles
        return MatmulTiling(MatmulProblem(*p.gemm_shape, p.dtype),
                            MatmulTiles(s.tile_m, s.tile_n, p.step_k(s.c1_step), s.tile_k0, s.l1_buffers,
                                        s.l0_buffers, s.l0c_buffers, s.block_dim, s.swizzle_offset,
                                        s.swizzle_direction), self.name)

    def recipe(self) -> str:
        s = self.tiles
        how = (f"teams={s.block_dim // max(1, self.columns)}"
               + (f" ramp={s.ramp}" if s.ramp else "") + (f" taper={s.taper}" if s.taper else "")
               if s.schedule == "teams" else
               f"swz={s.swizzle_offset}{'Zn' if s.swizzle_direction == 0 else 'Nz'}")
        return (f"{s.tile_m}x{s.tile_n} c1_step={s.c1_step} k0={s.tile_k0}"
                f"{' w_resident' if s.w_resident else ''}{' map_resident' if s.map_resident else ''}"
                f"{self.problem.tags()} "
                f"buf={s.l1_buffers}/{s.l0_buffers}/{s.l0c_buffers} "
                f"{how} blocks={s.block_dim}")


def tiled(problem: ConvProblem, tiles: ConvTiles | None = None, name: str = "custom", **changes) -> ConvTiling:
    """``problem`` with ``tiles`` (default ones when None), some of them changed by ``changes``."""
    return ConvTiling(problem, replace(tiles or ConvTiles(), **changes), name)


# -- buffer demand -------------------------------------------------------------------------------
def slab_bytes(t: ConvTiling) -> int:
    """One L1 slot of the map: C1_STEP channel blocks of the slab (with ``map_resident``, the
    run's rows in every channel block)."""
    p, s = t.problem, t.tiles
    return (p.c1 if s.map_resident else s.c1_step) * slab_elems(t) * p.np_dtype.itemsize


def weight_bytes(t: ConvTiling) -> int:
    """One L1 slot of the weights: an L1 step's FRACTAL_Z window (with ``w_resident``, the tile
    column's whole K)."""
    p, s = t.problem, t.tiles
    k = p.k if s.w_resident else p.step_k(s.c1_step)
    return k * round_up(s.tile_n, FRACTAL_ROWS) * p.np_dtype.itemsize


def epilogue_of(p: ConvProblem) -> Epilogue:
    """What the conv does on the way out: bias, a per-tensor or per-channel scale, an offset, ReLU,
    the cast to the output dtype."""
    return Epilogue(p.acc_dtype.name, np.dtype(p.out_dtype).name, p.vectors,
                    p.scale_value if p.scale == "tensor" else None, p.relu)


def ub_plan_of(t: ConvTiling, chip: "ChipSpec | str") -> UbPlan | None:
    """How a block tile goes through UB on ``chip`` (None on a chip with FixPipe)."""
    return ub_plan(epilogue_of(t.problem), t.tiles.tile_m, t.tiles.tile_n, get_chip(chip))


def buffer_demand(t: ConvTiling, chip: "ChipSpec | str | None" = None) -> dict[str, tuple[int, str]]:
    """Bytes each buffer must hold for tiling ``t``, with how the figure is made: the cube's
    buffers, and, given a ``chip`` whose cube output goes through UB (the 910, 310), the UB the
    epilogue takes there."""
    p, s = t.problem, t.tiles
    slab, wts = slab_bytes(t), weight_bytes(t)
    epi = EPI_SLOTS * len(p.vectors) * round_up(s.tile_n * 4, 32)
    maps = (f"the run's map {fmt_bytes(slab)}", slab) if s.map_resident else \
        (f"{s.l1_buffers} x map slab {fmt_bytes(slab)}", s.l1_buffers * slab)
    if s.w_resident:
        how, l1 = f"{maps[0]} + resident weights {fmt_bytes(wts)}", maps[1] + wts
    elif s.map_resident:
        how, l1 = f"{maps[0]} + {s.l1_buffers} x weights {fmt_bytes(wts)}", maps[1] + s.l1_buffers * wts
    else:
        how = f"{s.l1_buffers} x (map slab {fmt_bytes(slab)} + weights {fmt_bytes(wts)})"
        l1 = s.l1_buffers * (slab + wts)
    dt, item = p.np_dtype, p.np_dtype.itemsize
    m16, n16 = round_up(s.tile_m, FRACTAL_ROWS), round_up(s.tile_n, FRACTAL_ROWS)
    return {
        "L1": (l1 + epi, how + (f" + {EPI_SLOTS} x {len(p.vectors)} epilogue vectors" if p.vectors else "")),
        "L0A": (s.l0_buffers * m16 * s.tile_k0 * item, f"{s.l0_buffers} x img2col {s.tile_m}x{s.tile_k0} {dt.name}"),
        "L0B": (s.l0_buffers * s.tile_k0 * n16 * item, f"{s.l0_buffers} x weights {s.tile_k0}x{s.tile_n} {dt.name}"),
        "L0C": (s.l0c_buffers * m16 * n16 * 4, f"{s.l0c_buffers} x C {s.tile_m}x{s.tile_n} {p.acc_dtype.name}"),
    } | ub_demand(None if chip is None else ub_plan_of(t, chip))


def problems(t: ConvTiling, chip: "ChipSpec | str" = DEFAULT_CHIP) -> list[str]:
    """Every reason tiling ``t`` cannot run on ``chip`` (empty: it can)."""
    chip = get_chip(chip)
    p, s = t.problem, t.tiles
    out = tile_rules(s, p.k0, "C0", p.dtype)
    if not 1 <= s.c1_step <= p.c1:
        out.append(f"c1_step={s.c1_step} must be in 1..C1={p.c1}")
    for name in ("ramp", "taper"):
        if getattr(s, name) < 0:
            out.append(f"{name}={getattr(s, name)} must be 0 (even tiles) or a number of fractal rows")
    if s.schedule not in SCHEDULES:
        out.append(f"schedule={s.schedule!r} must be 'cyclic' or 'teams'")
    elif s.map_resident and (s.schedule != "teams" or p.geom.d != 1):
        out.append("map_resident is for schedule='teams' (a core's tiles are one run of rows) and a "
                   "2-D convolution (D = 1)")
    elif s.schedule == "teams" and s.block_dim % t.columns:
        out.append(f"schedule='teams' requires block_dim ({s.block_dim}) to be a multiple of the "
                   f"{t.columns} tile columns (groups x N tiles); change block_dim or TILE_N, or "
                   f"use schedule='cyclic'")
    return out or over_capacity(buffer_demand(t, chip), chip)


def can_implement(t: ConvTiling, chip: "ChipSpec | str" = DEFAULT_CHIP) -> bool:
    """Raise BufferOverflowError / ShapeError naming what does not fit; else True."""
    return raise_unless_fits(problems(t, chip), f"conv tiling {t.recipe()}",
                             "lower TILE_M / TILE_N / C1_STEP / TILE_K0 or use fewer buffers.")


__all__ = ["ConvTiles", "ConvTiling", "tiled", "EPI_SLOTS", "SCHEDULES", "slab_bytes", "weight_bytes",
           "epilogue_of", "ub_plan_of", "buffer_demand", "problems", "can_implement"]
