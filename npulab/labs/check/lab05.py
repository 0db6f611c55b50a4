"""Checkers of lab 05 (matmul on the cube): ND -> NZ index arithmetic, the K loop accumulating
into L0C, the bytes a tiling copies into L1, the 910B's AIC -> AIV hand-off in a mix kernel, and
the challenge: tiles that fit the 910's cores on a shape where the default tiling does not."""
from __future__ import annotations

import functools

import numpy as np

from ...arch import ceil_div, round_up
from ...bench.matmul import measure
from ...errors import DeadlockError, ShapeError, SyncError
from ...chips import get_chip
from ...formats import nz_offsets
from ...kernels.matmul import problems
from ...ops import golden
from ...ops.tolerance import tol
from .. import lab05 as ref
from . import (as_number, exercise, failed, is_blank, not_attempted, passed, perf_verdict, screen_function,
                stopped, whole_numbers)

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


@exercise("05", "the NZ format: 16 x C0 fractals, fractal columns first, row-major inside, rows padded to 16",
          key=("(c // 16) * rows16 * 16", "r * 16 + c % 16"))
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
                "and accumulate (+=) into L0C after", key=("init=(k_off == 0)", "col_off=k_off", "row_off=k_off"))
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
    return whole_numbers(answer, 7)


@exercise("05", "reuse in L1: each block tile copies its rows of A and its columns of B from GM, so A is "
                "copied once per column of block tiles and B once per row", key=("(512 // 256)", "(2048 // 128)"))
def gm_to_l1(answer):
    """The bytes MTE2 copies from GM into L1 for lab05.BYTES_SHAPE with lab05.BYTES_TILES on the 910."""
    if is_blank(answer):
        return not_attempted()
    got = as_number(answer)
    if got is None or got != int(got):
        return failed("the answer should be a whole number of bytes", expected="an int", got=repr(answer),
                      hint="count bytes: fp16 is 2 bytes an element.")
    got = int(got)
    m, n, k = ref.BYTES_SHAPE
    tm, tn = ref.BYTES_TILES[:2]
    a, b = m * k * 2, k * n * 2
    truth = ref.gm_to_l1_bytes()
    if got == truth:
        return passed(f"{truth:,} bytes, as the simulator counted them: A ({a:,} B) {ceil_div(n, tn)} times "
                      f"and B ({b:,} B) {ceil_div(m, tm)} times, {truth / (a + b):.1f} x the bytes of A and B. "
                      f"A larger TILE_N copies A fewer times, a larger TILE_M copies B fewer times.")
    slips = [(a + b, "each block tile copies its own rows of A and columns of B: A and B go from GM into "
                     "L1 more than once."),
             (a * ceil_div(m, tm) + b * ceil_div(n, tn),
              "swapped: the rows of A are needed by every block tile of the same row, one per column "
              "of block tiles (N / TILE_N), and B's columns once per row of block tiles (M / TILE_M)."),
             (truth // 2, "fp16 is 2 bytes an element: count bytes, not elements."),
             (a * ceil_div(m, tm) * ceil_div(n, tn) + b * ceil_div(m, tm) * ceil_div(n, tn),
              "a block tile copies only its TILE_M rows of A (and TILE_N columns of B), not the whole matrix.")]
    hint = next((h for v, h in slips if v == got),
                "count, for one block tile, the bytes of A and of B it needs over the whole K loop, "
                "then multiply by the number of block tiles.")
    return failed("not the bytes the simulator copied GM -> L1", expected="the trace's GM->L1 bytes",
                  got=f"{got:,}", hint=hint)


@exercise("05", "the 910B's split AI core: an AIC hands each block tile to its two AIVs through a GM "
                "workspace, the order kept by cross-core flags both ways",
          key=("3 * BLOCKS", "2 * 448 * 512 * 2"))
def mix_handoff(answer):
    """{"flags_set": ..., "workspace_bytes": ...} of the fused matmul of lab05.MIX_SHAPE with
    lab05.MIX_TILES on the 910B, checked against a timing run's counts."""
    if is_blank(answer):
        return not_attempted()
    if not isinstance(answer, dict) or set(answer) != {"flags_set", "workspace_bytes"}:
        return failed("the answer should be a dict with two numbers", expected='{"flags_set": ..., '
                      '"workspace_bytes": ...}', got=repr(answer), hint="two keys, two whole numbers.")
    vals = {kk: as_number(v) for kk, v in answer.items()}
    if any(v is None or v != int(v) for v in vals.values()):
        return failed("both values should be whole numbers", got=repr(answer), hint="a count and bytes.")
    truth = ref.mix_counts()
    m, n, _ = ref.MIX_SHAPE
    tm, tn = ref.MIX_TILES[:2]
    tiles = ceil_div(m, tm) * ceil_div(n, tn)
    f, w = int(vals["flags_set"]), int(vals["workspace_bytes"])
    if f != truth["flags_set"]:
        hints = {tiles: "the AIC sets one flag per block tile, and each of its AIVs sets one back once it "
                        "has read its half of the slot: count both directions.",
                 2 * tiles: "both AIVs set their own flag back (the AIC waits until both have): the AIC's one "
                            "and the two AIVs' per block tile.",
                 3 * (m // tm) * (n // tn): "the short last row of block tiles is still a block tile (one "
                                            "AIV may get no rows of it but still sets its flag).",
                 0: "a mix kernel orders its cores with cross-core flags only: there are some."}
        return failed("not the number of cross-core flags the run set", expected="the trace's CROSS_SET count",
                      got=f"{f:,}", hint=hints.get(f, "count block tiles, then the flags each one needs: "
                                                      "the AIC to its AIVs and back."))
    if w != truth["workspace_bytes"]:
        hints = {w * 2 == truth["workspace_bytes"]:
                 "the bytes go through GM twice: FixPipe writes each tile into the workspace and the AIVs "
                 "read it back into UB.",
                 w == 2 * truth["workspace_bytes"]:
                 "FixPipe casts L0C's fp32 to fp16 on the way out: the workspace holds fp16 (2 bytes).",
                 w == 0: "the AIC and the AIVs share no buffer on chip: C goes through GM."}
        return failed("not the bytes that crossed GM between the AICs and their AIVs",
                      expected="the trace's L0C->GM + GM->UB bytes", got=f"{w:,}",
                      hint=hints.get(True, "each element of C is written once and read once, in fp16."))
    return passed(f"{f} cross-core flags ({tiles} block tiles x 3) and {w:,} bytes through the GM "
                  f"workspace, as the 910B run counted them. On the 910 the same C stays in its core "
                  f"(L0C -> UB): no flags between cores, no workspace.")


#: the challenge's reference tiling (a whole number of rounds over the 910's 32 cores)
CHALLENGE_REFERENCE = (192, 176, 128, 64, 2, 2, 1)


@functools.lru_cache(maxsize=None)
def _reference_cycles() -> int:
    return measure(ref.perf_tiling(CHALLENGE_REFERENCE), ref.PERF_CHIP, full=True)["cycles"]


@exercise("05", "block tiles against the cores: as few rounds of block tiles over the AI cores as the "
                "buffers allow, each round with every core busy", performance=True, challenge=True,
          key=("192, 176", "2, 2, 1)"))
def tiles_for_cores(answer):
    """(TILE_M, TILE_N, TILE_K, TILE_K0, l1, l0, l0c buffers) for lab05.CHALLENGE_SHAPE fp16 on the
    910, within 150% of the reference tiling's simulated cycles."""
    if is_blank(answer):
        return not_attempted()
    rec = _recipe(answer)
    if rec is None:
        return failed("the answer should be 7 whole numbers", expected="(TILE_M, TILE_N, TILE_K, TILE_K0, "
                      "l1_buffers, l0_buffers, l0c_buffers)", got=repr(answer),
                      hint="a tuple such as (64, 64, 128, 32, 2, 2, 2).")
    t = ref.perf_tiling(rec)
    found = problems(t, ref.PERF_CHIP)
    if found:
        over = [p for p in found if " needs " in p]
        return failed("the tiling cannot run", got="; ".join(found),
                      hint=("shrink the tiles of the buffer named, or give it one buffer: its demand is "
                            "buffers x tile bytes." if over else
                            "tiles are multiples of 16, TILE_K a multiple of TILE_K0, buffers 1 or 2."))
    cycles = measure(t, ref.PERF_CHIP, full=True)["cycles"]
    m, n, _ = ref.CHALLENGE_SHAPE
    cores = get_chip(ref.PERF_CHIP).ai_cores
    tiles = ceil_div(m, t.tiles.tile_m) * ceil_div(n, t.tiles.tile_n)
    rounds = ceil_div(tiles, cores)
    last = tiles - (rounds - 1) * cores
    if min(t.tiles.l1_buffers, t.tiles.l0_buffers) < 2:
        hint = "with one L1 or L0 buffer every copy waits for the cube and the cube for every copy: use 2 there."
    elif tiles < cores:
        hint = f"{tiles} block tiles keep only {tiles} of the {cores} cores busy."
    elif rounds > 1 and last < cores:
        hint = (f"{tiles} block tiles on {cores} cores: the cores go round {rounds} times, the last time "
                f"with only {last} of them working. Fewer, larger rounds: fit the tiles to the cores, as "
                f"large as the buffers hold (L0C can take one buffer).")
    else:
        hint = "larger block tiles reuse each byte of A and B more often: fewer bytes per MAC."
    return perf_verdict(cycles, _reference_cycles(), f"{t.recipe()} runs", hint)
