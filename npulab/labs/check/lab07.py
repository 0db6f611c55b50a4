"""Checkers of lab 07 (norms and activations): a softmax that cannot overflow, the Compute stage
of an RMSNorm kernel (numerics against float64 numpy, then cycles within 150% of the package's
kernel), and GELU's tanh form in float64."""
from __future__ import annotations

import math

import numpy as np

from ...errors import AlignmentError, BufferOverflowError, DeadlockError, RaceError, ShapeError, SyncError
from ...ops import golden
from .. import lab07 as ref
from . import (exercise, failed, is_empty_function, not_attempted, passed, perf_verdict, screen_class,
               screen_function, stopped)

SOFTMAX_ATOL = 2e-3          # fp16 results of values <= 1: half an fp16 ulp at 1 is 4.9e-4
RMS_RTOL, RMS_ATOL = 4e-3, 4e-3
# the tanh form's constants as frameworks write them (sqrt(2/pi) = 0.7978845608..., to 6 or more
# digits: 0.797885, 0.79788456) move GELU by under 1e-6; the erf form and every mistake in
# _gelu_variants differ from it by more than 1e-4 somewhere on the grid
GELU_TOL = 1e-6


def _same(a, b) -> bool:
    """Equal within fp16 rounding, NaN where the other has NaN."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and bool(np.all((np.isnan(a) & np.isnan(b)) |
                                              (np.abs(a - b) <= SOFTMAX_ATOL)))


# -- exercise 1: stable softmax ----------------------------------------------------------------------
@exercise("07", "stable softmax: exp(x - max of the row) / sum, so every exp is at most 1")
def stable_softmax(fn):
    """``fn(x)``: softmax over the last axis of a 2-D array, in x's dtype."""
    if (v := screen_function(fn, "stable_softmax")) is not None:
        return v
    for dt in (np.float16, np.float32):
        x = ref.softmax_logits(dtype=dt)
        with np.errstate(all="ignore"):
            got = fn(x.copy())
        want = golden.softmax(x, -1)
        case = f"{np.dtype(dt).name} logits up to |x| = {float(np.abs(x.astype(np.float64)).max()):,.0f}"
        got_a = np.asarray(got)
        if got_a.shape != x.shape:
            return failed(f"{case}: wrong shape", expected=str(x.shape), got=str(got_a.shape),
                          hint="keep the row axis: reduce with axis=-1, keepdims=True so that the max and "
                               "the sum broadcast back over each row.")
        if got_a.dtype != x.dtype:
            return failed(f"{case}: the result is not in x's dtype", expected=x.dtype.name, got=got_a.dtype.name,
                          hint="numpy keeps float16 when every operand is float16: compute on x itself (no "
                               "float64 or Python-float detours), or end with .astype(x.dtype).")
        if _same(got_a, want):
            continue
        with np.errstate(all="ignore"):
            naive = ref.softmax_naive(x)
            glob = np.exp(x - x.max())
            glob = glob / glob.sum(axis=-1, keepdims=True)
        bad = np.flatnonzero(~np.all(np.abs(got_a.astype(np.float64) - want) <= SOFTMAX_ATOL, axis=-1))
        row = int(bad[0])
        if _same(got_a, glob):
            hint = ("one max for the whole array leaves a row far below it with exp() = 0 everywhere "
                    "(0 / 0): subtract each row's own max (axis=-1, keepdims=True).")
        elif _same(got_a, naive) or not np.all(np.isfinite(got_a)):
            hint = (f"exp overflows {np.dtype(dt).name} for large logits (fp16 past ln(65504) = "
                    f"{ref.fp16_exp_limit():.2f}; float64 past 709): subtract each row's max before exp.")
        else:
            hint = "each row: e = exp(x - max(x)), then e / sum(e) over the same row."
        return failed(f"{case}: row {row} is not its softmax",
                      expected=np.array2string(want[row, :4], precision=4) + " ...",
                      got=np.array2string(got_a[row, :4].astype(np.float64), precision=4) + " ...",
                      hint=hint)
    big = float(np.abs(ref.softmax_logits(dtype=np.float32)[:-1]).max())
    return passed(f"finite and within {SOFTMAX_ATOL:g} of float64 softmax on fp16 and fp32 logits up to "
                  f"{big:,.0f} (where exp alone overflows even float64) and on a row near -2,000.")


# -- exercise 2: the RMSNorm Compute stage -----------------------------------------------------------
_ERRORS = {
    ShapeError: "vector ops take (dst, src..., count); the 2-D forms (reduce_sum_rows, mul_per_row, "
                "mul_per_col) take (dst, src, vec, rows, cols).",
    AlignmentError: "write per-row values into self.stats[0] as a whole (reduce_sum_rows fills rows "
                    "0..n-1 at once); a slice at a row offset is not 32-byte aligned.",
    BufferOverflowError: "use the buffers the kernel has: self.work[0] (n x cols fp32) and self.stats[0] "
                         "(one fp32 value a row).",
    RaceError: "compute_rows runs on the vector unit only: no copies or flags are needed.",
    SyncError: "compute_rows must not alloc or free queue tensors: the stages around it do.",
    DeadlockError: "compute_rows must not enque or deque: the stages around it do.",
}


def _rms_variants(x, g, eps, cols):
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    ms = (x64 * x64).mean(axis=-1, keepdims=True)
    with np.errstate(all="ignore"):
        return [
            (x64 / np.sqrt(ms * cols + eps) * g64, "reduce_sum_rows gives the sum of squares: multiply by "
                                                   "1 / cols for the mean before adding eps."),
            (x64 / np.sqrt(ms) * g64, "add eps to the mean of squares before sqrt: an all-zero row is 0 / 0 "
                                      "without it."),
            (x64 * np.sqrt(ms + eps) * g64, "the scale is 1 / sqrt(mean + eps): take the reciprocal of the "
                                            "square root (sqrt, then reciprocal) before mul_per_row."),
            (x64 / np.sqrt(ms + eps), "finish with mul_per_col(out32, x32, self.gamma, n, cols): gamma "
                                      "scales every column."),
        ]


@exercise("07", "a row kernel's Compute stage: square, reduce_sum_rows per row, mean + eps, sqrt and "
                "reciprocal once a row, then mul_per_row and mul_per_col (gamma)", performance=True)
def rms_norm_kernel(cls):
    """A RmsNormStages subclass whose ``compute_rows(self, x32, out32, n)`` the learner wrote."""
    if (v := screen_class(cls, ref.RmsNormStages, "lab07.RmsNormStages", "MyRmsNorm")) is not None:
        return v
    if cls.compute_rows is ref.RmsNormStages.compute_rows:
        return failed("compute_rows is the package's own", expected="your compute_rows",
                      got="RmsNormStages.compute_rows", hint="define compute_rows in your class.")
    if is_empty_function(cls.compute_rows):
        return not_attempted("write the body of compute_rows")
    x, g = ref.rms_inputs()
    cols = x.shape[1]
    try:
        y, trace = ref.run_rms_norm(cls, x, g)
    except tuple(_ERRORS) as err:
        return stopped(err, _ERRORS)
    want = golden.rms_norm(x, x.shape[-1], g, ref.RMS_EPS)
    y64 = y.astype(np.float64)
    ok = np.isfinite(y64) & (np.abs(y64 - want) <= RMS_ATOL + RMS_RTOL * np.abs(want))
    if not ok.all():
        r, c = (int(v) for v in np.argwhere(~ok)[0])
        hint = "y = x / sqrt(mean(x^2) + eps) * gamma over each row."
        for v, h in _rms_variants(x, g, ref.RMS_EPS, cols):
            close = np.isfinite(v) == np.isfinite(y64)
            close &= ~np.isfinite(v) | (np.abs(np.nan_to_num(v) - np.nan_to_num(y64)) <=
                                        RMS_ATOL + RMS_RTOL * np.abs(np.nan_to_num(v)))
            if close.mean() > 0.99:
                hint = h
                break
        return failed(f"y is not RMSNorm(x) (row {r}{', the all-zero row' if not x[r].any() else ''})",
                      expected=f"y[{r}, {c}] = {want[r, c]:.5f}", got=f"y[{r}, {c}] = {y64[r, c]:.5f} "
                      f"({int((~ok).sum()):,} of {y.size:,} wrong)", hint=hint)
    _, reference = ref.run_rms_norm(ref.RmsNormStages, x, g, mode="timing")
    return perf_verdict(trace.cycles, reference.cycles,
                        f"y = RMSNorm(x) within {RMS_RTOL:g} of float64 on {x.shape[0]:,} x {cols:,} fp16 "
                        f"(the zero row too)",
                        "sqrt and reciprocal (4 cycles a repeat) belong on the n per-row values, not on "
                        "every element: then one mul_per_row applies 1 / rms to the tile.")


# -- exercise 3: GELU, the tanh form ----------------------------------------------------------------
def _gelu_variants(x):
    c = math.sqrt(2 / math.pi)
    return [
        (0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x ** 3))) * 2, "GELU is 0.5 x (1 + tanh(...)): the factor 0.5 is missing."),
        (0.5 * x * (1 + np.tanh(math.sqrt(2 * math.pi) * (x + 0.044715 * x ** 3))), "the constant is sqrt(2 / pi), not sqrt(2 pi)."),
        (0.5 * x * (1 + np.tanh(c * x)), "the argument of tanh is sqrt(2/pi) (x + 0.044715 x^3): the cubic term is missing."),
        (0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x ** 2))), "the correction is 0.044715 x^3 (cubed), not squared."),
        (golden.gelu(x), "that is the exact erf form; the exercise asks for the tanh approximation."),
    ]


@exercise("07", "GELU's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))")
def gelu_tanh(fn):
    """``fn(x)``: the tanh form of GELU on a float64 array."""
    if (v := screen_function(fn, "gelu_tanh")) is not None:
        return v
    x = ref.gelu_grid(257)
    got = np.asarray(fn(x.copy()), dtype=np.float64)
    want = golden.gelu(x, approximate="tanh")
    if got.shape != want.shape:
        return failed("wrong shape", expected=str(want.shape), got=str(got.shape),
                      hint="apply the formula elementwise (numpy operations on the whole array).")
    if np.allclose(got, want, rtol=GELU_TOL, atol=GELU_TOL):
        err = float(np.abs(want - golden.gelu(x)).max())
        return passed(f"matches 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) on [-6, 6]; it differs "
                      f"from the exact erf GELU by up to {err:.2e}.")
    i = int(np.argmax(np.abs(got - want)))
    default = "0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))."
    if np.allclose(got, want, rtol=1e-3, atol=1e-4):
        default = (f"close, but {abs(got[i] - want[i]):.1e} off at x = {x[i]:.3f}: write the constants "
                   f"in full, sqrt(2/pi) = math.sqrt(2 / math.pi) and 0.044715.")
    hint = next((h for v, h in _gelu_variants(x) if np.allclose(got, v, rtol=1e-9, atol=1e-9)), default)
    return failed("not GELU's tanh form", expected=f"gelu_tanh({x[i]:.3f}) = {want[i]:.10g}",
                  got=f"{got[i]:.10g}", hint=hint)
