"""Checkers of lab 01 (architecture and the roofline): intensity, ridge points, the vector roof
counted in passes, and a polynomial body that issues few of them."""
from __future__ import annotations

import functools
import math

import numpy as np

from ...chips import get_chip
from ...kernels.examples import poly
from ...ops.tolerance import tol
from .. import lab01 as ref
from . import (as_number, close, exercise, failed, is_blank, not_attempted, passed, perf_verdict,
               screen_function)

CHIP = "910"
SPLIT = "910b"
WEIGHT = 4096                 # min_tokens: (M x 4096) @ (4096 x 4096)
LN_SLACK = 0.25               # ln_vector_cycles: a count of passes within 25% of the kernel's


def _num(x) -> str:
    return "None" if x is None else f"{x:.4g}"


@exercise("01", "arithmetic intensity: FLOPs (a MAC is two) over every byte that crosses GM",
          key=("2 * m * n * k", "m * k + k * n + m * n"))
def matmul_intensity(fn):
    """fn(m, n, k) -> FLOP per GM byte of C = A @ B in fp16, each matrix crossing GM once."""
    bad = screen_function(fn, "matmul_intensity")
    if bad:
        return bad
    shapes = [(1024, 1024, 1024), (16, 4096, 4096), (4096, 128, 256), (1, 1, 1), (256, 768, 3072)]
    for m, n, k in shapes:
        want = ref.intensity_matmul(m, n, k)
        got = as_number(fn(m, n, k))
        if got is not None and close(got, want):
            continue
        fl, a, b, c = 2 * m * n * k, m * k, k * n, m * n
        slips = [(fl / 2 / (2 * (a + b + c)), "a multiply-accumulate (MAC) counts as two FLOPs."),
                 (fl / (2 * (a + b)), "count the bytes of C too: the result is written back to GM."),
                 (fl / (a + b + c), "an fp16 element is 2 bytes: divide by bytes, not elements."),
                 (fl / (2 * m * n * k), "each matrix crosses GM once (the core reuses its tiles): count "
                                        "the matrices' bytes, not one operand a MAC."),
                 (2 * (a + b + c) / fl, "intensity is FLOPs divided by bytes, not bytes by FLOPs.")]
        hint = next((h for v, h in slips if got is not None and close(got, v)),
                    "FLOPs of the matmul over the bytes of A, B and C.")
        return failed(f"wrong for m, n, k = {m}, {n}, {k}", expected=f"{want:.4g}", got=_num(got), hint=hint)
    return passed(f"right on {len(shapes)} shapes: 1024^3 has {ref.intensity_matmul(1024, 1024, 1024):.0f} "
                  f"FLOP/B, a 16-token decode step {ref.intensity_matmul(16, 4096, 4096):.1f}: reuse grows with "
                  f"the smallest side.")


def _min_m(ridge: float, bytes_of=lambda m: 2 * (m * WEIGHT + WEIGHT * WEIGHT + m * WEIGHT)) -> int | None:
    """The smallest M whose intensity (with GM bytes ``bytes_of(M)``) reaches ``ridge``; None
    when none does (an intensity through a 4096 x 4096 weight stays below 2048 FLOP/B)."""
    return next((m for m in range(1, 1 << 16) if 2 * m * WEIGHT * WEIGHT / bytes_of(m) >= ridge), None)


@exercise("01", "the ridge point: a unit's peak / GM bandwidth, in FLOP per byte",
          key=("chip.peak_fp16_tflops * 1000 / chip.gm_bandwidth_gbs", "matmul_intensity(m, 4096, 4096) >= ridge"))
def min_tokens(answer):
    """The smallest M for which (M x 4096) @ (4096 x 4096), fp16, is compute-bound on the 910's
    cube roofline."""
    if is_blank(answer):
        return not_attempted()
    c = get_chip(CHIP)
    cube = c.peak_fp16_tflops * 1000 / c.gm_bandwidth_gbs
    sustained = c.peak_fp16_tflops * 1000 / (c.gm_sustained_bytes_per_cycle * c.clock_ghz)
    want = _min_m(cube)
    if isinstance(answer, bool) or not isinstance(answer, (int, np.integer)):
        return failed("the answer should be a whole number of tokens", expected=str(want), got=repr(answer),
                      hint="the smallest M, an int (e.g. found with a loop over M).")
    got = int(answer)
    if got in (want, _min_m(sustained)):
        return passed(f"M = {got}: the cube's ridge is {cube:.0f} FLOP/B at the pins' rate ({sustained:.0f} at "
                      f"the sustained one); a batch of {want} tokens or more reuses the weight enough. One "
                      f"decode step of one sequence (M = 1) is deep in memory-bound land: why LLM serving "
                      f"batches requests.")
    vector = c.peak_vector_tflops_fp16 * 1000 / c.gm_bandwidth_gbs
    if got == _min_m(vector):
        hint = f"that is the vector unit's ridge ({vector:.3g} FLOP/B); a matmul runs on the cube, whose ridge is far higher."
    elif got == _min_m(cube / 1000) or got == _min_m(cube * 1000):
        hint = "units: TFLOPS x 1000 / (GB/s) gives FLOP per byte."
    elif got == _min_m(cube, lambda m: 2 * (m * WEIGHT + WEIGHT * WEIGHT)):
        hint = "count the output's bytes too (M x 4096 written back)."
    elif got == want - 1:
        hint = f"at M = {got} the intensity is still below the ridge: the smallest M at or above it."
    elif got < want:
        hint = (f"at M = {got} the intensity is {ref.intensity_matmul(got, WEIGHT, WEIGHT):.1f} FLOP/B, below the "
                f"cube's ridge: the weight is not reused enough.")
    else:
        hint = "not the smallest: the intensity crosses the ridge at a smaller M."
    return failed("not the smallest compute-bound M", expected=str(want), got=str(got), hint=hint)


@exercise("01", "each unit has its own roof: compare an operator with its unit's ridge point",
          key=("ridge[units[op]]",))
def bound(answer):
    """{op: "memory"|"compute"} for every operator of ref.reference_intensities() on the 910,
    each against the ridge point of the unit it runs on (ref.UNIT)."""
    if is_blank(answer):
        return not_attempted()
    chip = get_chip(CHIP)
    ai = ref.reference_intensities()
    want = {op: ref.bound(chip, op, a) for op, a in ai.items()}
    if not isinstance(answer, dict) or set(answer) != set(want):
        return failed(f"the answer should be a dict with keys {', '.join(repr(k) for k in want)}",
                      expected=repr(want), got=repr(answer),
                      hint="one entry per operator, each 'memory' or 'compute'.")
    got = {op: str(v).strip().lower().replace("-bound", "").replace(" bound", "") for op, v in answer.items()}
    wrong = [op for op in want if got[op] != want[op]]
    ridge = {u: ref.ridge(chip, u) for u in ("vector", "cube")}
    if not wrong:
        ridges = ", ".join(f"{u} {r:.3g}" for u, r in ridge.items())
        placed = "; ".join(f"{op} {ai[op]:.3g} vs {ref.UNIT[op]} {ridge[ref.UNIT[op]]:.3g}: {want[op]}"
                           for op in want)
        return passed(f"ridge points on the {chip.name} (FLOP/B): {ridges}. {placed}.")
    if any(got[o] not in ("memory", "compute") for o in want):
        return failed("answer each operator with 'memory' or 'compute'", expected=repr(want),
                      got=repr(answer), hint="one word per operator: 'memory' or 'compute'.")
    op = wrong[0]
    unit = ref.UNIT[op]
    hint = (f"{op} has {ai[op]:.3g} FLOP/B and runs on the {unit} unit, whose ridge point is "
            f"{unit} peak / GM bandwidth = {ridge[unit]:.3g} FLOP/B; an operator left of its "
            f"ridge point cannot feed its unit from GM fast enough.")
    for u, other in (("cube", "vector"), ("vector", "cube")):
        one_roof = {o: "memory" if a < ridge[u] else "compute" for o, a in ai.items()}
        if got == one_roof:
            hint = (f"that is every operator against the {u}'s ridge point ({ridge[u]:.3g} FLOP/B), "
                    f"but {op} runs on the {other} unit: against the {other} ridge point "
                    f"({ridge[other]:.3g} FLOP/B) its {ai[op]:.3g} FLOP/B is {want[op]}-bound. Each "
                    f"operator meets the roof of the unit it runs on.")
    if all(got[o] == "compute" for o in want) or all(got[o] == "memory" for o in want):
        hint = "not every operator is the same: compare each one's intensity to its unit's ridge point. " + hint
    return failed(f"{', '.join(wrong)} misplaced", expected=repr(want), got=repr(answer), hint=hint)


@functools.lru_cache(maxsize=None)
def _ln(chip: str) -> dict:
    return ref.layernorm_passes(chip)


@exercise("01", "the vector roof: passes over the data at the width the unit computes",
          key=("chip.vector.repeat_bytes // 4",))
def ln_vector_cycles(answer):
    """Predicted busy cycles of one 910 vector core for fp16 LayerNorm of ref.LAYERNORM_RC (its
    share of the rows), from the passes the fp32 computation takes."""
    if is_blank(answer):
        return not_attempted()
    c = get_chip(CHIP)
    r = _ln(CHIP)
    want = r["vector_cycles"]
    rows, cols = ref.LAYERNORM_RC
    per_core = rows * cols / c.vector_units
    fp32, fp16 = c.vector.repeat_bytes // 4, c.vector.repeat_bytes // 2
    got = as_number(answer)
    if got is None:
        return failed("the answer should be a number (cycles)", expected=f"about {want:,.0f}", got=repr(answer),
                      hint="passes x the core's elements / the elements a repeat holds: a float.")
    if abs(got / want - 1) <= LN_SLACK:
        return passed(f"{got:,.0f} cycles; the kernel's vector unit is busy {want:,.0f} on one core: "
                      f"{r['passes']:.2f} fp32 passes an element ({fp32} elements a repeat), {per_core:,.0f} "
                      f"elements a core.")
    flop_view = ref.LAYERNORM_FLOPS_PER_ELEMENT * per_core / (2 * fp16)
    passes = got * fp32 / per_core
    if close(got, flop_view, 0.3):
        hint = (f"that is its {ref.LAYERNORM_FLOPS_PER_ELEMENT} FLOPs an element at the fp16 peak (every lane a "
                f"multiply-add a cycle); count the instructions the kernel issues, each one pass over the row, "
                f"at the width it computes.")
    elif abs(got * fp16 / fp32 / want - 1) <= LN_SLACK:
        hint = (f"the kernel computes in fp32: a repeat of {c.vector.repeat_bytes} bytes holds half as many "
                f"fp32 values as fp16 ones.")
    elif abs(got / c.vector_units / want - 1) <= LN_SLACK:
        hint = f"one core's cycles: it normalises only its share of the rows ({c.vector_units} vector cores)."
    elif passes < (1 - LN_SLACK) * r["passes"]:
        hint = (f"your figure means {passes:.1f} passes an element; count every step that runs over the row, "
                f"the widening to fp32 and the rounding back included.")
    else:
        hint = (f"your figure means {passes:.1f} passes an element; steps that work on one value a row (the "
                f"mean, 1 / sqrt) cost next to nothing.")
    return failed("not the vector unit's time", expected=f"{want:,.0f} cycles (within {LN_SLACK:.0%})",
                  got=f"{got:,.0f}", hint=hint)


@exercise("01", "split chips: vector work runs on the AIV cores, two for each AI core of the 910B",
          key=("c.vector_units", "c.gm_sustained_bytes_per_cycle"))
def ln_bound(answer):
    """{"910": "vector"|"memory", "910b": ...}: what bounds fp16 LayerNorm of ref.LAYERNORM_RC on
    each chip, its vector passes or its GM bytes."""
    if is_blank(answer):
        return not_attempted()
    want = {name: _ln(name)["bound"] for name in (CHIP, SPLIT)}
    if not isinstance(answer, dict) or set(answer) != set(want):
        return failed("the answer should be a dict with keys '910' and '910b'", expected=repr(want),
                      got=repr(answer), hint="one entry per chip, each 'vector' or 'memory'.")
    got = {k: str(v).strip().lower().replace("-bound", "") for k, v in answer.items()}
    if any(v not in ("vector", "memory") for v in got.values()):
        return failed("answer each chip with 'vector' or 'memory'", expected=repr(want), got=repr(answer),
                      hint="one word per chip: 'vector' or 'memory'.")
    floors = {n: (_ln(n)["vector_cycles"], _ln(n)["gm_cycles"]) for n in want}
    if got == want:
        return passed("; ".join(f"{n}: vector floor {v:,.0f} cycles, GM floor {g:,.0f}: {want[n]}-bound"
                                for n, (v, g) in floors.items()) + ". The same kernel, two verdicts: the 910B has "
                      "more vector cores for each byte a cycle of GM.")
    b = get_chip(SPLIT)
    if got[SPLIT] != want[SPLIT] and want[SPLIT] == "memory":
        v, g = floors[SPLIT]
        hint = (f"on the {SPLIT} the vector work runs on the AIV cores: {b.vector_units} of them, two for each "
                f"of its {b.ai_cores} AI cores, which share out the rows (vector floor {v:,.0f} cycles against "
                f"GM's {g:,.0f}).")
    elif got[CHIP] != want[CHIP]:
        v, g = floors[CHIP]
        hint = (f"on the {CHIP}, compare the vector floor of exercise 4 with the GM floor: the bytes LayerNorm "
                f"moves over one core's share of the rate GM sustains ({v:,.0f} against {g:,.0f} cycles).")
    else:
        hint = "compare each chip's vector floor (passes) with its GM floor (bytes at the sustained rate)."
    return failed("not the bound each chip hits", expected=repr(want), got=repr(answer), hint=hint)


# -- the challenge: a polynomial body -------------------------------------------------------------
def reference_body(y, x, work, consts, count: int) -> None:
    """Horner's rule with one instruction a degree: h = h * x + c[k] as FusedMulAdd with a
    constant repeat (``lang.fused_mul_add_const``)."""
    from ... import lang
    lang.muls(y, x, poly.COEFFS[-1], count)
    lang.adds(y, y, poly.COEFFS[-2], count)
    for k in reversed(consts[:-2]):
        lang.fused_mul_add_const(y, x, k, count)


@functools.lru_cache(maxsize=None)
def _reference_cycles() -> int:
    return int(ref.poly_run(reference_body, CHIP)[0].cycles)


@exercise("01", "a compute-bound vector kernel gets faster only by issuing fewer passes",
          performance=True, challenge=True, key=("for k in reversed(consts[:-2])",))
def poly_body(fn):
    """body(y, x, work, consts, count): y = p(x) (poly.COEFFS) within the fp16 tolerance, within
    150% of the reference body's cycles on lab01.POLY_N elements of the 910."""
    bad = screen_function(fn, "poly_body", "body function")
    if bad:
        return bad
    x = ref.poly_input(4096)
    try:
        y, _ = poly.launch_poly(fn, x, CHIP, "functional")
    except Exception as err:                                    # noqa: BLE001 (the learner's code)
        return failed(f"the kernel stopped with {type(err).__name__}", got=f"{type(err).__name__}: {err}",
                      hint="each lang call is lang.op(dst, src0, src1 or a number, count) on UB tensors "
                           "(y, x, work[0], work[1]); consts[k] is one repeat of COEFFS[k].")
    want = poly.golden(x)
    t = tol(np.float16)
    err = np.abs(y.astype(np.float64) - want)
    worst = int(np.argmax(err / (t["atol"] + t["rtol"] * np.abs(want))))
    if not np.all(err <= t["atol"] + t["rtol"] * np.abs(want)) or not np.all(np.isfinite(y)):
        return failed("y is not p(x)", expected=f"p({float(x[worst]):.4g}) = {want[worst]:.5g}",
                      got=f"{float(y[worst]):.5g}",
                      hint="p(x) = c[0] + c[1] x + ... + c[D] x^D with c = poly.COEFFS (lowest degree first); "
                           "Horner's rule starts from the highest coefficient.")
    tr, n = ref.poly_run(fn, CHIP)
    cycles = int(tr.cycles)
    n = round(n)
    return perf_verdict(cycles, _reference_cycles(), f"y = p(x) with {n} vector instructions a tile",
                        f"the vector unit is the bottleneck, and every instruction is one pass over the tile: "
                        f"yours issues {n} a tile for a degree-{poly.DEGREE} polynomial. Fewer passes a degree.")


__all__ = ["matmul_intensity", "min_tokens", "bound", "ln_vector_cycles", "ln_bound", "poly_body",
           "reference_body"]
