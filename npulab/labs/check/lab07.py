"""Checkers of lab 07 (norms and activations on the vector unit): the Compute stage of a stable
softmax and of RMSNorm written with the vector instructions (numerics against float64 numpy,
RMSNorm's cycles within 150% of the package's kernel), the rows a widened fp16 tile can hold in
the UB, which pipe bounds four norms (against the simulator's measurement), and the challenge:
RMSNorm of rows too long for the UB, streamed in chunks, within 150% of the reference's
cycles."""
from __future__ import annotations

import functools

import numpy as np

from ...errors import AlignmentError, BufferOverflowError, DeadlockError, RaceError, ShapeError, SyncError
from ...kernels.norm import rms_norm_tiling
from ...kernels.rows import RowKernel
from ...ops import golden
from .. import lab07 as ref
from . import (as_number, exercise, failed, is_blank, is_empty_function, not_attempted, passed, perf_verdict,
               pipe_named, screen_class, stopped)

SOFTMAX_ATOL = 2e-3          # fp16 results of values <= 1: half an fp16 ulp at 1 is 4.9e-4
RMS_RTOL, RMS_ATOL = 4e-3, 4e-3

_ERRORS = {
    ShapeError: "vector ops take (dst, src..., count); the 2-D forms (reduce_sum_rows, mul_per_row, "
                "mul_per_col, ...) take (dst, src, vec, rows, cols).",
    AlignmentError: "write per-row values into a stats vector as a whole (reduce_sum_rows fills rows 0..n-1 "
                    "at once); a slice at an odd offset is not 32-byte aligned.",
    BufferOverflowError: "use the buffers the kernel has (self.work, self.stats): a new buffer does not fit.",
    RaceError: "compute_rows runs on the vector unit only: no copies or flags are needed.",
    SyncError: "compute_rows must not alloc or free queue tensors: the stages around it do.",
    DeadlockError: "compute_rows must not enque or deque: the stages around it do.",
}


def _close(got, want, atol, rtol=0.0):
    """Finite where want is finite, and within atol + rtol |want|."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return np.isfinite(got) & (np.abs(got - want) <= atol + rtol * np.abs(want))


def _matches(got, v, atol, rtol=0.0) -> bool:
    """Does ``got`` compute what a mistake ``v`` computes: non-finite where it is, close elsewhere?"""
    fin = np.isfinite(v)
    return bool(np.array_equal(fin, np.isfinite(got)) and np.all(_close(got[fin], v[fin], atol, rtol)))


def _first_wrong(ok) -> tuple[int, int]:
    r, c = np.argwhere(~ok)[0]
    return int(r), int(c)


def _own_method(cls, base, name: str):
    """A FAIL when ``cls`` still uses the package's ``name``, NOT ATTEMPTED while its body is blank."""
    if getattr(cls, name) is getattr(base, name):
        return failed(f"{name} is the package's own", expected=f"your {name}", got=f"{base.__name__}.{name}",
                      hint=f"define {name} in your class.")
    if is_empty_function(getattr(cls, name)):
        return not_attempted(f"write the body of {name}")
    return None


# -- exercise 1: the Compute stage of a stable softmax -----------------------------------------
def _softmax_variants(x):
    """What typical mistakes compute, in fp32 as the kernel does (so exp underflows where the
    kernel's does), with the hint each deserves."""
    x64 = x.astype(np.float32)
    with np.errstate(all="ignore"):
        e_row = np.exp(x64 - x64.max(axis=-1, keepdims=True))
        e_all = np.exp(x64 - x64.max())
        return [
            (e_all / e_all.sum(axis=-1, keepdims=True),
             "one max for the whole tile (reduce_max) leaves a row far below it with exp() = 0 everywhere "
             "(0 / 0): subtract each row's own max (reduce_max_rows, then sub_per_row)."),
            (e_row * e_row.sum(axis=-1, keepdims=True),
             "each row is scaled by its sum, not divided by it: take the reciprocal of the per-row sums first."),
            (e_row, "the exps are not normalised: divide each row by its own sum (reduce_sum_rows, reciprocal, "
                    "mul_per_row)."),
        ]


@exercise("07", "stable softmax on the vector unit: each row's max subtracted before exp (every exp at "
                "most 1), then each row scaled by 1 / its sum",
          key=("lang.reduce_max_rows(mx, x32, n, cols)", "lang.sub_per_row(x32, x32, mx, n, cols)"))
def softmax_rows(cls):
    """A SoftmaxStages subclass whose ``compute_rows(self, x32, out32, n)`` the learner wrote."""
    if (v := screen_class(cls, ref.SoftmaxStages, "lab07.SoftmaxStages", "MySoftmax")) is not None:
        return v
    if (v := _own_method(cls, ref.SoftmaxStages, "compute_rows")) is not None:
        return v
    for dt in (np.float16, np.float32):
        x = ref.softmax_logits(dtype=dt)
        case = f"{np.dtype(dt).name} logits up to |x| = {float(np.abs(x.astype(np.float64)).max()):,.0f}"
        try:
            y, _ = ref.run_softmax(cls, x)
        except tuple(_ERRORS) as err:
            return stopped(err, _ERRORS, f"{case}: ")
        want = golden.softmax(x, -1)
        ok = _close(y, want, SOFTMAX_ATOL)
        if ok.all():
            continue
        r, _ = _first_wrong(ok)
        y64 = y.astype(np.float64)
        hint = next((h for v, h in _softmax_variants(x) if _matches(y64, v.astype(np.float64), SOFTMAX_ATOL, 4e-3)),
                    None)
        if hint is None and not np.isfinite(y64).all():
            hint = ("exp overflows for large logits (fp32 past 88.7, fp16 past ln(65504) = "
                    f"{ref.fp16_exp_limit():.2f}): subtract each row's max before exp.")
        hint = hint or "each row: e = exp(x - max of the row), then e times 1 / (the row's sum of e)."
        return failed(f"{case}: row {r} is not its softmax",
                      expected=np.array2string(want[r, :4], precision=4) + " ...",
                      got=np.array2string(y64[r, :4], precision=4) + " ...", hint=hint)
    return passed(f"within {SOFTMAX_ATOL:g} of float64 softmax on fp16 and fp32 logits up to 1,000 (where exp alone "
                  f"overflows even float64) and on a row near -2,000, computed on the simulated vector unit.")


# -- exercise 2: the RMSNorm Compute stage -----------------------------------------------------------
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
                                            "square root before mul_per_row."),
            (x64 / np.sqrt(ms + eps), "finish with mul_per_col(out32, x32, self.gamma, n, cols): gamma "
                                      "scales every column."),
        ]


@exercise("07", "a row kernel's Compute stage: square, reduce_sum_rows per row, mean + eps, sqrt and "
                "reciprocal once a row, then mul_per_row and mul_per_col (gamma)", performance=True,
          key=("1.0 / cols", "lang.reciprocal(rstd, rstd, n)"))
def rms_norm_kernel(cls):
    """A RmsNormStages subclass whose ``compute_rows(self, x32, out32, n)`` the learner wrote."""
    if (v := screen_class(cls, ref.RmsNormStages, "lab07.RmsNormStages", "MyRmsNorm")) is not None:
        return v
    if (v := _own_method(cls, ref.RmsNormStages, "compute_rows")) is not None:
        return v
    x, g = ref.rms_inputs()
    cols = x.shape[1]
    try:
        y, trace = ref.run_rms_norm(cls, x, g)
    except tuple(_ERRORS) as err:
        return stopped(err, _ERRORS)
    want = golden.rms_norm(x, x.shape[-1], g, ref.RMS_EPS)
    y64 = y.astype(np.float64)
    ok = _close(y64, want, RMS_ATOL, RMS_RTOL)
    if not ok.all():
        r, c = _first_wrong(ok)
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
    return perf_verdict(trace.cycles, _rms_reference_cycles(),
                        f"y = RMSNorm(x) within {RMS_RTOL:g} of float64 on {x.shape[0]:,} x {cols:,} fp16 "
                        f"(the zero row too)",
                        "sqrt and reciprocal (4 cycles a repeat) belong on the n per-row values, not on "
                        "every element: then one mul_per_row applies 1 / rms to the tile.")


@functools.lru_cache(maxsize=None)
def _rms_reference_cycles() -> int:
    x, g = ref.rms_inputs()
    return int(ref.run_rms_norm(ref.RmsNormStages, x, g, mode="timing")[1].cycles)


# -- exercise 3: the rows a widened fp16 tile holds ---------------------------------------------------
#: the rows of exercise 3: fp16, 3,072 values a row, on the 910 (RMSNorm's default 3 queue slots)
FIT_COLS, FIT_CHIP = 3072, "910"


def _fits(rows: int) -> bool:
    try:
        rms_norm_tiling(4096, FIT_COLS, np.float16, FIT_CHIP, tile_rows=rows)
        return True
    except ShapeError:
        return False


@functools.lru_cache(maxsize=None)
def _most_rows() -> int:
    k = 1
    while _fits(k + 1):
        k += 1
    return k


@exercise("07", "a row kernel's UB tile: whole rows, each with its queue slots (buffer_num in, buffer_num "
                "out), its fp32 copies and its per-row statistic, beside what the kernel keeps all run",
          key=("2 * 3 * 3072 * 2", "2 * 3072 * 4"))
def rows_that_fit(answer):
    """The most rows of 3,072 fp16 values one tile of the package's RMSNorm can hold on the 910."""
    if is_blank(answer):
        return not_attempted()
    n = as_number(answer)
    if n is None or n != int(n) or isinstance(answer, float):
        return failed("the answer should be a whole number of rows", expected="an int", got=repr(answer),
                      hint="count rows: use // for the division.")
    n, best = int(n), _most_rows()
    ub = ref.chip_rates(FIT_CHIP)["ub_bytes"]
    if n == best:
        return passed(f"{best} rows of {FIT_COLS:,} fp16 values: one more and the tile overflows the {ub:,} B UB.")
    if n < best:
        return failed("not the most rows that fit", expected="the largest tile_rows whose buffers fit the UB",
                      got=f"{n} rows", hint="more rows fit: count each buffer once, and only the ones the spec names.")
    if n >= 2 * best:
        hint = (f"{n} rows do not fit: a widened fp16 row costs more than its own bytes; its fp32 copies take "
                f"four bytes a value.")
    else:
        hint = (f"{n} rows do not fit: count every buffer, three slots in each queue, two fp32 rows a tile row, "
                f"one fp32 value a row, and gamma (fp16 and fp32) kept for the whole run.")
    return failed("more rows than the UB holds", expected="the largest tile_rows whose buffers fit the UB",
                  got=f"{n} rows", hint=hint)


# -- exercise 4: which pipe bounds a norm ---------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _measured_bounds() -> tuple:
    return tuple((k, v["bound"], v["V"], v["MTE2"]) for k, v in ref.bound_pipes().items())


@exercise("07", "vector- or memory-bound: a norm's fp32 passes over every element at 64 values a cycle "
                "against its bytes at one core's share of HBM; fp16 input halves the bytes and adds the casts",
          key=('"LayerNorm fp32": "MTE2"', '"Softmax fp16": "V"', '"Softmax fp32": "MTE2"'))
def bound_pipes(answer):
    """A dict {case: pipe} for the cases of lab07.BOUND_CASES ("LayerNorm fp16", ...), each "V" or "MTE2"."""
    if is_blank(answer):
        return not_attempted()
    measured = _measured_bounds()
    names = [k for k, *_ in measured]
    if not isinstance(answer, dict) or set(answer) != set(names):
        return failed("the answer should be a dict with one pipe for each case", expected=f"keys {names}",
                      got=repr(answer)[:120], hint="keep the keys of the stub and replace each ... with a pipe.")
    if any(v is Ellipsis for v in answer.values()):
        return not_attempted("name a pipe for every case")
    got = {}
    for k, v in answer.items():
        p = pipe_named(v) if isinstance(v, str) else None
        if p is None or p.name not in ("V", "MTE2"):
            return failed(f"{k}: not a pipe of this question", expected='"V" or "MTE2"', got=repr(v),
                          hint="a norm is bound by the vector unit (V) or by its copies in from HBM (MTE2).")
        got[k] = p.name
    wrong = [k for k, b, *_ in measured if got[k] != b]
    if not wrong:
        return passed("busiest pipe on core 0 of the 910 (busy cycles, V / MTE2): " +
                      "; ".join(f"{k} {b} ({v:,} / {m:,})" for k, b, v, m in measured))
    picked = set(got.values())
    if picked == {"V"}:
        hint = ("not every norm is vector-bound: fp32 input needs no casts and moves twice the bytes of fp16, so "
                "compare its passes with its bytes again.")
    elif picked == {"MTE2"}:
        hint = ("not every norm is memory-bound: an fp16 row is widened to fp32 and every step is an fp32 pass "
                "at 64 values a cycle; count the passes (an exp costs four).")
    else:
        hint = ("estimate both for each case: passes x elements / 64 (an exp costs four, a cast one) against "
                "bytes read and written / one core's share of HBM.")
    return failed(f"{len(wrong)} of {len(names)} cases bound by the other pipe", expected="the busier pipe of each",
                  got=", ".join(f"{k}: {v}" for k, v in got.items()), hint=hint)


# -- exercise 5 (challenge): RMSNorm of rows that do not fit the UB -------------------------------------
_CHUNK_ERRORS = {
    BufferOverflowError: "CHUNK is too large: the in and out queues (2 slots each), x32 (fp32) and gamma (fp32, "
                         "the whole row) must fit the UB together; lower CHUNK.",
    ShapeError: "a whole row of 16,384 fp16 values with its slots and fp32 copies does not fit the UB: stream "
                "each row through in chunks (a ChunkedStages subclass) and read it twice.",
    AlignmentError: "keep CHUNK a multiple of 16 and the per-row values in self.acc / self.part as they are.",
    RaceError: "move data with load / store only: they order the copies with the queues.",
    SyncError: "every load is consumed by the vector unit, every store frees its slot: call them in pairs as "
               "the docstring says.",
    DeadlockError: "every load is consumed by the vector unit, every store frees its slot: call them in pairs "
                   "as the docstring says.",
}


@functools.lru_cache(maxsize=None)
def _chunked_reference_cycles() -> int:
    x, g = ref.chunked_inputs()
    return int(ref.run_chunked(ref.KernelRmsNormChunked, x, g, mode="timing")[1].cycles)


@exercise("07", "a row longer than the UB: two passes over it in chunks (fp32 sum of squares into one value a "
                "row, then the scaling), each chunk as large as the UB's buffers allow", performance=True,
          challenge=True, key=("CHUNK = 8192", "lang.add(self.acc, self.acc, self.part, 1)"))
def chunked_rms_norm(cls):
    """A ChunkedStages subclass (its ``CHUNK`` and ``process``), or a row kernel class to be told why not."""
    if isinstance(cls, type) and issubclass(cls, RowKernel):
        if not issubclass(cls, ref.RmsNormStages):
            return failed("the answer should be an RMSNorm kernel", expected="a subclass of lab07.ChunkedStages",
                          got=repr(cls), hint="subclass lab07.ChunkedStages and write its process.")
    elif (v := screen_class(cls, ref.ChunkedStages, "lab07.ChunkedStages", "MyChunked")) is not None:
        return v
    elif cls.process is ref.ChunkedStages.process or is_empty_function(cls.process):
        return not_attempted("write process (and choose CHUNK)")
    x, g = ref.chunked_inputs()
    try:
        y, trace = ref.run_chunked(cls, x, g)
    except tuple(_CHUNK_ERRORS) as err:
        return stopped(err, _CHUNK_ERRORS)
    want = golden.rms_norm(x, x.shape[-1], g, ref.RMS_EPS)
    y64 = y.astype(np.float64)
    ok = _close(y64, want, RMS_ATOL, RMS_RTOL)
    if not ok.all():
        r, c = _first_wrong(ok)
        last = x[:, -cls.CHUNK:].astype(np.float64) if cls.CHUNK < x.shape[1] else x.astype(np.float64)
        with np.errstate(all="ignore"):
            one = x.astype(np.float64) / np.sqrt((last ** 2).mean(-1, keepdims=True) * last.shape[1] / x.shape[1]
                                                 + ref.RMS_EPS) * g
        hint = ("pass 1 sums the squares of every chunk of a row into self.acc (in fp32); then 1 / sqrt(acc / cols "
                "+ eps) once a row; pass 2 scales every chunk by it and by gamma.")
        if np.mean(_close(y64, np.nan_to_num(one), RMS_ATOL, RMS_RTOL)) > 0.99:
            hint = ("the sum of squares keeps only one chunk's part: add every chunk's partial sum into self.acc "
                    "(the first chunk may write it directly).")
        return failed(f"y is not RMSNorm(x) (row {r})", expected=f"y[{r}, {c}] = {want[r, c]:.5f}",
                      got=f"y[{r}, {c}] = {y64[r, c]:.5f} ({int((~ok).sum()):,} of {y.size:,} wrong)", hint=hint)
    return perf_verdict(trace.cycles, _chunked_reference_cycles(),
                        f"y = RMSNorm(x) within {RMS_RTOL:g} of float64 on {x.shape[0]} rows of {x.shape[1]:,} fp16, "
                        f"in chunks of {cls.CHUNK:,}",
                        "every chunk pays its copies' latency and its instructions' start-ups: use chunks as "
                        "large as the UB allows (count its buffers), and keep the per-row work (sqrt, "
                        "reciprocal) out of the chunk loops.")
