"""The matmul family of the tiling search (:mod:`npulab.kernels.search`): its candidates and
its estimate.

* :func:`candidates`: every double-buffered tiling that fits the chip's buffers, over L1 and L0
  tiles, block_dim and the swizzle;
* :func:`estimate_cycles`: a quick roofline of one core's work (for ranking only);
* :data:`MATMUL`: the family; ``npulab.kernels.search.tune(MatmulProblem.of((M, N, K), dtype),
  chip)`` is the autotuner for a shape, and ``search.pick`` what the dispatcher runs (the tuned
  tiling when there is one, else :func:`~npulab.kernels.matmul.tiling.default_tiling`).
"""
from __future__ import annotations

from ...arch import DEFAULT_CHIP, c0_of, ceil_div
from ...chips import get_chip
from ...sim.cost import mmad_chain_cycles
from .. import search
from .kernel import simulate
from .problem import MatmulProblem
from .tiling import (MatmulTiles, MatmulTiling, best_swizzle, default_tiling, make_tiling, problems, ub_plan_of,
                     wave_bytes)

TILE_MN = (64, 128, 256)
TILE_K0 = (32, 64, 128)
K_MULT = (1, 2, 4, 8)


def estimate_cycles(t: MatmulTiling, chip=DEFAULT_CHIP) -> float:
    """A quick roofline of one core's work (for ranking only): the slowest of cube, MTE2 from
    L2, HBM (bytes of the first wave shared by its cores), MTE1, and the round trip of a
    buffer slot.

    A copy occupies its pipe for bytes / rate and is then in flight for the pipe's start-up
    latency (:mod:`npulab.sim.timeline`): back-to-back copies overlap their start-ups, so the
    pipes' occupancy has no start-up term. The latency bounds the pipeline instead: a slot of
    an ``n``-buffered stage is copied into, in flight, consumed, then free again, so one step
    takes at least (copy + start-up + the cube's work on it) / n. On a chip with no FixPipe the
    vector unit's epilogue and the MTE3 write of a tile are two more per-tile bounds, and the
    last tile's drain them once more."""
    chip = get_chip(chip)
    p, s = t.problem, t.tiles
    tiles = ceil_div(t.core_loops, s.block_dim)
    k_steps = ceil_div(p.k, s.tile_k0)
    # the K chain's mmads: one fill and one drain when they stream, else a PIPE_M barrier each
    cube = mmad_chain_cycles(chip, s.tile_m, s.tile_n, s.tile_k0, p.np_dtype, k_steps)
    item = p.np_dtype.itemsize
    l1_bytes = (s.tile_m + s.tile_n) * p.k * item
    l1_steps = ceil_div(p.k, s.tile_k)
    pc = chip.pipes
    share = chip.gm_share_bytes_per_cycle(min(s.block_dim, chip.ai_cores))
    wave = min(chip.ai_cores, s.block_dim, t.core_loops)
    # the bytes come at MTE2's rate or the core's part of L2, whichever is less (sim/gm.py)
    l2_part = chip.memory.l2_bytes_per_cycle / max(1, min(s.block_dim, chip.ai_cores))
    mte2 = l1_bytes / min(pc.mte2_bytes_per_cycle, max(share, l2_part))
    hbm = wave_bytes(t, chip, s.swizzle_offset, s.swizzle_direction) * p.k * item / max(1, wave) / share
    mte1 = l1_bytes / pc.mte1_bytes_per_cycle
    # the A and B copies of a step go back to back: one start-up each step
    l1_trip = (max(mte2, hbm) + l1_steps * pc.mte2_startup_cycles + cube) / s.l1_buffers
    l0_trip = (mte1 + k_steps * pc.mte1_startup_cycles + cube) / s.l0_buffers
    per_tile = max(cube, mte2, hbm, mte1, l1_trip, l0_trip)
    if s.l1_buffers == 1 or s.l0_buffers == 1:   # single buffered: nothing overlaps
        per_tile = cube + mte2 + mte1 + l1_steps * pc.mte2_startup_cycles + k_steps * pc.mte1_startup_cycles
    fill = pc.mte2_startup_cycles + pc.mte1_startup_cycles + cube / k_steps
    plan = ub_plan_of(t, chip)
    if plan is None:
        return tiles * per_tile + fill
    vec = plan.vector_cycles(chip, plan.rows, plan.cols)
    write = s.tile_m * s.tile_n * p.out_dtype.itemsize / min(pc.mte3_bytes_per_cycle, share)
    return tiles * max(per_tile, vec, write) + fill + vec + write + pc.mte3_startup_cycles


def candidates(problem: MatmulProblem, chip=DEFAULT_CHIP) -> list[MatmulTiling]:
    """Every double-buffered tiling that fits the chip's buffers (L1/L0 tiles, swizzle,
    block_dim), in the order they are listed (the search ranks them)."""
    chip = get_chip(chip)
    c0 = c0_of(problem.np_dtype)
    seen, out = set(), []
    for tm in TILE_MN:
        for tn in TILE_MN:
            for tk0 in TILE_K0:
                if tk0 % c0:
                    continue
                for mult in K_MULT:
                    base = make_tiling(problem, chip, (tm, tn, tk0 * mult, tk0, 2, 2, 2))
                    loops = base.core_loops
                    for bd in sorted({min(chip.ai_cores, loops), max(1, min(chip.ai_cores, loops) // 2)}):
                        t = base.with_tiles(block_dim=bd)
                        for sw in ({"swizzle_offset": 1, "swizzle_direction": 0}, best_swizzle(t, chip)):
                            t2 = t.with_tiles(**sw)
                            if t2.tiles in seen or problems(t2, chip):
                                continue
                            seen.add(t2.tiles)
                            out.append(t2)
    # equal estimates: the longer L1 step first (fewer copies), as the search has always ranked
    out.sort(key=lambda t: -t.tiles.tile_k)
    return out


MATMUL = search.register(MatmulProblem, search.Family(
    "matmul", MatmulTiling, MatmulTiles, candidates=candidates, estimate=estimate_cycles, simulate=simulate,
    default=default_tiling, problems=problems))


__all__ = ["estimate_cycles", "candidates", "MATMUL", "TILE_MN", "TILE_K0", "K_MULT"]
