"""Host side of the matmul templates: the tiling struct, named recipes, the "can implement"
check and the default tiling function.

A tiling cuts C = A (M, K) x B (K, N) three times, as catlass does (data/FACTS.md, catlass):

* **block tiles** TILE_M x TILE_N of C, one per loop of the block scheduler, spread over the
  cores (with a swizzle so that cores running at the same time share A and B tiles in L2);
  one block tile is also the L0C tile the cube accumulates into;
* **L1 tiles**: the K dimension in steps of TILE_K; A (TILE_M x TILE_K) and B (TILE_K x
  TILE_N) sit in L1, ``l1_buffers`` of each (2 = ping-pong);
* **L0 tiles**: each L1 step is fed to the cube in steps of TILE_K0 through L0A/L0B,
  ``l0_buffers`` of each; L0C holds ``l0c_buffers`` block tiles in fp32 (int32 for int8), so
  FixPipe drains one tile while the cube fills the next.

Every buffer's demand must fit its capacity: :func:`can_implement` says which one does not.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from .. import formats as F
from ..chips import ChipSpec, get_chip
from ..errors import BufferOverflowError, ShapeError
from ..sim.memory import fmt_bytes
from ..arch import DEFAULT_CHIP, ceil_div, round_up

SUPPORTED = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.int8))
ACC_DTYPE = {np.dtype(np.float16): np.dtype(np.float32), np.dtype(np.float32): np.dtype(np.float32),
             np.dtype(np.int8): np.dtype(np.int32)}
OUT_DTYPE = {np.dtype(np.float16): np.dtype(np.float16), np.dtype(np.float32): np.dtype(np.float32),
             np.dtype(np.int8): np.dtype(np.int32)}
BIAS_SLOTS = 2          # bias of tile t+1 loads while FixPipe still reads tile t's
MAX_MNK = 4095

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
class MatmulTiling:
    """The TilingData struct of the matmul kernel (host fills it, kernel reads it)."""
    batch: int
    m: int
    n: int
    k: int
    dtype: str
    tile_m: int                 # TILE_M: rows of a block tile (= L0C tile)
    tile_n: int                 # TILE_N
    tile_k: int                 # TILE_K: K of one L1 step
    tile_k0: int                # TILE_K0: K of one L0 step (one mmad)
    l1_buffers: int = 2
    l0_buffers: int = 2
    l0c_buffers: int = 2
    block_dim: int = 1
    swizzle_offset: int = 1     # catlass GemmIdentityBlockSwizzle<offset, direction>
    swizzle_direction: int = 0  # 0: Zn (walk m within a band of `offset` rows), 1: Nz
    trans_a: bool = False
    trans_b: bool = False
    has_bias: bool = False
    relu: bool = False
    name: str = "custom"
    sample_loops: int = 0       # > 0: each block runs only its first N block tiles (estimates)

    # -- derived ------------------------------------------------------------------------------
    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def acc_dtype(self) -> np.dtype:
        return ACC_DTYPE[self.np_dtype]

    @property
    def out_dtype(self) -> np.dtype:
        return OUT_DTYPE[self.np_dtype]

    @property
    def m_loops(self) -> int:
        return ceil_div(self.m, self.tile_m)

    @property
    def n_loops(self) -> int:
        return ceil_div(self.n, self.tile_n)

    @property
    def core_loops(self) -> int:
        """Block tiles in the whole problem (the block scheduler's loop count)."""
        return self.batch * self.m_loops * self.n_loops

    @property
    def macs(self) -> int:
        return self.batch * self.m * self.n * self.k

    def to_dict(self) -> dict:
        return asdict(self)

    def recipe(self) -> str:
        """Short text: 'TILE_M x TILE_N x TILE_K / TILE_K0, buffers L1/L0/L0C, swizzle'."""
        return (f"{self.tile_m}x{self.tile_n}x{self.tile_k}/k0={self.tile_k0} "
                f"buf={self.l1_buffers}/{self.l0_buffers}/{self.l0c_buffers} "
                f"swz={self.swizzle_offset}{'Zn' if self.swizzle_direction == 0 else 'Nz'} "
                f"blocks={self.block_dim}")


# -- buffer demand ----------------------------------------------------------------------------
def _nz_elems(rows: int, cols: int, c0: int) -> int:
    return round_up(rows, 16) * round_up(cols, c0)


def buffer_demand(t: MatmulTiling) -> dict[str, tuple[int, str]]:
    """Bytes each buffer must hold for tiling ``t``, with how the figure is made."""
    dt = t.np_dtype
    item, c0 = dt.itemsize, F.c0_of(dt)
    a_l1 = _nz_elems(t.tile_k, t.tile_m, c0) if t.trans_a else _nz_elems(t.tile_m, t.tile_k, c0)
    b_l1 = _nz_elems(t.tile_n, t.tile_k, c0) if t.trans_b else _nz_elems(t.tile_k, t.tile_n, c0)
    bias = round_up(t.tile_n * 4, 32) * BIAS_SLOTS if t.has_bias else 0
    l1 = t.l1_buffers * (a_l1 + b_l1) * item + bias
    l0a = t.l0_buffers * round_up(t.tile_m, 16) * round_up(t.tile_k0, c0) * item
    l0b = t.l0_buffers * round_up(t.tile_k0, c0) * round_up(t.tile_n, 16) * item
    l0c = t.l0c_buffers * round_up(t.tile_m, 16) * round_up(t.tile_n, 16) * 4
    name = dt.name
    return {
        "L1": (l1, f"{t.l1_buffers} x (A {t.tile_m}x{t.tile_k} + B {t.tile_k}x{t.tile_n}) {name}"
                   + (f" + bias {BIAS_SLOTS} x {t.tile_n} x 4 B" if t.has_bias else "")),
        "L0A": (l0a, f"{t.l0_buffers} x A {t.tile_m}x{t.tile_k0} {name}"),
        "L0B": (l0b, f"{t.l0_buffers} x B {t.tile_k0}x{t.tile_n} {name}"),
        "L0C": (l0c, f"{t.l0c_buffers} x C {t.tile_m}x{t.tile_n} {t.acc_dtype.name}"),
    }


def problems(t: MatmulTiling, chip: "ChipSpec | str" = DEFAULT_CHIP) -> list[str]:
    """Every reason tiling ``t`` cannot run on ``chip`` (empty: it can)."""
    chip = get_chip(chip)
    out = []
    c0 = F.c0_of(t.np_dtype)
    for name, v in (("tile_m", t.tile_m), ("tile_n", t.tile_n)):
        if v < 16 or v % 16 or v > MAX_MNK:
            out.append(f"{name}={v} must be a multiple of 16 in 16..{MAX_MNK // 16 * 16}")
    if t.tile_k0 < c0 or t.tile_k0 % c0 or t.tile_k0 > MAX_MNK:
        out.append(f"tile_k0={t.tile_k0} must be a multiple of K0={c0} ({t.dtype}) up to {MAX_MNK}")
    if t.tile_k < t.tile_k0 or t.tile_k % max(1, t.tile_k0):
        out.append(f"tile_k={t.tile_k} must be a positive multiple of tile_k0={t.tile_k0}")
    for name in ("l1_buffers", "l0_buffers", "l0c_buffers"):
        if getattr(t, name) not in (1, 2):
            out.append(f"{name}={getattr(t, name)} must be 1 or 2")
    if t.block_dim < 1:
        out.append(f"block_dim={t.block_dim} must be at least 1")
    if t.swizzle_offset < 1 or t.swizzle_direction not in (0, 1):
        out.append(f"swizzle ({t.swizzle_offset}, {t.swizzle_direction}): offset >= 1, direction 0 or 1")
    if out:
        return out
    for buf, (need, how) in buffer_demand(t).items():
        cap = chip.buffer_bytes(buf)
        if need > cap:
            out.append(f"{buf} needs {fmt_bytes(need)} ({need} B: {how}) but holds "
                       f"{fmt_bytes(cap)} ({cap} B) on chip '{chip.name}'")
    return out


def can_implement(t: MatmulTiling, chip: "ChipSpec | str" = DEFAULT_CHIP) -> bool:
    """catlass's ``CanImplement``: raise BufferOverflowError / ShapeError naming the buffer,
    the demand and the capacity if ``t`` cannot run on ``chip``; else return True."""
    found = problems(t, chip)
    if not found:
        return True
    cls = BufferOverflowError if any(" needs " in p for p in found) else ShapeError
    raise cls(f"matmul tiling {t.recipe()} cannot run: " + "; ".join(found) +
              ". Fix: lower TILE_M / TILE_N / TILE_K / TILE_K0 or use fewer buffers.")


# -- building tilings -------------------------------------------------------------------------
def check_problem(batch: int, m: int, n: int, k: int, dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in SUPPORTED:
        raise ShapeError(f"matmul: dtype {dt} is not supported; expected float16, float32 or int8")
    for name, v in (("batch", batch), ("M", m), ("N", n), ("K", k)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ShapeError(f"matmul: {name}={v!r} must be a positive integer")
    return dt


def _clamp(tile: int, dim: int, unit: int) -> int:
    """A tile no larger than the dimension needs (rounded up to ``unit``)."""
    return max(unit, min(tile, round_up(dim, unit)))


def make_tiling(shape, dtype, chip: "ChipSpec | str" = DEFAULT_CHIP, recipe: "str | tuple" = "catlass", *,
                block_dim: int | None = None, swizzle_offset: int = 1, swizzle_direction: int = 0,
                trans_a: bool = False, trans_b: bool = False, has_bias: bool = False,
                relu: bool = False, clamp: bool = True, name: str | None = None) -> MatmulTiling:
    """A tiling for ``shape`` = (batch, M, N, K) or (M, N, K) from a named recipe (see
    ``TILINGS``) or a 7-tuple (TILE_M, TILE_N, TILE_K, TILE_K0, l1, l0, l0c buffers). With
    ``clamp`` tiles shrink to the problem (a 16 x 16 x 16 problem does not need 128 x 256
    tiles). block_dim defaults to min(cores, block tiles)."""
    chip = get_chip(chip)
    if len(shape) == 3:
        shape = (1,) + tuple(shape)
    batch, m, n, k = (int(v) for v in shape)
    dt = check_problem(batch, m, n, k, dtype)
    c0 = F.c0_of(dt)
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
        tm, tn = _clamp(tm, m, 16), _clamp(tn, n, 16)
        tk0 = _clamp(tk0, k, c0)
        tk = _clamp(tk, k, tk0)
    t = MatmulTiling(batch, m, n, k, dt.name, tm, tn, tk, tk0, l1, l0, l0c, 1, swizzle_offset,
                     swizzle_direction, trans_a, trans_b, has_bias, relu, name or "custom")
    bd = block_dim if block_dim is not None else min(chip.ai_cores, t.core_loops)
    return replace(t, block_dim=int(bd))


#: block tiles the default tiling tries, largest first
BLOCK_TILES = ((256, 256), (128, 256), (256, 128), (128, 128), (128, 64), (64, 128), (64, 64),
               (64, 32), (32, 64), (32, 32), (32, 16), (16, 32), (16, 16))


def _fit(batch, m, n, k, dt, c0, chip, tm, tn, kw):
    """The double-buffered tiling with block tile tm x tn and the largest TILE_K0 / TILE_K that
    fit, or None."""
    for tk0 in (128, 64, 32, 16, 8):
        if tk0 % c0:
            continue
        for mult in (8, 4, 2, 1):
            t = make_tiling((batch, m, n, k), dt, chip, (tm, tn, tk0 * mult, tk0, 2, 2, 2), **kw)
            if not problems(t, chip):
                return replace(t, **best_swizzle(t, chip))
    return None


def swizzle_coord(t: MatmulTiling, loop_idx: int, offset: int | None = None,
                  direction: int | None = None) -> tuple[int, int, int]:
    """(batch, m index, n index) of block tile ``loop_idx``: catlass's
    ``GemmIdentityBlockSwizzle<offset, direction>``. Direction 0 ("Zn") walks down a band of
    ``offset`` tile rows before moving right (and back left in the next band); direction 1
    ("Nz") the same with rows and columns exchanged."""
    off = t.swizzle_offset if offset is None else offset
    direction = t.swizzle_direction if direction is None else direction
    ml, nl = t.m_loops, t.n_loops
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
    wave = min(get_chip(chip).ai_cores, t.block_dim, t.core_loops)
    coords = [swizzle_coord(t, i, offset, direction) for i in range(wave)]
    rows = {(b, m) for b, m, _ in coords}
    cols = {(b, n) for b, _, n in coords}
    return len(rows) * t.tile_m + len(cols) * t.tile_n


def best_swizzle(t: MatmulTiling, chip) -> dict:
    """The swizzle whose first wave touches the fewest distinct A and B bytes (ties: the
    smaller offset), so that the tiles running at once share A rows and B columns in L2."""
    options = [(wave_bytes(t, chip, off, d), off, d) for d in (0, 1) for off in (1, 2, 4, 8, 16)]
    _, off, d = min(options)
    return {"swizzle_offset": off, "swizzle_direction": d}


def default_tiling(shape, dtype, chip: "ChipSpec | str" = DEFAULT_CHIP, **kw) -> MatmulTiling:
    """The tiling function used when nothing is tuned: the largest double-buffered block tile
    (from 256 x 256 down) that fits every buffer, shrunk while there are fewer block tiles than
    cores; TILE_K0 as large as L0A/L0B allow (up to 128), TILE_K up to 8 x TILE_K0 as L1
    allows; the swizzle of :func:`best_swizzle`."""
    chip = get_chip(chip)
    if len(shape) == 3:
        shape = (1,) + tuple(shape)
    batch, m, n, k = (int(v) for v in shape)
    dt = check_problem(batch, m, n, k, dtype)
    c0 = F.c0_of(dt)
    fits = []
    for tm, tn in BLOCK_TILES:
        t = _fit(batch, m, n, k, dt, c0, chip, tm, tn, kw)
        if t is None:
            continue
        if t.core_loops >= chip.ai_cores:
            return replace(t, name="default")
        fits.append(t)
    if not fits:
        raise BufferOverflowError(f"no matmul tiling of {dt.name} fits chip '{chip.name}' "
                                  f"(even 16 x 16 tiles overflow a buffer)")
    best = max(fits, key=lambda t: t.core_loops)          # too few tiles for the cores: the most
    return replace(best, name="default")
