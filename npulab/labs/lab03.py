"""Lab 03 (tiling): the inputs and the runs its exercises and pictures use.

* :func:`describe`: an Add tiling in words (blocks per core, tiles per block, the tails);
* :func:`run_add_tiling`: launch the package's Add kernel with any AddTiling (the learner's);
* :func:`row_inputs`: the seeded x and gamma of the row-wise operator whose tiling exercise 2
  asks for (z[r, :] = x[r, :] * gamma, the last step of LayerNorm, whose tiles must hold whole
  rows: :mod:`npulab.kernels.examples.row_scale`);
* :data:`PREDICT_SHAPE`, :data:`PREDICT_RECIPE`, :func:`predict_tiling`: the matmul tiling whose
  overflowing buffers exercise 3 asks for;
* :func:`cores_sweep`: cycles of one Add on the 910 with 1, 2, 4 ... 32 cores (exercise 4
  predicts where it stops speeding up);
* :data:`WIDE_SHAPE`, :func:`whole_rows_2d`, :func:`run_2d`: the challenge, a row scale of a few
  very long rows (:mod:`npulab.kernels.examples.row_scale_2d`), its whole-rows tiling and a run.
"""
from __future__ import annotations

import numpy as np

from ..arch import BLOCK_BYTES, DEFAULT_CHIP, ceil_div
from ..chips import get_chip
from ..kernels.elementwise import AddTiling, add_kernel, add_tiling
from ..kernels.examples.row_scale_2d import RowScale2DTiling, demand_2d, launch_row_scale_2d
from ..lang import launch

CHIP = "teach"
TAIL_N = 5000             # the Add with tails the lab shows
SEED = 0
#: the row-wise operator's problems the checker runs: (rows, cols, dtype, chip)
ROW_CASES = ((1000, 256, np.float16, "teach"), (7, 1024, np.float16, "teach"),
             (33, 512, np.float32, "teach"), (64, 4096, np.float16, "910"))
#: exercise 3: which buffers does this matmul tiling overflow on the teaching chip?
PREDICT_SHAPE = (256, 256, 256)
PREDICT_RECIPE = (64, 128, 128, 32, 2, 2, 2)     # TILE_M, TILE_N, TILE_K, TILE_K0, L1/L0/L0C buffers
#: exercise 4: the core counts of the Add sweep
SWEEP_CORES = (1, 2, 4, 8, 16, 32)
#: the challenge: a row scale of 2 rows of 512 Ki fp16 elements (1 MiB a row) on the 910
WIDE_SHAPE, WIDE_CHIP = (2, 1 << 19), "910"
#: the shapes the challenge's tiling function must also run correctly: (rows, cols, dtype, chip)
WIDE_CASES = ((3, 1024, np.float16, "teach"), (5, 512, np.float32, "teach"), (2, 4096, np.float16, "910"))


def inputs(n: int, dtype=np.float16, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """x, y: n seeded values of ``dtype``."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype))


def describe(t: AddTiling, itemsize: int = 2) -> str:
    """The tiling in words: each block's length, its tiles and the tails."""
    lines = [f"{t.total:,} elements over {t.block_dim} block(s) of block_factor={t.block_factor:,} "
             f"({t.block_factor * itemsize:,} B = {t.block_factor * itemsize / BLOCK_BYTES:g} "
             f"32-byte blocks); tile={t.tile:,} elements, buffer_num={t.buffer_num}"]
    for b in range(t.block_dim):
        length = min(t.block_factor, t.total - b * t.block_factor)
        full, tail = divmod(length, t.tile)
        parts = f"{full} full tile(s)" + (f" + a tail tile of {tail:,}" if tail else "")
        pad = (f" (its last copy moves {tail * itemsize:,} B: not whole 32-byte blocks, so data_copy_pad)"
               if tail and tail * itemsize % BLOCK_BYTES else "")
        lines.append(f"  block {b}: elements {b * t.block_factor:,}..{b * t.block_factor + length:,} "
                     f"= {length:,}: {parts}{pad}")
    return "\n".join(lines)


def run_add_tiling(t, x: np.ndarray, y: np.ndarray, chip=CHIP, mode: str = "functional"):
    """Launch the package's Add kernel (KernelAdd) with tiling ``t``; returns (z, trace)."""
    (_, _, z, _), trace = launch(add_kernel, t.block_dim, x, y, np.zeros_like(x), t, chip=chip, mode=mode)
    return z, trace


def tail_trace():
    """The Add of TAIL_N fp16 elements on the teaching chip with the default tiling: (tiling, trace)."""
    x, y = inputs(TAIL_N)
    t = add_tiling(TAIL_N, np.float16, CHIP)
    z, trace = run_add_tiling(t, x, y)
    assert np.array_equal(z, x + y)
    return t, trace


# -- the row-wise operator (npulab.kernels.examples.row_scale) --------------------------------
def row_inputs(rows: int, cols: int, dtype=np.float16, seed: int = SEED):
    """x (rows, cols) and gamma (cols,): seeded values of ``dtype``."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, cols)).astype(dtype), rng.standard_normal(cols).astype(dtype))


# -- exercise 3 and the measure ------------------------------------------------------------------
def predict_tiling(chip=CHIP):
    """The matmul tiling of exercise 3 (not clamped to the problem)."""
    from ..kernels.matmul import MatmulProblem, make_tiling
    return make_tiling(MatmulProblem.of(PREDICT_SHAPE, np.float16), chip, PREDICT_RECIPE, clamp=False)


def cores_sweep(n: int = 1 << 22, cores=(1, 2, 4, 8, 16, 32), chip: str = DEFAULT_CHIP) -> list[dict]:
    """Timing-mode Add of ``n`` fp16 elements split over each number of cores (the tile as
    add_tiling picks it for that block size); cycles, time and achieved GM bandwidth."""
    c = get_chip(chip)
    x = np.zeros(n, np.float16)
    rows = []
    for k in cores:
        t = add_tiling(n, x.dtype, c, 2, cores=k)
        _, trace = run_add_tiling(t, x, x, chip=c.name, mode="timing")
        us = trace.us(trace.cycles)
        rows.append({"cores": t.block_dim, "cycles": trace.cycles, "us": us,
                     "gb_s": 3 * n * 2 / us / 1e3})
    return rows


def print_sweep(rows, chip: str = DEFAULT_CHIP) -> None:
    c = get_chip(chip)
    print(f"{'cores':>5}  {'cycles':>10}  {'time':>9}  {'GM traffic':>10}  {'speed-up':>8}")
    for r in rows:
        print(f"{r['cores']:>5}  {r['cycles']:>10,}  {r['us']:>7.1f}us  {r['gb_s']:>6.0f}GB/s  "
              f"{rows[0]['cycles'] / r['cycles']:>7.1f}x")
    print(f"HBM of the {c.name}: {c.gm_bandwidth_gbs:,.0f} GB/s shared by all {c.ai_cores} cores")


# -- the challenge: a 2-D tiling of a row scale (npulab.kernels.examples.row_scale_2d) ----------
def whole_rows_2d(rows: int, cols: int, dtype, chip) -> RowScale2DTiling:
    """Exercise 2's tiling carried to rows too long for UB: whole rows per core (rows split
    evenly over the cores), a tile of one row by as many columns as UB holds (whole 32-byte
    blocks). Correct everywhere, but a few rows keep as few cores busy."""
    c, item = get_chip(chip), np.dtype(dtype).itemsize
    rows_per_core = ceil_div(rows, c.cores_for("aiv"))
    per_elem = 2 * (1 + 2 * 1) * item                  # 2 slots of gamma, in_x and out_z chunks
    chunk = c.buffers.ub // per_elem // (BLOCK_BYTES // item) * (BLOCK_BYTES // item)
    return RowScale2DTiling(rows, cols, rows_per_core, cols, 1, min(chunk, cols))


def run_2d(t: RowScale2DTiling, chip=WIDE_CHIP, dtype=np.float16, mode: str = "timing"):
    """Launch the 2-D row scale with tiling ``t`` on seeded inputs of its shape: (x, gamma, z, trace)."""
    x, g = row_inputs(t.rows, t.cols, dtype) if mode == "functional" else \
        (np.zeros((t.rows, t.cols), dtype), np.zeros(t.cols, dtype))
    z, trace = launch_row_scale_2d(x, g, t, chip=chip, mode=mode)
    return x, g, z, trace


def describe_2d(t: RowScale2DTiling, dtype=np.float16, chip=WIDE_CHIP) -> str:
    """The 2-D tiling in words: the block grid, the cores busy, a tile and the UB it reserves."""
    c = get_chip(chip)
    return (f"{t.row_groups} row group(s) x {t.col_groups} column group(s) = {t.block_dim} of "
            f"{c.cores_for('aiv')} cores busy; a block {min(t.rows_per_core, t.rows)} x "
            f"{min(t.cols_per_core, t.cols):,}, a tile {t.rows_per_tile} x {t.cols_per_tile:,}; "
            f"UB {demand_2d(t, dtype):,} of {c.buffers.ub:,} B")



def print_2d_runs(tilings: dict, chip=WIDE_CHIP) -> None:
    """Cycles of each named 2-D tiling of WIDE_SHAPE (timing mode) and its speed-up over the
    first; a name whose tiling is not written yet (not a RowScale2DTiling) says so."""
    first = None
    for name, t in tilings.items():
        if not isinstance(t, RowScale2DTiling):
            print(f"{name:>22}: not written yet")
            continue
        cycles = run_2d(t, chip=chip)[3].cycles
        first = first or cycles
        print(f"{name:>22}: {cycles:>7,} cycles, {first / cycles:4.1f}x  ({describe_2d(t, chip=chip)})")
