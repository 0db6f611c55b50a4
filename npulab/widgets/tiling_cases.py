"""What the tiling explorer needs to know about an operator: its knobs, the bytes each buffer
must hold for a choice of knobs, and a timing run. One small adapter per operator.

An adapter is a :class:`TilingCase`: ``params`` (the sliders), ``demands(**values)`` ({buffer:
bytes the launch will reserve}), ``run(**values)`` (a timing-mode Trace). :func:`explore`
compares demand with capacity and runs only what fits; a launch that still overflows is caught
and reported, so the explorer never claims a fit the simulator refuses.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..arch import c0_of, ceil_div, round_up
from ..chips import get_chip
from ..errors import ArgumentError, BufferOverflowError


@dataclass(frozen=True)
class Param:
    """One slider: name (keyword of demands/run), allowed values (ascending), initial value."""
    name: str
    values: tuple
    value: object
    label: str = ""


class TilingCase:
    """Base of the adapters. chip: the ChipSpec the operator runs on. name: shown as title."""
    name = "operator"
    chip = None
    params: list[Param] = []

    def demands(self, **values) -> dict[str, int]:
        """{buffer name: bytes the launch reserves in it} for these knob values."""
        raise NotImplementedError

    def run(self, **values):
        """Launch in timing mode with these knob values; return the Trace."""
        raise NotImplementedError

    def defaults(self) -> dict:
        return {p.name: p.value for p in self.params}



class AddCase(TilingCase):
    """Element-wise Add of ``n`` elements of ``dtype`` on ``chip``.

    Knobs: ``tile`` (elements per UB tile, a multiple of a 32-byte block) and ``buffer_num``
    (slots per queue). Demand: UB holds 3 queues (x, y, z) x buffer_num slots x one tile,
    each slot rounded up to UB's alignment, as ``Pipe.init_buffer`` reserves them.
    """
    name = "Add"

    def __init__(self, n: int = 65536, dtype=np.float16, chip="teach", max_tile: int | None = None):
        """n: elements. dtype: float16 or float32. chip: name or ChipSpec. max_tile: the
        slider's largest tile in elements (default: 4 x the default tile or half of UB)."""
        from ..kernels.elementwise import QUEUES_PER_TILE, add_tiling
        self.n, self.dtype, self.chip = int(n), np.dtype(dtype), get_chip(chip)
        self.queues = QUEUES_PER_TILE
        per_block = 32 // self.dtype.itemsize
        default = add_tiling(self.n, self.dtype, self.chip, 2)
        # up to half of UB per tile by default: past the overflow for every buffer_num (a tile
        # longer than a block is allowed; the kernel still reserves it)
        top = round_up(max_tile or max(default.tile * 4, self.chip.buffers.ub // self.dtype.itemsize // 2),
                        per_block)
        tiles = tuple(range(per_block, top + 1, per_block))
        if len(tiles) > 400:                       # keep the slider usable: about 400 stops
            stride = ceil_div(len(tiles), 400)
            tiles = tuple(sorted(set(tiles[::stride]) | {default.tile}))
        self.params = [Param("tile", tiles, default.tile, "tile (elements)"),
                       Param("buffer_num", (1, 2, 3, 4), 2, "buffer_num")]

    def demands(self, tile: int, buffer_num: int) -> dict[str, int]:
        align = self.chip.buffer_align("UB")
        return {"UB": self.queues * buffer_num * round_up(tile * self.dtype.itemsize, align)}

    def run(self, tile: int, buffer_num: int):
        from ..kernels.elementwise import add_tiling, launch_add
        x = np.zeros(self.n, self.dtype)
        t = add_tiling(self.n, self.dtype, self.chip, buffer_num, tile)
        return launch_add(x, x, t, self.chip, "timing")[1]


@dataclass
class Exploration:
    """What one choice of knobs gives.

    values: the knob values. demands / capacities: bytes per buffer. overflows: {buffer: bytes
    over capacity} (empty when everything fits). error: the simulator's message if the launch
    raised BufferOverflowError. trace, cycles, time_us, ratios: the timing run (None on overflow).
    """
    values: dict
    demands: dict
    capacities: dict
    overflows: dict = field(default_factory=dict)
    error: str | None = None
    trace: object = None
    cycles: int | None = None
    time_us: float | None = None
    ratios: dict | None = None

    @property
    def fits(self) -> bool:
        return not self.overflows and self.error is None


def explore(case: TilingCase, **values) -> Exploration:
    """Check the demand of ``case`` at these knob values against the chip, and time it if it fits.

    case: a TilingCase adapter. values: knob values (defaults for those not given).
    """
    known = {p.name for p in case.params}
    unknown = set(values) - known
    if unknown:
        raise ArgumentError(f"explore: unknown knob(s) {sorted(unknown)} for {case.name}; "
                         f"its knobs are {sorted(known)}")
    vals = {**case.defaults(), **values}
    demands = case.demands(**vals)
    caps = {b: case.chip.buffer_bytes(b) for b in demands}
    res = Exploration(vals, demands, caps,
                      {b: d - caps[b] for b, d in demands.items() if d > caps[b]})
    if res.overflows:
        return res
    try:
        trace = case.run(**vals)
    except BufferOverflowError as exc:          # the demand model missed something: say so
        res.error = str(exc)
        return res
    res.trace, res.cycles = trace, trace.cycles
    res.time_us, res.ratios = trace.us(trace.cycles), trace.pipe_ratios()
    return res


class MatMulCase(TilingCase):
    """C = A (M, K) x B (K, N) on ``chip`` with the matmul templates' tiling knobs.

    Knobs: ``tile_m``, ``tile_n`` (the block tile = the L0C tile), ``tile_k0`` (K of one mmad,
    through L0A/L0B), ``k_steps`` (TILE_K = k_steps x TILE_K0: K of one L1 step), and the
    buffer counts ``l1_buffers``, ``l0_buffers``, ``l0c_buffers``. Demand is
    :func:`npulab.kernels.matmul.buffer_demand`; the run is a timing-only ``simulate``.
    """
    name = "MatMul"

    def __init__(self, m: int = 256, n: int = 256, k: int = 256, dtype=np.float16, chip="teach"):
        """m, n, k: the problem. dtype: float16, float32 or int8. chip: name or ChipSpec."""
        from ..kernels.matmul import MatmulProblem, default_tiling
        self.chip, self.shape = get_chip(chip), (int(m), int(n), int(k))
        self.problem = MatmulProblem.of(self.shape, dtype)
        self.dtype = self.problem.np_dtype
        c0 = c0_of(self.dtype)
        d = default_tiling(self.problem, self.chip).tiles
        tiles = lambda dim: tuple(range(16, max(16, min(256, round_up(dim, 16))) + 1, 16))
        k0s = tuple(v for v in (8, 16, 32, 64, 128) if v % c0 == 0 and v <= max(c0, round_up(k, c0)))
        self.params = [Param("tile_m", tiles(m), d.tile_m), Param("tile_n", tiles(n), d.tile_n),
                       Param("tile_k0", k0s, d.tile_k0),
                       Param("k_steps", (1, 2, 4, 8), max(1, d.tile_k // d.tile_k0), "TILE_K / TILE_K0"),
                       Param("l1_buffers", (1, 2), d.l1_buffers), Param("l0_buffers", (1, 2), d.l0_buffers),
                       Param("l0c_buffers", (1, 2), d.l0c_buffers)]

    def tiling(self, tile_m, tile_n, tile_k0, k_steps, l1_buffers, l0_buffers, l0c_buffers):
        from ..kernels.matmul import make_tiling
        return make_tiling(self.problem, self.chip,
                           (tile_m, tile_n, tile_k0 * k_steps, tile_k0, l1_buffers, l0_buffers, l0c_buffers),
                           clamp=False)

    def demands(self, **values) -> dict[str, int]:
        from ..kernels.matmul import buffer_demand
        return {b: need for b, (need, _) in buffer_demand(self.tiling(**values)).items()}

    def run(self, **values):
        from ..kernels.matmul import simulate
        return simulate(self.tiling(**values), chip=self.chip)
