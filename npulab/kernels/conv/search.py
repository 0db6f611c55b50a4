"""The conv family of the tiling search (:mod:`npulab.kernels.search`): its candidates, its
estimate and its default tiling.

* :func:`candidates`: uniform block tiles dealt round-robin (``cyclic``, with the matmul
  templates' best swizzle) and, where the tile columns divide the cores, one team of cores per
  column (``teams``) with 1 to 8 tiles per core; for each the largest TILE_K0 that fits L0A /
  L0B, C1_STEP halving from C1, weights resident in L1 or streamed, the map resident or not;
* :func:`estimate_cycles`: an analytic estimate that ranks them;
* :func:`default_tiling`: for a layer worth tuning, the best estimates (and the best of each
  kind) simulated in timing mode, the fewest cycles winning; the estimate's favourite for a small
  one. The answer is kept in the tiling cache (memory and disk), as every search's is.
"""
from __future__ import annotations

import numpy as np

from ...arch import DEFAULT_CHIP, FRACTAL_ROWS, ceil_div, round_up
from ...chips import ChipSpec, get_chip
from ...sim.cost import PIPELINED_FRACTALS, mmad_cost
from .. import search as tiling_search
from ..matmul.tiling import best_swizzle
from .geometry import map_rows_to_load, slab_boxes
from .kernel import simulate
from .problem import ConvProblem
from .schedule import block_work, busiest_block, member_rows
from .tiling import ConvTiles, ConvTiling, problems, tiled, ub_plan_of

#: block tiles the cyclic candidates try (and the balanced ones worked out per problem)
BLOCK_TILES = ((128, 256), (256, 128), (512, 64), (256, 64), (128, 128), (64, 256), (128, 64),
               (64, 128), (64, 64), (32, 64), (64, 32), (32, 32), (16, 64), (16, 32), (16, 16))
#: 2 x (TILE_M x TILE_N) fp32 fill the 256 KiB L0C of the 910: the largest tile the candidates take
L0C_TILE_ELEMS = 32768
#: (ramp, taper) pairs the teams candidates try
TAPERS = ((0, 0), (0, 2), (1, 0), (1, 2), (2, 4))
#: tilings simulated per search (the best estimates, and the best of each schedule)
SEARCH_LIMIT = 12
#: the search simulates only the best estimates within this factor of the best one, and the best
#: of each kind (schedule, weights and map resident or not) within KIND_SLACK: the estimate is
#: within a few per cent for the winners, so the far ones are not worth a simulation
SEARCH_SLACK = 1.10
KIND_SLACK = 1.25
#: below this estimate (cycles) the default tiling trusts the estimate and simulates nothing
SEARCH_MIN_CYCLES = 2000


def estimate_cycles(t: ConvTiling, chip) -> float:
    """A quick analytic estimate of the kernel's cycles (ranks tilings before the search).

    A copy occupies its pipe for bytes / rate and is then in flight for the pipe's start-up
    latency (:mod:`npulab.sim.gm`, :mod:`npulab.sim.timeline`): back-to-back copies overlap
    their start-ups, so no occupancy below has a start-up term (as in
    :func:`npulab.kernels.matmul.search.estimate_cycles`). On the busiest core:

    * per L1 step the slowest of the cube (its mmads' fractal steps; their start-up overlaps), MTE1 (img2col and
      weight loads), MTE2 (that step's bytes at the MTE2 rate, or its HBM part at the core's
      read share: the reads of a range by several cores share one fetch, a core's reads and
      writes split its share of HBM; map and weight copies each the longer of their L2 and HBM
      times) and the round trip of an L1 slot (copy, latency, until MTE1 has expanded it,
      over ``l1_buffers``);
    * FixPipe: the core's writes at its write share (on a chip with no FixPipe MTE3 writes them,
      and the vector unit's epilogue, :meth:`npulab.kernels.epilogue.UbPlan.vector_cycles`, is one
      more bound: the tiles one after the other);
    * filling the pipeline (the first step's copy and its latency) and draining it (the last
      tile's write, its epilogue and its latency)."""
    chip = get_chip(chip)
    p, s = t.problem, t.tiles
    c0, item = p.c0, p.np_dtype.itemsize
    pc = chip.pipes
    out_item = np.dtype(p.out_dtype).itemsize
    busiest = busiest_block(t)
    work = block_work(t, busiest)
    if not work:
        return 0.0
    active = min(s.block_dim, chip.ai_cores)
    share = chip.gm_share_bytes_per_cycle(active)
    if s.schedule == "teams":
        map_readers, team = t.columns, s.block_dim // t.columns
    else:
        map_readers, team = max(1, min(t.n_loops, active)), max(1, active // max(1, t.columns))
    steps, tiles = [], []                          # (cube, mte1, map bytes, weight bytes)
    plan = ub_plan_of(t, chip)                     # None: FixPipe writes the output
    cols_seen = set()
    if s.map_resident:
        run_boxes, run_elems = slab_boxes(p.geom, p.batch, *member_rows(t, busiest), c0)
        loaded: dict = {}
    for grp, m_off, m, n_idx, n in work:
        boxes, c1_elems = slab_boxes(p.geom, p.batch, m_off, m, c0)
        if s.map_resident:                         # only the rows the run has not loaded yet
            new_rows = item * sum(c[2] * c[3] for c in map_rows_to_load(p, run_boxes, run_elems,
                                                                        loaded, boxes))
        m1, n16 = ceil_div(m, FRACTAL_ROWS), round_up(n, FRACTAL_ROWS)
        new_col = (grp, n_idx) not in cols_seen
        cols_seen.add((grp, n_idx))
        first_step = len(steps)
        for c1_lo in range(0, p.c1, s.c1_step):
            cs = min(s.c1_step, p.c1 - c1_lo)
            kc = p.step_k(cs)
            ks = [min(s.tile_k0, kc - k) for k in range(0, kc, s.tile_k0)]
            # the step's mmads into one L0C tile: streaming, their fill and drain overlap the
            # cube's work; under ten fractals a PIPE_M barrier makes each pay both
            cu = sum(mmad_cost(chip, m, n16, kk, p.np_dtype)[0] for kk in ks)
            if m1 * (n16 // FRACTAL_ROWS) < PIPELINED_FRACTALS:
                cu += len(ks) * (chip.cube.fill_cycles + chip.cube.drain_cycles)
            mte1 = (m1 * 16 + n16) * kc * item / pc.mte1_bytes_per_cycle
            l0_trip = (mte1 + len(ks) * pc.mte1_startup_cycles + cu) / s.l0_buffers
            wload = (not s.w_resident) or new_col
            # an L1 slot is free once MTE1 has expanded its last K0 slice: MTE1 runs ahead of
            # the cube by the L0 buffers, so the slot waits for all but that many mmads
            hold = max(mte1 + len(ks) * pc.mte1_startup_cycles,
                       cu * max(0, len(ks) - s.l0_buffers) / len(ks))
            map_b = (new_rows if c1_lo == 0 else 0) if s.map_resident else cs * c1_elems * item
            steps.append((max(cu, l0_trip), mte1, map_b, kc * n16 * item if wload else 0,
                          hold))
        tiles.append((first_step, len(steps), m * n * out_item,
                      0.0 if plan is None else plan.vector_cycles(chip, m1 * 16, n16)))
    w_bytes = sum(st[3] for st in steps)
    writes = sum(x[2] for x in tiles)
    # HBM: a map range is fetched once for its readers; a column's weights once for the
    # cores of its team (L2 serves a core's and its team's repeats of the same window)
    w_col = p.k * round_up(s.tile_n, FRACTAL_ROWS) * item
    w_hbm = min(w_bytes, len(cols_seen) * w_col / team)
    w_frac = w_hbm / max(1, w_bytes)
    f0, f1, _, _ = tiles[0]
    l0, l1, last_w, last_v = tiles[-1]

    def hbm_of(st):
        return st[2] / map_readers + st[3] * w_frac

    # the first tile's reads fill the pipeline and the last tile's write drains it, each
    # with the core's whole share; between them reads and writes split it (:mod:`npulab.sim.gm`)
    mid_reads = sum(hbm_of(st) for st in steps[f1:])
    mid_writes = writes - last_w
    read_share = share * mid_reads / max(1.0, mid_reads + mid_writes) if mid_reads else share
    write_share = share * mid_writes / max(1.0, mid_reads + mid_writes) if mid_writes else share

    l2_rate = min(pc.mte2_bytes_per_cycle, max(share, chip.memory.l2_bytes_per_cycle / active))

    def m2(st, rs):
        # each copy takes the longer of its L2 time and its HBM part at its share: map and
        # weight copies separately, then summed
        rs = max(1e-9, rs)
        return (max(st[2] / l2_rate, st[2] / map_readers / rs)
                + max(st[3] / l2_rate, st[3] * w_frac / rs))

    m2s = [m2(st, share if i < f1 else read_share) for i, st in enumerate(steps)]
    lat2 = pc.mte2_startup_cycles
    compute = sum(max(st[0], st[1], m, (m + lat2 + st[4]) / s.l1_buffers) for st, m in zip(steps, m2s))
    first = m2s[0] + lat2
    out_rate, out_lat = (pc.fix_bytes_per_cycle, pc.fix_startup_cycles) if plan is None else \
        (pc.mte3_bytes_per_cycle, pc.mte3_startup_cycles)
    wrate = min(out_rate, write_share)
    fix = mid_writes / wrate + last_w / min(out_rate, share)
    first_tile = sum(st[0] for st in steps[f0:f1])
    last_tile = sum(st[0] for st in steps[l0:l1])
    drain = out_lat + last_v + last_w / min(out_rate, share)
    mte2 = sum(m2s)
    vector = sum(x[3] for x in tiles)
    # each bound with the part of the pipeline it cannot overlap: the cube and MTE2 wait for
    # the last write; the write (and the vector unit's epilogue) starts when the first tile is done
    return max(first + compute + drain, lat2 + mte2 + last_tile + drain, first + first_tile + fix + tiles[0][3],
               first + first_tile + vector + drain - last_v)


def _steps(c1: int) -> list[int]:
    """C1_STEP values: C1, then halving down to 1."""
    out, s = [], c1
    while True:
        out.append(s)
        if s == 1:
            return out
        s = ceil_div(s, 2)


def _k0(p: ConvProblem, chip, tm: int, tn: int) -> int:
    """The largest TILE_K0 (up to 256) that double-buffers in L0A and L0B for a tm x tn tile."""
    item = p.np_dtype.itemsize
    kmax = min(chip.buffer_bytes("L0A") // 2 // (round_up(tm, FRACTAL_ROWS) * item),
               chip.buffer_bytes("L0B") // 2 // (round_up(tn, FRACTAL_ROWS) * item))
    return min(kmax // p.k0 * p.k0, 256)


def _shapes(p: ConvProblem, chip: ChipSpec) -> list[ConvTiling]:
    """The block tiles and schedules the candidates start from (their K tiles not chosen yet)."""
    seen = set()
    m1 = ceil_div(p.m, FRACTAL_ROWS)
    balanced = []                  # block tiles whose count is close to a multiple of the cores
    for tn in (256, 128, 64):
        n_loops = p.groups * ceil_div(p.cout_e, tn)
        for rounds in range(1, 9):
            m_loops = ceil_div(rounds * chip.ai_cores, n_loops)
            tm = 16 * ceil_div(m1, m_loops)
            if 16 <= tm <= L0C_TILE_ELEMS // tn:
                balanced.append((tm, tn))
    shapes = []
    for tm, tn in BLOCK_TILES + tuple(balanced):
        tm = max(16, min(tm, round_up(p.m, 16)))
        tn = max(16, min(tn, round_up(p.cout_e, 16)))
        if (tm, tn) not in seen:
            seen.add((tm, tn))
            base = tiled(p, tile_m=tm, tile_n=tn, schedule="cyclic")
            shapes.append(base.with_tiles(block_dim=min(chip.ai_cores, base.core_loops)))
    # teams: one column per TILE_N choice whose column count divides into the cores
    for tn in sorted({min(v, round_up(p.cout_e, 16)) for v in (256, 192, 128, 96, 64, 48, 32, 16)},
                     reverse=True):
        cols = p.groups * ceil_div(p.cout_e, tn)
        if cols > chip.ai_cores:
            continue
        team = chip.ai_cores // cols
        rows = ceil_div(m1, team)                     # fractal rows of the busiest member
        # the tallest tile whose L0A still double-buffers one channel block's taps x C0
        # (TILE_K0 = a whole step of C1_STEP = 1: the fewest mmads, so the fewest start-ups)
        tk = p.step_k(1)
        tm_k = chip.buffer_bytes("L0A") // 2 // (tk * p.np_dtype.itemsize) // 16 * 16
        tms = []
        for per_core in range(1, 9):               # 1 to 8 tiles a core, the first that fit
            tm = 16 * ceil_div(rows, per_core)
            if tm * tn <= L0C_TILE_ELEMS:
                tms.append(tm)
                if per_core * 16 >= rows:
                    break
        if tk > p.k0 and 16 <= tm_k < rows * 16:
            tms.append(tm_k)
        for tm in tms:
            if tm * tn > L0C_TILE_ELEMS or (tm, tn, "teams") in seen:
                continue
            seen.add((tm, tn, "teams"))
            for ramp, taper in TAPERS:
                if max(ramp, taper) < tm // 16:
                    shapes.append(tiled(p, tile_m=tm, tile_n=tn, schedule="teams", block_dim=team * cols,
                                        ramp=ramp, taper=taper))
    return shapes


def candidates(p: ConvProblem, chip=DEFAULT_CHIP):
    """Every tiling the default tiling function considers for problem ``p`` (see the module
    docstring), each fitting the chip; cyclic ones carry the matmul templates' best swizzle."""
    chip = get_chip(chip)
    for base in _shapes(p, chip):
        k0 = _k0(p, chip, base.tiles.tile_m, base.tiles.tile_n)
        if k0 < p.k0:
            continue
        # teams with a kernel wider than 1 x 1: also keep each core's input rows in L1
        teams = base.tiles.schedule == "teams"
        maps = (False, True) if teams and p.geom.taps > 1 and p.geom.d == 1 else (False,)
        for resident in (True, False):
            for c1_step in _steps(p.c1):
                for map_res in maps if resident else (False,):      # map resident: weights too
                    cand = base.with_tiles(c1_step=c1_step, w_resident=resident, map_resident=map_res,
                                           tile_k0=min(k0, round_up(p.step_k(c1_step), p.k0)))
                    if not problems(cand, chip):
                        yield cand if teams else cand.with_tiles(**best_swizzle(cand.gemm, chip))


def _shortlist(search_: bool | None):
    """The tilings the default tiling simulates, from the ranked candidates: none when the best
    estimate is under SEARCH_MIN_CYCLES (unless ``search_``), else the SEARCH_LIMIT best within
    SEARCH_SLACK of the best, plus the best of each kind within KIND_SLACK."""
    def pick(scored):
        best_est = scored[0][0]
        if not (search_ or (search_ is None and best_est > SEARCH_MIN_CYCLES)):
            return []
        chosen = [sc for sc in scored[:SEARCH_LIMIT] if sc[0] <= best_est * SEARCH_SLACK]
        for kind in [(sch, res, mres) for sch in ("cyclic", "teams") for res in (True, False)
                     for mres in (False, True)]:
            top = next((sc for sc in scored if (sc[2].tiles.schedule, sc[2].tiles.w_resident,
                                                sc[2].tiles.map_resident) == kind), None)
            if top is not None and top not in chosen and top[0] <= best_est * KIND_SLACK:
                chosen.append(top)
        return chosen
    return pick


def default_tiling(p: ConvProblem, chip: "ChipSpec | str" = DEFAULT_CHIP, *,
                   search: bool | None = None) -> ConvTiling:
    """The tiling used when none is given or tuned.

    Every candidate of :func:`candidates` is ranked by :func:`estimate_cycles`. When ``search``
    (default: when the best estimate passes ``SEARCH_MIN_CYCLES``, i.e. a layer worth tuning)
    the ``SEARCH_LIMIT`` best, plus the best of each schedule with weights resident and streamed
    and the map resident or not, are simulated in timing mode (no operand data) and the fewest
    simulated cycles win: the estimate ranks, the simulator decides. ``search=False``: the
    estimate's favourite. The answer is kept in the tiling cache."""
    kind = {None: "default", True: "default-searched", False: "default-estimated"}[search]
    return tiling_search.search(p, chip, _shortlist(search), kind=kind, name="default")


CONV = tiling_search.register(ConvProblem, tiling_search.Family(
    "conv", ConvTiling, ConvTiles, candidates=candidates, estimate=estimate_cycles, simulate=simulate,
    default=default_tiling, problems=problems))


__all__ = ["estimate_cycles", "candidates", "default_tiling", "CONV", "BLOCK_TILES", "L0C_TILE_ELEMS",
           "TAPERS", "SEARCH_LIMIT", "SEARCH_SLACK", "KIND_SLACK", "SEARCH_MIN_CYCLES"]
