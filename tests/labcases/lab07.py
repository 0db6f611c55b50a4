"""Lab 07's exercise cases (see labcases/__init__.py); exercise 2's (07.rms_norm_kernel) are still in
tests/labs/test_exercises.py. References are written from the lab's specs."""
from __future__ import annotations

from npulab import lang
from npulab.labs import lab07


# -- exercise 1: the Compute stage of a stable softmax ----------------------------------------------
def _softmax(kind="ok"):
    class Softmax(lab07.SoftmaxStages):
        def compute_rows(self, x32, out32, n):
            cols, (mx, sm) = self.cols, self.stats
            if kind != "naive":
                lang.reduce_max_rows(mx, x32, n, cols)
                lang.sub_per_row(x32, x32, mx, n, cols)
            lang.exp(x32, x32, n * cols)
            if kind == "unnormalised":
                lang.adds(out32, x32, 0.0, n * cols)
                return
            lang.reduce_sum_rows(sm, x32, n, cols)
            if kind == "div":                           # dividing by the sums is right too
                lang.div_per_row(out32, x32, sm, n, cols)
                return
            if kind != "no reciprocal":
                lang.reciprocal(sm, sm, n)
            lang.mul_per_row(out32, x32, sm, n, cols)
    return Softmax


class _SoftmaxBlank(lab07.SoftmaxStages):
    def compute_rows(self, x32, out32, n):
        ...


# -- exercise 5: the chunked RMSNorm (challenge) ---------------------------------------------------------
def _chunked(chunk=8192, kind="ok"):
    class Chunked(lab07.ChunkedStages):
        CHUNK = chunk

        def process(self):
            for r in range(self.nrows):
                lang.duplicate(self.acc, 0.0, 8)
                for c0, w in self.chunks():
                    x32 = self.load(r, c0, w)
                    lang.mul(x32, x32, x32, w)
                    if kind == "overwrite":             # each chunk's sum replaces the last one's
                        lang.reduce_sum_rows(self.acc, x32, 1, w)
                    else:
                        lang.reduce_sum_rows(self.part, x32, 1, w)
                        lang.add(self.acc, self.acc, self.part, 1)
                lang.muls(self.acc, self.acc, 1.0 / self.cols, 1)
                lang.adds(self.acc, self.acc, self.eps, 1)
                lang.sqrt(self.acc, self.acc, 1)
                lang.reciprocal(self.acc, self.acc, 1)
                for c0, w in self.chunks():
                    x32 = self.load(r, c0, w)
                    lang.mul_per_row(x32, x32, self.acc, 1, w)
                    lang.mul(x32, x32, self.gamma[c0:], w)
                    self.store(r, c0, w, x32)
    return Chunked


class _ChunkedBlank(lab07.ChunkedStages):
    def process(self):
        ...


# -- exercise 3: (UB - gamma in fp16 and fp32) // (3 + 3 fp16 slots, 2 fp32 rows, one fp32 value)
ROWS_THAT_FIT = (262144 - 3072 * 2 - 3072 * 4) // (2 * 3 * 3072 * 2 + 2 * 3072 * 4 + 4)
BOUND = {"LayerNorm fp32": "MTE2", "RMSNorm fp32": "MTE2", "Softmax fp16": "V", "Softmax fp32": "MTE2"}

CASES: dict = {
    "07.softmax_rows": (_softmax(), [(_softmax("naive"), "subtract each row's max"),
                                     (_softmax("no reciprocal"), "reciprocal of the per-row sums"),
                                     (_softmax("unnormalised"), "not normalised"),
                                     (lab07.SoftmaxStages, "the package's own"),
                                     (3, "your kernel class")], _SoftmaxBlank),
    "07.rows_that_fit": (ROWS_THAT_FIT, [(2 * ROWS_THAT_FIT, "four bytes a value"),
                                         (ROWS_THAT_FIT + 1, "three slots in each queue"),
                                         (ROWS_THAT_FIT - 1, "more rows fit"),
                                         (float(ROWS_THAT_FIT), "whole number")], ...),
    "07.bound_pipes": (BOUND, [(dict.fromkeys(BOUND, "V"), "fp32 input needs no casts"),
                               (dict.fromkeys(BOUND, "MTE2"), "widened to fp32"),
                               ({**BOUND, "Softmax fp16": "MTE2", "Softmax fp32": "V"},
                                "estimate both"),
                               ({k: v for k, v in BOUND.items() if k != "Softmax fp16"}, "one pipe for each case"),
                               ({**BOUND, "RMSNorm fp32": "UB"}, "not a pipe")], ...),
    "07.chunked_rms_norm": (_chunked(), [(lab07.RmsNormStages, "does not fit the UB"),   # the default: whole rows
                                         (_chunked(512), "as large as the UB allows"),  # the scaffold's CHUNK
                                         (_chunked(kind="overwrite"), "only one chunk"),
                                         (_chunked(16384), "CHUNK is too large")], _ChunkedBlank),
}
