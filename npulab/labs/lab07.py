"""Lab 07 (norms and activations on the vector unit): the fp16 overflow of a naive softmax, the
RMSNorm kernel whose Compute stage the learner writes, and GELU's two forms measured against
float64 (the float64 truths are the goldens of :mod:`npulab.ops.golden`; a tile's instruction
stream and the vector pipe's time are read off a trace by :mod:`npulab.plot.vector_pipe`).

* :func:`softmax_naive`: the overflowing form; :func:`softmax_logits`: the exercise's logits;
* :class:`RmsNormStages` (= the package's RMSNorm kernel, whose ``compute_rows`` a subclass
  replaces), :func:`rms_inputs`, :func:`run_rms_norm`;
* :func:`gelu_grid`, :func:`gelu_errors`, :func:`gelu_cycles`;
* :func:`layer_norm_pipelining`: where fp16 LayerNorm's cycles go.
"""
from __future__ import annotations

import math

import numpy as np

from ..arch import DEFAULT_CHIP, ceil_div
from ..chips import get_chip
from ..kernels.activation import activation_tiling, launch_activation
from ..kernels.norm import KernelRmsNorm, launch_layer_norm, layer_norm_tiling, rms_norm_tiling
from ..kernels.rows import launch_rows
from ..ops import golden
from ..plot.vector_pipe import vector_time
from ..sim.isa import Kind, Pipe

SEED = 0
#: the RMSNorm exercise: a Llama-sized hidden dimension on the 910, fp16
RMS_SHAPE, RMS_CHIP, RMS_EPS = (1024, 4096), "910", 1e-6
#: the GELU measure: BERT-base's FFN activation (32 x 128 tokens x 3072)
GELU_SHAPE = (32 * 128, 3072)
#: the softmax exercise's logits: ordinary rows, rows with huge logits, a row far below zero
SOFTMAX_SCALES = (1.0, 300.0, 1000.0)


# -- softmax -----------------------------------------------------------------------------------
def softmax_naive(x) -> np.ndarray:
    """exp(x) / sum(exp(x)) in x's dtype, without subtracting the max."""
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
        return e / e.sum(axis=-1, keepdims=True)


def softmax_logits(seed: int = SEED, dtype=np.float16) -> np.ndarray:
    """Rows of logits at the scales of SOFTMAX_SCALES, plus a row shifted far below zero."""
    rng = np.random.default_rng(seed)
    rows = [rng.standard_normal((2, 64)) * s for s in SOFTMAX_SCALES]
    rows.append(rng.standard_normal((1, 64)) - 2000.0)
    return np.concatenate(rows).astype(dtype)


# -- RMSNorm ---------------------------------------------------------------------------------------
RmsNormStages = KernelRmsNorm
"""The kernel the exercise completes: CopyIn / Compute / CopyOut over tiles of whole rows
(:class:`npulab.kernels.rows.RowKernel`); a subclass writes ``compute_rows(x32, out32, n)``."""


def rms_inputs(shape=RMS_SHAPE, seed: int = SEED):
    """x (fp16, one row all zeros: eps keeps it finite) and gamma."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float16)
    x[shape[0] // 3] = 0
    return x, (1 + 0.1 * rng.standard_normal(shape[1])).astype(np.float16)


def run_rms_norm(cls, x, gamma, eps: float = RMS_EPS, chip=RMS_CHIP, mode: str = "functional"):
    """Launch ``cls`` (a RmsNormStages subclass) over x (rows, cols) with the package's RMSNorm
    tiling. Returns (y, trace)."""
    t = rms_norm_tiling(x.shape[0], x.shape[1], x.dtype, chip)

    def kernel(x_gm, g_gm, y_gm, tt, e):
        cls(x_gm, g_gm, y_gm, tt, e).process()

    return launch_rows(kernel, x, [gamma], t, chip, mode, float(eps))


# -- GELU --------------------------------------------------------------------------------------------
def gelu_grid(n: int = 4096, lo: float = -6.0, hi: float = 6.0) -> np.ndarray:
    return np.linspace(lo, hi, n)


def gelu_errors(chip: str = DEFAULT_CHIP) -> list[dict]:
    """Max |error| against the exact float64 GELU on a grid over [-6, 6]: the tanh formula
    itself, and the simulator's kernels (fp32 and fp16) for both forms."""
    from .. import ops
    x64 = gelu_grid()
    exact = golden.gelu(x64)
    rows = [{"what": "tanh formula, float64",
             "max_error": float(np.abs(golden.gelu(x64, approximate="tanh") - exact).max())}]
    for dt in (np.float32, np.float16):
        x = x64.astype(dt)
        exact_x = golden.gelu(x)                      # truth at the rounded inputs
        for form in ("none", "tanh"):
            y = ops.gelu(x, approximate=form, chip=chip)
            rows.append({"what": f"kernel approximate='{form}', {np.dtype(dt).name}",
                         "max_error": float(np.abs(y.astype(np.float64) - exact_x).max())})
    return rows


def gelu_cycles(shape=GELU_SHAPE, chip: str = DEFAULT_CHIP) -> dict:
    """Timing-mode cycles and vector instructions a tile of both GELU kernels (fp16)."""
    out = {}
    x = np.zeros(shape, np.float16)
    for form, act in (("none", "gelu_erf"), ("tanh", "gelu_tanh")):
        t = activation_tiling(x.size, x.dtype, act, chip)
        _, tr = launch_activation(x, t, chip, "timing")
        vec = int(np.sum((tr.core == 0) & (tr.pipe == int(Pipe.V)) & (tr.kind == 0)))
        tiles = ceil_div(t.block_factor, t.tile)
        out[form] = {"cycles": int(tr.cycles), "vector_per_tile": vec / tiles,
                     "vec_ratio": tr.pipe_ratios(0)["vec_ratio"]}
    return out


def layer_norm_pipelining(shape=(32 * 128, 768), chip: str = DEFAULT_CHIP) -> dict:
    """fp16 LayerNorm at ``shape`` in timing mode, one tile in the vector unit at a time
    (``in_flight=1``) and with the tiles interleaved as the package's tiling does by default:
    cycles (the cores' time, ``Trace.core_time``: the launch's own start-up is no vector
    time), the vector pipe's occupancy and the automatic PIPE_V barriers, on core 0, and
    ``time``, where core 0's vector pipe spent the cycles
    (:func:`npulab.plot.vector_pipe.vector_time`); and
    ``gm_bound``, the cycles its bytes (x, y, gamma, beta) take at the rate the chip's DRAM
    sustains (``gm_sustained_bytes_per_cycle``)."""
    x, g = np.zeros(shape, np.float16), np.zeros(shape[1], np.float16)
    out = {"gm_bound": round((2 * x.nbytes + 2 * g.nbytes) / get_chip(chip).gm_sustained_bytes_per_cycle)}
    for label, kw in (("one tile at a time", {"in_flight": 1, "param_tile": False}), ("interleaved", {})):
        t = layer_norm_tiling(shape[0], shape[1], np.float16, chip, **kw)
        _, tr = launch_layer_norm(x, g, g, t, 1e-5, chip, "timing")
        sets = np.flatnonzero((tr.core == 0) & (tr.kind == int(Kind.SET)))
        out[label] = {"in_flight": t.in_flight, "cycles": int(tr.core_time),
                      "vector_busy": int(tr.busy_cycles(0)[Pipe.V]),
                      "auto_barriers": sum(1 for i in sets if tr.name[i] == "pipe_barrier V (auto)"),
                      "time": vector_time(tr, 0)}
    return out


def fp16_exp_limit() -> float:
    """The largest x whose exp is finite in fp16: ln(fp16 max)."""
    return math.log(float(np.finfo(np.float16).max))


__all__ = ["softmax_naive", "softmax_logits", "RmsNormStages", "rms_inputs", "run_rms_norm", "gelu_grid",
           "gelu_errors", "gelu_cycles", "layer_norm_pipelining", "fp16_exp_limit"]
