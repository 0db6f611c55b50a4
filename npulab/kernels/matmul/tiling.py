"""Host side of the matmul templates: the tiles (catlass's Params, derived from the problem), named
recipes, the block swizzle, the "can implement" check and the default tiling function.

A tiling cuts C = A (M, K) x B (K, N) three times, as catlass does (data/FACTS.md, catlass):

* **block tiles** TILE_M x TILE_N of C, one per loop of the block scheduler, spread over the
  cores (with a swizzle so that cores running at the same time share A and B tiles in L2);
  one block tile is also the L0C tile the cube accumulates into;
* **L1 tiles**: the K dimension in steps of TILE_K; A (TILE_M x TILE_K) and B (TILE_K x
  TILE_N) sit in L1, ``l1_buffers`` of each (2 = ping-pong);
* **L0 tiles**: each L1 step is fed to the cube in steps of TILE_K0 through L0A/L0B,
  ``l0_buffers`` of each; L0C holds ``l0c_buffers`` block tiles in fp32 (int32 for int8), so
  FixPipe drains one tile while the cube fills the next.

A :class:`MatmulTiling` is the problem (:class:`~npulab.kernels.matmul.problem.MatmulProblem`)
with its :class:`MatmulTiles`: what the host hands the kernel. Every buffer's demand must fit its
capacity: :func:`can_implement` says which one does not.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...arch import DEFAULT_CHIP, FRACTAL_ROWS, c0_of, round_up
from ...chips import ChipSpec, get_chip
from ...errors import BufferOverflowError, ShapeError
from ..epilogue import Epilogue, UbPlan, ub_demand, ub_plan
from ..tiling_data import TilingData, over_capacity, raise_unless_fits, tile_rules
from .problem import MatmulProblem

BIAS_SLOTS = 2          # bias of tile t+1 loads while FixPipe still reads tile t's

#: Named recipes: (TILE_M, TILE_N, TILE_K, TILE_K0, l1_buffers, l0_buffers, l0c_buffers).
#: "seed": the course seeds' fixed 128 x 64 x 32 blocking, double buffered;
#: "naive": minimal 16 x 16 x K0 tiles, single buffered everywhere (K0 = 16 for fp16);
#: "catlass": the catlass A2 example shape (L1 128 x 256 x 256, L0 128 x 256 x 64).
TILINGS = {
    "seed": (128, 64, 32, 32, 2, 2, 2),
    "naive": (16, 16, 0, 0, 1, 1, 1),
    "catlass": (128, 256, 256, 64, 2, 2, 2),
}


@dataclass(frozen=True)
class MatmulTiles:
    """The knobs a tiling function (or a learner) chooses."""
    tile_m: int                 # TILE_M: rows of a block tile (= L0C tile)
    tile_n: int                 # TILE_N
    tile_k: int                 # TILE_K: K of one L1 step
    tile_k0: int                # TILE_K0: K of one L0 step (one mmad)
    l1_buffers: int = 2
    l0_buffers: int = 2
    l0c_buffers: int = 2
    block_dim: int = 1
    swizzle_offset: int = 1     # catlass GemmIdentityBlockSwizzle<offset, direction>
    swizzle_direction: int = 0  # 0: Zn (walk m within a band of `offset` rows), 1: Nz, 2: a static
                                # grid of `offset` core rows, each core one block of whole tiles


@dataclass(frozen=True)
class MatmulTiling(TilingData):
    """The TilingData struct of the matmul kernel (the host fills it, the kernel reads it): the
    problem, its tiles, and where the tiles came from (``name``: a recipe, "default", "tuned")."""
    problem: MatmulProblem
    tiles: MatmulTiles
    name: str = "custom"

    def recipe(self) -> str:
        """Short text: 'TILE_M x TILE_N x TILE_K / TILE_K0, buffers L1/L0/L0C, swizzle'."""
        s = self.tiles
        return (f"{s.tile_m}x{s.tile_n}x{s.tile_k}/k0={s.tile_k0} "
                f"buf={s.l1_buffers}/{s.l0_buffers}/{s.l0c_buffers} "
                f"swz={s.swizzle_offset}{SWIZZLE_NAMES[s.swizzle_direction]} "
                f"blocks={s.block_dim}")


#: the recipe's name of each swizzle direction
SWIZZLE_NAMES = {0: "Zn", 1: "Nz", 2: "Grid"}


# -- buffer demand ----------------------------------------------------------------------------
def nz_elems(rows: int, cols: int, c0: int) -> int:
    """Elements of a (rows, cols) tile in NZ: whole 16-row fractals of C0 columns."""
    return round_up(rows, FRACTAL_ROWS) * round_up(cols, c0)


def l1_tile_bytes(t: MatmulTiling) -> tuple[int, int]:
    """Bytes of one L1 slot of A and of B (NZ, transposed tiles as stored)."""
    p, s = t.problem, t.tiles
    c0, item = c0_of(p.np_dtype), p.np_dtype.itemsize
    a = nz_elems(s.tile_k, s.tile_m, c0) if p.trans_a else nz_elems(s.tile_m, s.tile_k, c0)
    b = nz_elems(s.tile_n, s.tile_k, c0) if p.trans_b else nz_elems(s.tile_k, s.tile_n, c0)
    return a * item, b * item


def l0_tile_bytes(t: MatmulTiling) -> tuple[int, int, int]:
    """Bytes of one L0A, L0B and L0C slot."""
    p, s = t.problem, t.tiles
    c0, item = c0_of(p.np_dtype), p.np_dtype.itemsize
    return (round_up(s.tile_m, FRACTAL_ROWS) * round_up(s.tile_k0, c0) * item,
            round_up(s.tile_k0, c0) * round_up(s.tile_n, FRACTAL_ROWS) * item,
            round_up(s.tile_m, FRACTAL_ROWS) * round_up(s.tile_n, FRACTAL_ROWS) * 4)


def epilogue_of(p: MatmulProblem) -> Epilogue:
    """What the matmul does on the way out: + bias (N values of the accumulator dtype), ReLU, the
    cast to the output dtype."""
    return Epilogue(p.acc_dtype.name, p.out_dtype.name, ("bias",) if p.has_bias else (), None, p.relu)


def ub_plan_of(t: MatmulTiling, chip: "ChipSpec | str") -> UbPlan | None:
    """How a block tile goes through UB on ``chip`` (None on a chip with FixPipe)."""
    return ub_plan(epilogue_of(t.problem), t.tiles.tile_m, t.tiles.tile_n, get_chip(chip))


def buffer_demand(t: MatmulTiling, chip: "ChipSpec | str | None" = None) -> dict[str, tuple[int, str]]:
    """Bytes each buffer must hold for tiling ``t``, with how the figure is made: the cube's
    buffers, and, given a ``chip`` whose cube output goes through UB (the 910, 310), the UB the
    epilogue takes there."""
    p, s = t.problem, t.tiles
    a_l1, b_l1 = l1_tile_bytes(t)
    a_l0, b_l0, c_l0 = l0_tile_bytes(t)
    bias = round_up(s.tile_n * 4, 32) * BIAS_SLOTS if p.has_bias else 0
    name = p.np_dtype.name
    return {
        "L1": (s.l1_buffers * (a_l1 + b_l1) + bias,
               f"{s.l1_buffers} x (A {s.tile_m}x{s.tile_k} + B {s.tile_k}x{s.tile_n}) {name}"
               + (f" + bias {BIAS_SLOTS} x {s.tile_n} x 4 B" if p.has_bias else "")),
        "L0A": (s.l0_buffers * a_l0, f"{s.l0_buffers} x A {s.tile_m}x{s.tile_k0} {name}"),
        "L0B": (s.l0_buffers * b_l0, f"{s.l0_buffers} x B {s.tile_k0}x{s.tile_n} {name}"),
        "L0C": (s.l0c_buffers * c_l0, f"{s.l0c_buffers} x C {s.tile_m}x{s.tile_n} {p.acc_dtype.name}"),
    } | ub_demand(None if chip is None else ub_plan_of(t, chip))


def problems(t: MatmulTiling, chip: "ChipSpec | str" = DEFAULT_CHIP) -> list[str]:
    """Every reason tiling ``t`` cannot run on ``chip`` (empty: it can)."""
    chip = get_chip(chip)
    s = t.tiles
    out = tile_rules(s, c0_of(t.problem.np_dtype), "K0", t.problem.dtype)
    if s.tile_k < s.tile_k0 or s.tile_k % max(1, s.tile_k0):
        out.append(f"tile_k={s.tile_k} must be a positive multiple of tile_k0={s.tile_k0}")
    if s.swizzle_offset < 1 or s.swizzle_direction not in SWIZZLE_NAMES:
        out.append(f"swizzle ({s.swizzle_offset}, {s.swizzle_direction}): offset >= 1, direction 0, 1 or 2")
    elif s.swizzle_direction == 2 and (why := grid_problem(t)):
        out.append(why)
    return out or over_capacity(buffer_demand(t, chip), chip)


def can_implement(t: MatmulTiling, chip: "ChipSpec | str" = DEFAULT_CHIP) -> bool:
    """catlass's ``CanImplement``: raise BufferOverflowError / ShapeError naming the buffer,
    the demand and the capacity if ``t`` cannot run on ``chip``; else return True."""
    return raise_unless_fits(problems(t, chip), f"matmul tiling {t.recipe()}",
                             "lower TILE_M / TILE_N / TILE_K / TILE_K0 or use fewer buffers.")


# -- building tilings -------------------------------------------------------------------------
def _clamp(tile: int, dim: int, unit: int) -> int:
    """A tile no larger than the dimension needs (rounded up to ``unit``)."""
    return max(unit, min(tile, round_up(dim, unit)))


def make_tiling(problem: MatmulProblem, chip: "ChipSpec | str" = DEFAULT_CHIP,
                recipe: "str | tuple" = "catlass", *, block_dim: int | None = None,
                swizzle_offset: int = 1, swizzle_direction: int = 0, clamp: bool = True,
                name: str | None = None) -> MatmulTiling:
    """A tiling of ``problem`` from a named recipe (see ``TILINGS``) or a 7-tuple (TILE_M,
    TILE_N, TILE_K, TILE_K0, l1, l0, l0c buffers). With ``clamp`` tiles shrink to the problem
    (a 16 x 16 x 16 problem does not need 128 x 256 tiles). block_dim defaults to min(cores,
    block tiles)."""
    chip = get_chip(chip)
    c0 = c0_of(problem.np_dtype)
    if isinstance(recipe, str):
        if recipe not in TILINGS:
            raise ShapeError(f"unknown tiling {recipe!r}; named tilings are {', '.join(TILINGS)}")
        name = name or recipe
        tm, tn, tk, tk0, l1, l0, l0c = TILINGS[recipe]
    else:
        tm, tn, tk, tk0, l1, l0, l0c = (int(v) for v in recipe)
    tk0 = tk0 or c0
    tk = tk or tk0
    tk0 = round_up(tk0, c0)
    tk = round_up(tk, tk0)
    if clamp:
        tm, tn = _clamp(tm, problem.m, 16), _clamp(tn, problem.n, 16)
        tk0 = _clamp(tk0, problem.k, c0)
        tk = _clamp(tk, problem.k, tk0)
    t = MatmulTiling(problem, MatmulTiles(tm, tn, tk, tk0, l1, l0, l0c, 1, swizzle_offset, swizzle_direction),
                     name or "custom")
    return t.with_tiles(block_dim=int(block_dim if block_dim is not None else min(chip.ai_cores, t.core_loops)))


# -- the block swizzle ------------------------------------------------------------------------
def grid_problem(t: MatmulTiling) -> str | None:
    """Why the static core grid of ``t`` (direction 2: ``swizzle_offset`` core rows of
    ``block_dim / offset`` cores) cannot cut its tiles into equal whole blocks, or None."""
    s, rows = t.tiles, t.tiles.swizzle_offset
    cols = s.block_dim // rows
    if rows * cols != s.block_dim or t.m_loops % rows or t.n_loops % cols or t.problem.batch != 1:
        return (f"a static grid of {rows} core rows takes a block_dim ({s.block_dim}) that is a multiple of "
                f"{rows}, {t.m_loops} x {t.n_loops} tiles that split evenly over the grid, and batch 1")
    return None


def swizzle_coord(t: MatmulTiling, loop_idx: int, offset: int | None = None,
                  direction: int | None = None) -> tuple[int, int, int]:
    """(batch, m index, n index) of block tile ``loop_idx``: catlass's
    ``GemmIdentityBlockSwizzle<offset, direction>``. Direction 0 ("Zn") walks down a band of
    ``offset`` tile rows before moving right (and back left in the next band); direction 1
    ("Nz") the same with rows and columns exchanged. Direction 2 ("Grid") is the static split of
    pto-isa's GEMM baseline: the cores form ``offset`` rows of ``block_dim / offset``, each owns
    one block of whole tiles and walks it row by row (core ``i % block_dim`` runs loop ``i``)."""
    off = t.tiles.swizzle_offset if offset is None else offset
    direction = t.tiles.swizzle_direction if direction is None else direction
    ml, nl = t.m_loops, t.n_loops
    if direction == 2:
        cols = t.tiles.block_dim // off
        core, step = loop_idx % t.tiles.block_dim, loop_idx // t.tiles.block_dim
        block_m, block_n = ml // off, nl // cols
        (cm, cn), (lm, ln) = divmod(core, cols), divmod(step, block_n)
        return 0, cm * block_m + lm, cn * block_n + ln
    batch, inner = divmod(loop_idx, ml * nl)
    if direction == 0:                                      # Zn
        band, pos = divmod(inner, off * nl)
        rows = min(off, ml - band * off)
        m_idx = band * off + pos % rows
        n_idx = pos // rows
        if band % 2:
            n_idx = nl - n_idx - 1
    else:                                                   # Nz
        band, pos = divmod(inner, off * ml)
        cols = min(off, nl - band * off)
        m_idx = pos // cols
        n_idx = band * off + pos % cols
        if band % 2:
            m_idx = ml - m_idx - 1
    return batch, m_idx, n_idx


def wave_bytes(t: MatmulTiling, chip, offset: int, direction: int) -> int:
    """Bytes of distinct A rows and B columns (per unit of K) the first wave of block tiles
    (one per core) touches under a swizzle: what L2 must fetch from HBM for it."""
    wave = min(get_chip(chip).ai_cores, t.tiles.block_dim, t.core_loops)
    coords = [swizzle_coord(t, i, offset, direction) for i in range(wave)]
    rows = {(b, m) for b, m, _ in coords}
    cols = {(b, n) for b, _, n in coords}
    return len(rows) * t.tiles.tile_m + len(cols) * t.tiles.tile_n


def best_swizzle(t: MatmulTiling, chip) -> dict:
    """The swizzle whose first wave touches the fewest distinct A and B bytes (ties: the
    smaller offset), so that the tiles running at once share A rows and B columns in L2."""
    options = [(wave_bytes(t, chip, off, d), off, d) for d in (0, 1) for off in (1, 2, 4, 8, 16)]
    _, off, d = min(options)
    return {"swizzle_offset": off, "swizzle_direction": d}


# -- the default tiling function --------------------------------------------------------------
#: block tiles the default tiling tries, largest first
BLOCK_TILES = ((256, 256), (128, 256), (256, 128), (128, 128), (128, 64), (64, 128), (64, 64),
               (64, 32), (32, 64), (32, 32), (32, 16), (16, 32), (16, 16))


def _fit(problem: MatmulProblem, chip, tm: int, tn: int) -> MatmulTiling | None:
    """The double-buffered tiling with block tile tm x tn and the largest TILE_K0 / TILE_K that
    fit, or None."""
    c0 = c0_of(problem.np_dtype)
    for tk0 in (128, 64, 32, 16, 8):
        if tk0 % c0:
            continue
        for mult in (8, 4, 2, 1):
            t = make_tiling(problem, chip, (tm, tn, tk0 * mult, tk0, 2, 2, 2))
            if not problems(t, chip):
                return t.with_tiles(**best_swizzle(t, chip))
    return None


def default_tiling(problem: MatmulProblem, chip: "ChipSpec | str" = DEFAULT_CHIP) -> MatmulTiling:
    """The tiling function used when nothing is tuned: the largest double-buffered block tile
    (from 256 x 256 down) that fits every buffer, shrunk while there are fewer block tiles than
    cores; TILE_K0 as large as L0A/L0B allow (up to 128), TILE_K up to 8 x TILE_K0 as L1
    allows; the swizzle of :func:`best_swizzle`."""
    chip = get_chip(chip)
    fits = []
    for tm, tn in BLOCK_TILES:
        t = _fit(problem, chip, tm, tn)
        if t is None:
            continue
        if t.core_loops >= chip.ai_cores:
            return replace(t, name="default")
        fits.append(t)
    if not fits:
        raise BufferOverflowError(f"no matmul tiling of {problem.dtype} fits chip '{chip.name}' "
                                  f"(even 16 x 16 tiles overflow a buffer)")
    best = max(fits, key=lambda t: t.core_loops)          # too few tiles for the cores: the most
    return replace(best, name="default")


__all__ = ["MatmulTiles", "MatmulTiling", "TILINGS", "BIAS_SLOTS", "BLOCK_TILES", "nz_elems", "l1_tile_bytes",
           "l0_tile_bytes", "epilogue_of", "ub_plan_of", "buffer_demand", "problems", "can_implement", "make_tiling", "swizzle_coord",
           "wave_bytes", "best_swizzle", "default_tiling", "grid_problem", "SWIZZLE_NAMES"]
