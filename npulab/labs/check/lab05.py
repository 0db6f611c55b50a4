"""Checkers of lab 05 (matmul on the cube): ND -> NZ index arithmetic, the K loop accumulating
into L0C, and tiles that reach 80% of the cube's peak on the 910."""
from __future__ import annotations

import numpy as np

from ...arch import ceil_div, round_up
from ...bench.matmul import measure
from ...errors import DeadlockError, ShapeError, SyncError
from ...formats import nz_offsets
from ...kernels.matmul import TILINGS, problems
from ...ops import golden
from ...ops.tolerance import tol
from .. import lab05 as ref
from . import exercise, failed, is_blank, not_attempted, passed, screen_function, stopped, whole_numbers

#: (m, n) matrices the NZ offset function is checked on (padding in rows and columns)
NZ_SHAPES = ((20, 40), (32, 48), (5, 17), (16, 16))
#: the K loop's fp32 C against the golden matmul of the same fp16 values: the cube's fp32 row
RTOL, ATOL = tol("float32", "cube")["rtol"], tol("float32", "cube")["atol"]


def _variants(r, c, m, n):
    """Typical slips, each with its hint."""
    r16 = round_up(m, 16)
    return [
        ((c // 16) * m * 16 + r * 16 + c % 16,
         "NZ pads the rows to a multiple of 16: a column of fractals holds ceil16(m) rows, not m."),
        (r * n + c, "that is ND (row-major). In NZ, the 16-column fractal a column belongs to comes first."),
        ((r // 16) * (ceil_div(n, 16) * 256) + (c // 16) * 256 + (r % 16) * 16 + c % 16,
         "that is ZZ (fractals row by row, as L0A holds A). NZ orders the fractals column by column."),
        ((c // 16) * r16 * 16 + (c % 16) * 16 + r % 16 + (r // 16) * 256,
         "inside a fractal NZ is row-major ('z'): r % 16 picks the row of 16, c % 16 the element."),
    ]


@exercise("05", "the NZ format: 16 x C0 fractals, fractal columns first, row-major inside, rows padded to 16")
def nz_offset(fn):
    """``fn(r, c, m, n)``: the offset of element (r, c) of an (m, n) fp16 matrix in NZ storage."""
    if (v := screen_function(fn, "nz_offset")) is not None:
        return v
    for m, n in NZ_SHAPES:
        truth = nz_offsets(m, n)
        for r in range(m):
            for c in range(n):
                got = fn(r, c, m, n)
                if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
                    return failed("the offset should be a whole number", expected=f"{int(truth[r, c])}",
                                  got=repr(got), hint="use // and % so the offset stays an int.")
                if int(got) != truth[r, c]:
                    hint = next((h for v, h in _variants(r, c, m, n) if v == got and v != truth[r, c]),
                                "offset = (c // 16) x ceil16(m) x 16 + r x 16 + c % 16.")
                    return failed(f"wrong offset for element ({r}, {c}) of a {m} x {n} matrix",
                                  expected=f"{int(truth[r, c])}", got=f"{got}", hint=hint)
    return passed(f"right for every element of {', '.join(f'{m}x{n}' for m, n in NZ_SHAPES)}. "
                  f"data_copy_nd2nz does exactly this move on MTE2, GM -> L1.")


_KLOOP_ERRORS = {
    SyncError: "free_tensor each L0A / L0B tensor after the mmad that reads it: each queue has 2 slots.",
    DeadlockError: "enque each loaded tensor and deque it before mmad: the queue carries the "
                   "MTE1 -> cube flag.",
    ShapeError: "load_data(dst, src, rows, cols, src_rows=..., row_off=..., col_off=...): A's window "
                "is m x kk at col_off=k_off (src_rows = ceil16(m)); B's is kk x n at row_off=k_off "
                "(src_rows = ceil16(k)).",
}


@exercise("05", "the K loop: load K0 slices into L0A / L0B, mmad with init on the first slice "
                "and accumulate (+=) into L0C after")
def k_loop(fn):
    """``fn(c, a1, b1, a2q, b2q, m, n, k, k0)``: C = A x B in L0C through L0A / L0B."""
    if (v := screen_function(fn, "k_loop")) is not None:
        return v
    for m, n, k, k0 in ref.KLOOP_CASES:
        case = f"M={m}, N={n}, K={k}, K0={k0}"
        try:
            c, trace, a, b = ref.run_kloop(fn, m, n, k, k0)
        except tuple(_KLOOP_ERRORS) as err:
            return stopped(err, _KLOOP_ERRORS, f"{case}: ")
        mm = [nm for nm in trace.name if nm.startswith("mmad")]
        steps = ceil_div(k, k0)
        if not mm:
            return failed(f"{case}: no mmad ran", expected=f"{steps} mmads", got="none",
                          hint="call mmad(c, a2, b2, m, n, kk, init=...) once per K0 slice.")
        want = golden.matmul(a, b).astype(np.float32)      # in float32, as the verdict says
        first_init = "+=" not in mm[0]
        later_acc = all("+=" in x for x in mm[1:])
        if not first_init:
            return failed(f"{case}: the first mmad accumulates onto whatever L0C held",
                          expected="init=True on the first slice", got=f"{mm[0]!r}",
                          hint="L0C is not cleared between tiles: the first mmad of a tile must "
                               "overwrite it (init=True), the later ones add (init=False).")
        if not np.allclose(c, want, rtol=RTOL, atol=ATOL):
            if len(mm) > 1 and not later_acc:
                hint = ("every mmad with init=True overwrites L0C: only the last K0 slice survives. "
                        "Use init=(k_off == 0).")
            elif len(mm) != steps:
                hint = f"K={k} in slices of K0={k0} is {steps} mmads (the last one kk = K - k_off long)."
            else:
                hint = ("A's K runs along its columns (col_off=k_off), B's along its rows "
                        "(row_off=k_off); the last slice is kk = min(K0, K - k_off) long.")
            i = np.unravel_index(int(np.argmax(np.abs(c - want))), want.shape)
            return failed(f"{case}: C is not A x B", expected=f"C{i} = {want[i]:.4f}", got=f"C{i} = {c[i]:.4f}",
                          hint=hint)
    return passed(f"C = A x B on all {len(ref.KLOOP_CASES)} problems (within rtol {RTOL:g}, atol "
                  f"{ATOL:g} of numpy's float32 matmul); the last one ends with a short K slice. "
                  f"Its mmads: {', '.join(mm)}.")


def _recipe(answer):
    if isinstance(answer, str) and answer in TILINGS:
        return TILINGS[answer]
    return whole_numbers(answer, 7)


@exercise("05", "matmul tiling for the cube: big block tiles for reuse, a long TILE_K per L1 copy, "
                "double buffering at every level", performance=True)
def tiles_80(answer):
    """(TILE_M, TILE_N, TILE_K, TILE_K0, l1, l0, l0c buffers) reaching 80% utilization on the
    lab's fp16 problem on the 910."""
    if is_blank(answer):
        return not_attempted()
    rec = _recipe(answer)
    m, n, k = ref.PERF_SHAPE
    target = ref.TARGET_UTILIZATION
    if rec is None:
        return failed("the answer should be 7 whole numbers", expected="(TILE_M, TILE_N, TILE_K, TILE_K0, "
                      "l1_buffers, l0_buffers, l0c_buffers)", got=repr(answer),
                      hint="a tuple such as (64, 64, 128, 32, 2, 2, 2).")
    t = ref.perf_tiling(rec)
    found = problems(t, ref.PERF_CHIP)
    if found:
        over = [p for p in found if " needs " in p]
        return failed("the tiling cannot run", got="; ".join(found),
                      hint=("shrink the tiles of the buffer named: its demand is buffers x tile bytes."
                            if over else "tiles are multiples of 16, TILE_K a multiple of TILE_K0, "
                                         "buffers 1 or 2."))
    # in full: extrapolating from a few block tiles misjudges small tiles, whose L2 sharing
    # over a short sampled run is not the whole run's (1-2 s at this size)
    row = measure(t, ref.PERF_CHIP, full=True)
    util, cycles, lb = row["utilization"], row["cycles"], row["lower_bound_cycles"]
    line = (f"{t.recipe()}: {cycles:,} cycles, lower bound {lb:,} (MACs / (cores x MACs a cycle)), "
            f"utilization {util:.1%}; target >= {target:.0%}")
    if util >= target:
        return passed(f"{util:.1%} of the cube's peak on {m}x{n}x{k} fp16 ({cycles:,} cycles, "
                      f"lower bound {lb:,}; target >= {target:.0%}).")
    if min(t.tiles.l1_buffers, t.tiles.l0_buffers, t.tiles.l0c_buffers) < 2:
        hint = "with one buffer, every copy waits for the cube and the cube for every copy: use 2 at every level."
    elif t.tiles.tile_k < 128:
        hint = (f"TILE_K={t.tiles.tile_k}: each L1 step is a small GM copy whose start-up latency the "
                f"cube soon waits out; take a longer K per L1 copy (256 or 512).")
    elif t.tiles.tile_m * t.tiles.tile_n < 128 * 128:
        hint = ("each loaded byte of A is reused TILE_N times and of B TILE_M times: bigger block "
                "tiles (128 x 256) cut the bytes per MAC.")
    else:
        hint = "raise TILE_K0 so that each mmad is long next to its start-up, within L0A / L0B."
    return failed("below the utilization target", expected=f">= {target:.0%}", got=f"{util:.1%}",
                  hint=hint, lines=[line])
