"""Lab 07 (norms and activations on the vector unit): the fp16 overflow of a naive softmax, a
reduction's instruction stream, the RMSNorm kernel whose Compute stage the learner writes, and
GELU's two forms measured against float64.

* :func:`softmax_reference`, :func:`softmax_naive`: float64 truth and the overflowing form;
* :func:`vector_program`: the vector instructions of one tile of a row kernel, from a trace;
* :class:`RmsNormStages` (= the package's RMSNorm kernel, whose ``compute_rows`` a subclass
  replaces), :func:`run_rms_norm`, :func:`rms_norm_reference`;
* :func:`gelu_erf64`, :func:`gelu_tanh64`, :func:`gelu_errors`, :func:`gelu_cycles`;
* :func:`layer_norm_pipelining`, :func:`vector_time`: where fp16 LayerNorm's cycles go.
"""
from __future__ import annotations

import math

import numpy as np

from ..arch import DEFAULT_CHIP, ceil_div
from ..chips import get_chip
from ..kernels.activation import activation_tiling, launch_activation
from ..kernels.norm import KernelRmsNorm, launch_layer_norm, layer_norm_tiling, rms_norm_tiling
from ..kernels.rows import launch_rows
from ..plot.idle import pipe_time
from ..sim.isa import Kind, Pipe

SEED = 0
#: the RMSNorm exercise: a Llama-sized hidden dimension on the 910, fp16
RMS_SHAPE, RMS_CHIP, RMS_EPS = (1024, 4096), "910", 1e-6
#: the GELU measure: BERT-base's FFN activation (32 x 128 tokens x 3072)
GELU_SHAPE = (32 * 128, 3072)
#: the softmax exercise's logits: ordinary rows, rows with huge logits, a row far below zero
SOFTMAX_SCALES = (1.0, 300.0, 1000.0)


# -- softmax -----------------------------------------------------------------------------------
def softmax_reference(x) -> np.ndarray:
    """Softmax over the last axis in float64 (the stable form)."""
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


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


# -- the instruction stream of one tile ------------------------------------------------------------
def vector_program(trace, core: int = 0, tile: int = 0) -> list[tuple[str, int]]:
    """(name, cycles) of the vector instructions one tile of a row kernel issued on ``core``. A
    tile's Compute stage begins when it takes an output slot (the ``alloc_tensor out_...`` mark
    on the vector pipe) and runs until the next tile's does; the marks themselves (no cycles)
    are left out."""
    sel = np.flatnonzero((trace.core == core) & (trace.pipe == int(Pipe.V)) & (trace.kind == 0))
    order = sel[np.argsort(trace.start[sel], kind="stable")]
    starts = [k for k, i in enumerate(order) if trace.name[i].startswith("alloc_tensor out_")]
    if tile >= len(starts):
        return []
    stop = starts[tile + 1] if tile + 1 < len(starts) else len(order)
    return [(trace.name[i], int(trace.end[i] - trace.start[i])) for i in order[starts[tile] + 1: stop]
            if trace.end[i] > trace.start[i]]


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


def rms_norm_reference(x, gamma, eps: float = RMS_EPS) -> np.ndarray:
    x64 = np.asarray(x, np.float64)
    return x64 / np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + eps) * np.asarray(gamma, np.float64)


def run_rms_norm(cls, x, gamma, eps: float = RMS_EPS, chip=RMS_CHIP, mode: str = "functional"):
    """Launch ``cls`` (a RmsNormStages subclass) over x (rows, cols) with the package's RMSNorm
    tiling. Returns (y, trace)."""
    t = rms_norm_tiling(x.shape[0], x.shape[1], x.dtype, chip)

    def kernel(x_gm, g_gm, y_gm, tt, e):
        cls(x_gm, g_gm, y_gm, tt, e).process()

    return launch_rows(kernel, x, [gamma], t, chip, mode, float(eps))


# -- GELU --------------------------------------------------------------------------------------------
_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_erf64(x) -> np.ndarray:
    """The exact GELU, x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), in float64."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_tanh64(x) -> np.ndarray:
    """The tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in float64."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_grid(n: int = 4096, lo: float = -6.0, hi: float = 6.0) -> np.ndarray:
    return np.linspace(lo, hi, n)


def gelu_errors(chip: str = DEFAULT_CHIP) -> list[dict]:
    """Max |error| against the exact float64 GELU on a grid over [-6, 6]: the tanh formula
    itself, and the simulator's kernels (fp32 and fp16) for both forms."""
    from .. import ops
    x64 = gelu_grid()
    exact = gelu_erf64(x64)
    rows = [{"what": "tanh formula, float64", "max_error": float(np.abs(gelu_tanh64(x64) - exact).max())}]
    for dt in (np.float32, np.float16):
        x = x64.astype(dt)
        exact_x = gelu_erf64(x)                       # truth at the rounded inputs
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


def vector_time(trace, core: int = 0) -> dict:
    """Where the vector pipe of ``core`` spent the kernel's cycles: the gantt table's breakdown
    (:func:`npulab.plot.idle.pipe_time`) with its waits grouped by what they wait for:
    ``busy`` (its repeats), ``barriers`` (automatic PIPE_V barriers: a step waiting for the
    result of the one before), ``copy_in`` (deque: a tile or a parameter not yet copied in;
    ``first_tile``: the cycle the first tile of x arrived), ``copy_out`` (a slot not yet copied
    out and freed, and the end of the block waiting for the last copies out), ``other`` (the
    rest). The parts add up to ``cycles``, the core's run."""
    row = next(r for r in pipe_time(trace, core) if r["pipe"] == "VECTOR")
    parts = {"barriers": 0, "copy_in": 0, "copy_out": 0}
    for reason, took in row["waits"].items():
        if reason.startswith("pipe_barrier"):
            parts["barriers"] += took
        elif reason.startswith("deque"):
            parts["copy_in"] += took
        elif reason.startswith(("release", "alloc_tensor")):
            parts["copy_out"] += took
    on = np.flatnonzero((trace.core == core) & (trace.pipe == int(Pipe.V)) & (trace.kind == int(Kind.WAIT))
                        & (trace.end > trace.start))
    first = next((int(trace.end[i]) for i in on if trace.name[i].startswith("deque in_x")), 0)
    return {"cycles": row["span"], "busy": row["busy"], **parts, "first_tile": first,
            "other": row["span"] - row["busy"] - sum(parts.values())}


def layer_norm_pipelining(shape=(32 * 128, 768), chip: str = DEFAULT_CHIP) -> dict:
    """fp16 LayerNorm at ``shape`` in timing mode, one tile in the vector unit at a time
    (``in_flight=1``) and with the tiles interleaved as the package's tiling does by default:
    cycles, the vector pipe's occupancy and the automatic PIPE_V barriers, on core 0, and
    ``time``, where core 0's vector pipe spent the cycles (:func:`vector_time`); and
    ``gm_bound``, the cycles its bytes (x, y, gamma, beta) take at the chip's GM rate."""
    x, g = np.zeros(shape, np.float16), np.zeros(shape[1], np.float16)
    out = {"gm_bound": round((2 * x.nbytes + 2 * g.nbytes) / get_chip(chip).memory.gm_bytes_per_cycle)}
    for label, kw in (("one tile at a time", {"in_flight": 1, "param_tile": False}), ("interleaved", {})):
        t = layer_norm_tiling(shape[0], shape[1], np.float16, chip, **kw)
        _, tr = launch_layer_norm(x, g, g, t, 1e-5, chip, "timing")
        sets = np.flatnonzero((tr.core == 0) & (tr.kind == int(Kind.SET)))
        out[label] = {"in_flight": t.in_flight, "cycles": int(tr.cycles),
                      "vector_busy": int(tr.busy_cycles(0)[Pipe.V]),
                      "auto_barriers": sum(1 for i in sets if tr.name[i] == "pipe_barrier V (auto)"),
                      "time": vector_time(tr, 0)}
    return out


def fp16_exp_limit() -> float:
    """The largest x whose exp is finite in fp16: ln(fp16 max)."""
    return math.log(float(np.finfo(np.float16).max))


__all__ = ["softmax_reference", "softmax_naive", "softmax_logits", "vector_program", "RmsNormStages",
           "rms_inputs", "rms_norm_reference", "run_rms_norm", "gelu_erf64", "gelu_tanh64", "gelu_grid",
           "gelu_errors", "gelu_cycles", "vector_time", "layer_norm_pipelining", "fp16_exp_limit"]
