"""The matmul autotuner: search tilings by simulated cycles, remember the winner.

What CANN's tuning tools do for a shape, in small: generate every tiling that fits the buffers
(L1 tile, L0 tile, buffers, swizzle, block_dim), rank them with a quick analytic estimate,
simulate the most promising ones in timing-only mode, keep the fastest.

* Cache: one JSON file, keyed by (chip, op, shape, dtype); default
  ``$XDG_CACHE_HOME/npulab/autotune.json`` (``~/.cache/npulab/autotune.json``), or the path in
  ``NPULAB_AUTOTUNE_CACHE``. Plain JSON, never pickle.
* Parallel search: ``NPULAB_PARALLEL_COMPILER=N`` (the analog of CANN's TE_PARALLEL_COMPILER)
  simulates candidates in N worker processes; default 1 (in this process).
* Progress: a text bar on stderr for searches of more than a few candidates.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from ..errors import ArgumentError
from .. import formats as F
from ..chips import get_chip
from .matmul_tiling import (MatmulTiling, best_swizzle, check_problem, make_tiling, problems,
                            wave_bytes)
from ..arch import DEFAULT_CHIP, ceil_div

CACHE_ENV = "NPULAB_AUTOTUNE_CACHE"
PARALLEL_ENV = "NPULAB_PARALLEL_COMPILER"
CACHE_VERSION = 3            # 3: mmads pipeline, fill and drain copies get the whole GM share (older tilings are stale)
DEFAULT_LIMIT = 12           # candidates simulated per search
PROGRESS_MIN = 4             # show the bar from this many candidates on

TILE_MN = (64, 128, 256)
TILE_K0 = (32, 64, 128)
K_MULT = (1, 2, 4, 8)
_TILING_FIELDS = ("tile_m", "tile_n", "tile_k", "tile_k0", "l1_buffers", "l0_buffers", "l0c_buffers",
                  "block_dim", "swizzle_offset", "swizzle_direction")


# -- the cache --------------------------------------------------------------------------------
def cache_path() -> Path:
    """Where tuned tilings are kept (``NPULAB_AUTOTUNE_CACHE`` overrides)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "npulab" / "autotune.json"


def cache_key(chip, op: str, shape, dtype) -> str:
    batch, m, n, k = _shape4(shape)
    return f"{get_chip(chip).name}|{op}|{batch}x{m}x{n}x{k}|{np.dtype(dtype).name}"


def load_cache(path: Path | None = None) -> dict:
    """The cache's entries ({} if the file is missing or not a cache of this version)."""
    path = cache_path() if path is None else Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def _store(key: str, entry: dict, path: Path | None = None) -> None:
    path = cache_path() if path is None else Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = load_cache(path)
    entries[key] = entry
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"version": CACHE_VERSION, "entries": entries}, indent=1, sort_keys=True),
                   encoding="utf-8")
    os.replace(tmp, path)                  # atomic: a reader never sees half a file


def _shape4(shape):
    if len(shape) == 3:
        shape = (1,) + tuple(shape)
    if len(shape) != 4:
        raise ArgumentError(f"shape must be (M, N, K) or (batch, M, N, K), got {shape!r}")
    return tuple(int(v) for v in shape)


def _from_entry(shape, dtype, entry: dict) -> MatmulTiling:
    batch, m, n, k = _shape4(shape)
    params = {f: int(entry["tiling"][f]) for f in _TILING_FIELDS}
    return MatmulTiling(batch, m, n, k, np.dtype(dtype).name, name="tuned", **params)


def lookup(shape, dtype, chip=DEFAULT_CHIP, op: str = "matmul", path: Path | None = None) -> MatmulTiling | None:
    """The tuned tiling for this (chip, op, shape, dtype), or None if it was never tuned."""
    entry = load_cache(path).get(cache_key(chip, op, shape, dtype))
    if entry is None:
        return None
    try:
        t = _from_entry(shape, dtype, entry)
    except (KeyError, TypeError, ValueError):
        return None                        # a stale or hand-edited entry: ignore it
    return t if not problems(t, chip) else None


# -- candidates -------------------------------------------------------------------------------
def estimate_cycles(t: MatmulTiling, chip=DEFAULT_CHIP) -> float:
    """A quick roofline of one core's work (for ranking only): the slowest of cube, MTE2 from
    L2, HBM (bytes of the first wave shared by its cores), MTE1, and the round trip of a
    buffer slot.

    A copy occupies its pipe for bytes / rate and is then in flight for the pipe's start-up
    latency (:mod:`npulab.sim.timeline`): back-to-back copies overlap their start-ups, so the
    pipes' occupancy has no start-up term. The latency bounds the pipeline instead: a slot of
    an ``n``-buffered stage is copied into, in flight, consumed, then free again, so one step
    takes at least (copy + start-up + the cube's work on it) / n."""
    chip = get_chip(chip)
    from ..sim.cost import mmad_cost
    tiles = ceil_div(t.core_loops, t.block_dim)
    k_steps = ceil_div(t.k, t.tile_k0)
    busy, lat = mmad_cost(chip, t.tile_m, t.tile_n, t.tile_k0, t.np_dtype)
    cube = k_steps * busy + lat            # the K chain's mmads pipeline: one start-up
    item = t.np_dtype.itemsize
    l1_bytes = (t.tile_m + t.tile_n) * t.k * item
    l1_steps = ceil_div(t.k, t.tile_k)
    p = chip.pipes
    mte2 = l1_bytes / p.mte2_bytes_per_cycle
    share = chip.gm_share_bytes_per_cycle(min(t.block_dim, chip.ai_cores))
    wave = min(chip.ai_cores, t.block_dim, t.core_loops)
    hbm = wave_bytes(t, chip, t.swizzle_offset, t.swizzle_direction) * t.k * item / max(1, wave) / share
    mte1 = l1_bytes / p.mte1_bytes_per_cycle
    # the A and B copies of a step go back to back: one start-up each step
    l1_trip = (max(mte2, hbm) + l1_steps * p.mte2_startup_cycles + cube) / t.l1_buffers
    l0_trip = (mte1 + k_steps * p.mte1_startup_cycles + cube) / t.l0_buffers
    per_tile = max(cube, mte2, hbm, mte1, l1_trip, l0_trip)
    if t.l1_buffers == 1 or t.l0_buffers == 1:   # single buffered: nothing overlaps
        per_tile = cube + mte2 + mte1 + l1_steps * p.mte2_startup_cycles + k_steps * p.mte1_startup_cycles
    fill = p.mte2_startup_cycles + p.mte1_startup_cycles + cube / k_steps
    return tiles * per_tile + fill


def candidates(shape, dtype, chip=DEFAULT_CHIP, limit: int | None = DEFAULT_LIMIT) -> list[MatmulTiling]:
    """Every double-buffered tiling that fits the chip's buffers (L1/L0 tiles, swizzle,
    block_dim), best estimate first, at most ``limit``."""
    chip = get_chip(chip)
    batch, m, n, k = _shape4(shape)
    dt = check_problem(batch, m, n, k, dtype)
    c0 = F.c0_of(dt)
    seen, out = set(), []
    for tm in TILE_MN:
        for tn in TILE_MN:
            for tk0 in TILE_K0:
                if tk0 % c0:
                    continue
                for mult in K_MULT:
                    base = make_tiling((batch, m, n, k), dt, chip, (tm, tn, tk0 * mult, tk0, 2, 2, 2))
                    loops = base.core_loops
                    for bd in sorted({min(chip.ai_cores, loops), max(1, min(chip.ai_cores, loops) // 2)}):
                        t = replace(base, block_dim=bd)
                        for sw in ({"swizzle_offset": 1, "swizzle_direction": 0}, best_swizzle(t, chip)):
                            t2 = replace(t, **sw)
                            key = tuple(getattr(t2, f) for f in _TILING_FIELDS)
                            if key in seen or problems(t2, chip):
                                continue
                            seen.add(key)
                            out.append(t2)
    out.sort(key=lambda t: (estimate_cycles(t, chip), -t.tile_k))
    return out if limit is None else out[:limit]


# -- the search ---------------------------------------------------------------------------------
def _simulate_cycles(params: dict, chip_name: str) -> int:
    """Worker body (also used in-process): simulate one tiling given as a plain dict."""
    from .matmul import simulate
    return int(simulate(MatmulTiling(**params), chip_name).cycles)


def parallel_workers() -> int:
    """Worker processes for a search: ``NPULAB_PARALLEL_COMPILER`` (default 1 = in-process)."""
    raw = os.environ.get(PARALLEL_ENV, "1").strip() or "1"
    try:
        n = int(raw)
    except ValueError:
        raise ArgumentError(f"{PARALLEL_ENV}={raw!r}: expected a whole number of worker processes") from None
    if n < 1:
        raise ArgumentError(f"{PARALLEL_ENV}={n}: need at least 1 worker process")
    return n


class ProgressBar:
    """``autotune 4096x4096x4096 float16 [######----] 6/10 best 561,220 cycles`` on a stream."""

    def __init__(self, total: int, label: str, stream=None, width: int = 24):
        self.total, self.label, self.width = total, label, width
        self.stream = sys.stderr if stream is None else stream
        self.done = 0

    def update(self, best: int | None) -> None:
        self.done += 1
        filled = self.width * self.done // max(1, self.total)
        bar = "#" * filled + "-" * (self.width - filled)
        tail = f" best {best:,} cycles" if best is not None else ""
        self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total}{tail}")
        if self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()


@dataclass
class TuneResult:
    tiling: MatmulTiling
    cycles: int
    lower_bound_cycles: float
    searched: list = field(default_factory=list)      # [(recipe text, cycles)] in search order
    from_cache: bool = False
    seconds: float = 0.0

    @property
    def utilization(self) -> float:
        return self.lower_bound_cycles / self.cycles if self.cycles else 0.0


def lower_bound_cycles(shape, dtype, chip=DEFAULT_CHIP) -> float:
    """MACs / (cores x MACs per cycle): no tiling can beat it."""
    chip = get_chip(chip)
    batch, m, n, k = _shape4(shape)
    from ..sim.cost import macs_per_cycle
    return batch * m * n * k / (chip.ai_cores * macs_per_cycle(chip, dtype))


def autotune(shape, dtype, chip=DEFAULT_CHIP, *, op: str = "matmul", limit: int = DEFAULT_LIMIT,
             workers: int | None = None, progress: bool | None = None, use_cache: bool = True,
             force: bool = False, cache: Path | None = None, stream=None) -> TuneResult:
    """Find the fastest matmul tiling for ``shape`` = (M, N, K) or (batch, M, N, K).

    Simulates the ``limit`` best-estimated candidates in timing-only mode (in ``workers``
    processes, default ``NPULAB_PARALLEL_COMPILER``), stores the winner in the cache and returns
    it. A cached answer is returned without searching unless ``force``. ``progress``: True/False
    forces the bar on/off; None shows it from PROGRESS_MIN candidates on."""
    chip = get_chip(chip)
    shape = _shape4(shape)
    dt = check_problem(*shape, dtype)
    key = cache_key(chip, op, shape, dt)
    lb = lower_bound_cycles(shape, dt, chip)
    if use_cache and not force:
        entry = load_cache(cache).get(key)
        if entry is not None:
            t = lookup(shape, dt, chip, op, cache)
            if t is not None:
                return TuneResult(t, int(entry["cycles"]), lb, [], from_cache=True)
    t0 = time.perf_counter()
    cands = candidates(shape, dt, chip, limit)
    if not cands:
        raise ArgumentError(f"autotune: no tiling of {shape} {dt.name} fits chip '{chip.name}'")
    workers = parallel_workers() if workers is None else int(workers)
    show = (len(cands) >= PROGRESS_MIN) if progress is None else progress
    bar = ProgressBar(len(cands), f"autotune {op} {'x'.join(map(str, shape))} {dt.name}", stream) \
        if show else None
    results: list[int | None] = [None] * len(cands)
    best = None
    payload = [{f.name: getattr(t, f.name) for f in fields(t)} for t in cands]
    if workers > 1 and len(cands) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed
        # fork: workers inherit the loaded package and need no __main__ guard in the caller
        method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context(method)) as pool:
            futs = {pool.submit(_simulate_cycles, p, chip.name if not chip.source else chip.source): i
                    for i, p in enumerate(payload)}
            for fut in as_completed(futs):
                i = futs[fut]
                results[i] = fut.result()
                best = results[i] if best is None else min(best, results[i])
                if bar:
                    bar.update(best)
    else:
        for i, p in enumerate(payload):
            results[i] = _simulate_cycles(p, chip)
            best = results[i] if best is None else min(best, results[i])
            if bar:
                bar.update(best)
    i_best = min(range(len(cands)), key=lambda i: (results[i], i))
    winner = replace(cands[i_best], name="tuned")
    searched = [(c.recipe(), int(r)) for c, r in zip(cands, results)]
    res = TuneResult(winner, int(results[i_best]), lb, searched, False, time.perf_counter() - t0)
    if use_cache:
        _store(key, {"tiling": {f: getattr(winner, f) for f in _TILING_FIELDS},
                     "cycles": res.cycles, "lower_bound_cycles": lb, "searched": len(cands)}, cache)
    return res


__all__ = ["autotune", "lookup", "candidates", "estimate_cycles", "cache_path", "cache_key",
           "load_cache", "lower_bound_cycles", "TuneResult", "ProgressBar", "parallel_workers",
           "CACHE_ENV", "PARALLEL_ENV"]
