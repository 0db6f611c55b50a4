"""Checkers of lab 01 (architecture and the roofline): arithmetic intensity and boundedness."""
from __future__ import annotations

from ...chips import chips, get_chip
from .. import lab01 as ref
from . import as_number, close, exercise, failed, is_blank, is_empty_function, not_attempted, passed

CHIP = "910"


@exercise("01", "the roofline: attainable = min(peak, intensity x bandwidth)")
def attainable(fn):
    """fn(intensity FLOP/B, peak TFLOPS, bandwidth GB/s) -> attainable TFLOPS."""
    if is_empty_function(fn):
        return not_attempted("write the body of attainable_tflops")
    if not callable(fn):
        return failed("the answer should be the function itself", expected="a function",
                      got=repr(fn), hint="pass attainable_tflops, without calling it.")
    cases = [(ai, c.peak_fp16_tflops, c.gm_bandwidth_gbs) for c in chips()
             for ai in (0.1, 1 / 6, 2.0, 100.0, 1000.0)]
    for ai, peak, bw in cases:
        want = ref.attainable_tflops(ai, peak, bw)
        got = as_number(fn(ai, peak, bw))
        if got is not None and close(got, want, 1e-6):
            continue
        args = f"attainable_tflops({ai:g}, {peak:g}, {bw:g})"
        if got is None:
            hint = "return a number (TFLOPS)."
        elif close(got, max(peak, ai * bw / 1000), 1e-6):
            hint = "the attainable rate is the smaller of the two limits, not the larger."
        elif close(got, ai * bw, 1e-6) or close(got, min(peak, ai * bw), 1e-6):
            hint = "units: FLOP/B x GB/s gives GFLOPS; divide by 1000 for TFLOPS."
        elif close(got, ai * bw / 1000, 1e-6):
            hint = "a unit cannot go faster than its peak: cap the memory slope at the roof."
        elif close(got, peak, 1e-6):
            hint = "below the ridge point the memory slope (intensity x bandwidth) limits, not the peak."
        else:
            hint = "attainable = min(peak, intensity x bandwidth / 1000)."
        return failed(f"wrong for {args}", expected=f"{want:g}", got=f"{got!r}" if got is None else f"{got:g}",
                      hint=hint)
    return passed(f"matches min(peak, intensity x bandwidth) on {len(cases)} points across every chip.")


def _intensity(answer, want: float, what: str, slips: list[tuple[float, str]], explain: str):
    if is_blank(answer):
        return not_attempted()
    got = as_number(answer)
    if got is None:
        return failed("the answer should be a number (FLOP per byte)", expected=f"{want:.4g}",
                      got=repr(answer), hint="divide FLOPs by bytes: a float.")
    if close(got, want):
        return passed(f"{got:.4g} FLOP/B. {explain}")
    for value, hint in slips:
        if close(got, value):
            return failed(f"not the intensity of {what}", expected=f"{want:.4g}", got=f"{got:.4g}", hint=hint)
    return failed(f"not the intensity of {what}", expected=f"{want:.4g}", got=f"{got:.4g}",
                  hint="intensity = FLOPs / bytes moved between GM and the core (every read and write).")


@exercise("01", "arithmetic intensity: FLOPs / GM bytes read and written")
def intensity_add(answer):
    """FLOP/B of z = x + y in fp16."""
    n, want = ref.ADD_N, ref.intensity_add()
    return _intensity(answer, want, "add", [
        (n / (2 * n * ref.FP16), "count the bytes written too: z goes back to GM."),
        (n / (3 * n), "an fp16 element is 2 bytes."),
        (n / (2 * n), "an fp16 element is 2 bytes, and z is written back to GM too."),
        (3 * n * ref.FP16 / n, "intensity is FLOPs divided by bytes, not bytes by FLOPs."),
    ], "One addition for every 6 bytes moved: far left on the roofline.")


@exercise("01", "arithmetic intensity of matmul: 2MNK FLOPs over A, B and C's bytes")
def intensity_matmul(answer):
    """FLOP/B of C = A @ B, fp16, shapes ref.MATMUL_MNK, each matrix moved once."""
    m, n, k = ref.MATMUL_MNK
    want = ref.intensity_matmul(m, n, k)
    fl, a, b, c = 2 * m * n * k, m * k, k * n, m * n
    return _intensity(answer, want, "matmul", [
        (fl / 2 / (ref.FP16 * (a + b + c)), "a multiply-accumulate (MAC) is two FLOPs."),
        (fl / (ref.FP16 * (a + b)), "count the bytes of C written back to GM too."),
        (fl / (a + b + c), "an fp16 element is 2 bytes."),
        (fl / (ref.FP16 * m * n * k), "each matrix crosses GM once (the tiles are reused on chip): "
                                      "bytes = 2 x (MK + KN + MN)."),
    ], "Each element of A and B is reused N or M times on chip: intensity grows with the size.")


@exercise("01", "arithmetic intensity of a normalisation: few FLOPs per element moved")
def intensity_layernorm(answer):
    """FLOP/B of LayerNorm over rows, fp16, 8 FLOPs an element, gamma and beta read once."""
    r, c = ref.LAYERNORM_RC
    f = ref.LAYERNORM_FLOPS_PER_ELEMENT
    want = ref.intensity_layernorm(r, c)
    return _intensity(answer, want, "layernorm", [
        (f * r * c / (ref.FP16 * r * c), "count the bytes written too: y goes back to GM."),
        (f * r * c / (2 * r * c + 2 * c), "an fp16 element is 2 bytes."),
        (r * c / (ref.FP16 * (2 * r * c + 2 * c)), f"use {f} FLOPs per element, as the spec says."),
        (f * r * c / (ref.FP16 * (2 * r * c + 2 * r * c)), "gamma and beta are one row each (C "
                                                           "elements), read once, not once per row."),
    ], f"{want:.2g} FLOPs a byte, whatever the size: left of the vector ridge, counted in FLOPs (the "
       f"lab counts the kernel's real passes after the exercises).")


@exercise("01", "the ridge point: each unit's peak / bandwidth separates memory- from compute-bound")
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


__all__ = ["attainable", "intensity_add", "intensity_matmul", "intensity_layernorm", "bound"]
