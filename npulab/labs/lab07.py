"""Lab 07 (norms and activations on the vector unit): the kernels whose stages the learner
writes, the cases the exercises run, and the figures the lab measures (the float64 truths are
the goldens of :mod:`npulab.ops.golden`; a tile's instruction stream and the vector pipe's time
are read off a trace by :mod:`npulab.plot.vector_pipe`).

* :func:`chip_rates`: the vector unit's and one core's share of HBM's rates, side by side;
  :func:`draw_row_tile`: the idea's picture; :func:`pass_cycles`, :func:`plot_passes`: a run's
  vector time by instruction against MTE2's;
* :func:`softmax_naive`: the overflowing form; :func:`softmax_logits`: the exercise's logits;
  :class:`SoftmaxStages`, :func:`run_softmax`: the softmax row kernel of exercise 1;
* :class:`RmsNormStages` (= the package's RMSNorm kernel, whose ``compute_rows`` a subclass
  replaces), :func:`rms_inputs`, :func:`run_rms_norm`;
* :data:`BOUND_CASES`, :func:`bound_pipes`: which pipe is busiest for a norm (exercise 4);
* :class:`ChunkedStages`, :func:`chunked_inputs`, :func:`run_chunked`: RMSNorm of rows too
  long for the UB (the challenge);
* :func:`gelu_grid`, :func:`gelu_errors`, :func:`gelu_cycles`, :func:`gelu_formula_error`;
* :func:`layer_norm_pipelining`: where fp16 LayerNorm's cycles go (the deep dive).
"""
from __future__ import annotations

import math

import numpy as np

from ..arch import DEFAULT_CHIP, ceil_div
from ..chips import get_chip
from ..kernels.activation import GELU_ERF_E, activation_tiling, launch_activation
from ..kernels.examples.rms_norm_chunked import KernelRmsNormChunked, chunk_tiling, launch_rms_norm_chunked
from ..kernels.norm import KernelRmsNorm, launch_layer_norm, layer_norm_tiling, rms_norm_tiling
from ..kernels.rows import launch_rows
from ..kernels.softmax import KernelSoftmaxAR, launch_softmax, softmax_ar_tiling
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


# -- the chip's two rates ----------------------------------------------------------------------
def chip_rates(chip: str = "910") -> dict:
    """What one core of ``chip`` does a cycle: fp32 values the vector unit passes over
    (``repeat_bytes / 4``), and bytes of HBM its share of the sustained bandwidth moves (the
    cores share it: ``gm_sustained_bytes_per_cycle / cores``)."""
    c = get_chip(chip)
    cores = c.cores_for("aiv")
    return {"chip": c.name, "cores": cores, "fp32_per_cycle": c.vector.repeat_bytes // 4,
            "fp16_per_cycle": c.vector.repeat_bytes // 2,
            "hbm_bytes_per_cycle_per_core": c.gm_sustained_bytes_per_cycle / cores,
            "ub_bytes": c.buffers.ub}


_QUEUE_MARKS = ("alloc_tensor", "free_tensor", "enque", "deque", "init_buffer")   # queue book-keeping


def draw_row_tile(rows: int = 4, ax=None):
    """The idea's picture: one UB tile of ``rows`` whole rows going through a norm's steps. The
    fp16 slot is widened to an fp32 tile (twice the bytes), each row reduced to one fp32 value
    (a column of per-row statistics), that value broadcast back over its row, and the result
    rounded into the fp16 out slot."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle
    ax = ax or plt.subplots(figsize=(9, 2.6))[1]
    h = 0.5
    boxes = [("in slot (fp16)", 0.0, 2.0, "#9ecae1"), ("fp32 tile", 3.2, 4.0, "#fdae6b"),
             ("one fp32\nvalue a row", 8.6, 0.5, "#a1d99b"), ("fp32 tile", 10.5, 4.0, "#fdae6b"),
             ("out slot (fp16)", 15.7, 2.0, "#9ecae1")]
    for label, x0, w, colour in boxes:
        for r in range(rows):
            ax.add_patch(Rectangle((x0, r * h), w, h * 0.9, facecolor=colour, edgecolor="0.3"))
        ax.text(x0 + w / 2, rows * h + 0.15, label, ha="center", va="bottom", fontsize=9)
    for x0 in (3.2, 10.5):
        ax.text(x0 + 2.0, -0.15, "fp32 passes", ha="center", va="top", fontsize=8)
    steps = [(2.0, 3.2, "Cast"), (7.2, 8.6, "reduce\neach row"), (9.1, 10.5, "broadcast\n(Brcb)"),
             (14.5, 15.7, "Cast")]
    for x0, x1, label in steps:
        ax.add_patch(FancyArrowPatch((x0 + 0.05, rows * h / 2), (x1 - 0.05, rows * h / 2), arrowstyle="-|>",
                                     mutation_scale=12, color="0.2"))
        ax.text((x0 + x1) / 2, -0.15, label, ha="center", va="top", fontsize=8)
    ax.text(-0.2, rows * h / 2, f"{rows} whole\nrows", ha="right", va="center", fontsize=9)
    ax.set_xlim(-1.4, 18)
    ax.set_ylim(-0.9, rows * h + 0.7)
    ax.axis("off")
    return ax


def layer_norm_run(shape=(32 * 128, 768), chip: str = "910"):
    """fp16 LayerNorm at BERT-base's rows in timing mode with the package's tiling: its trace."""
    x, g = np.zeros(shape, np.float16), np.zeros(shape[1], np.float16)
    return launch_layer_norm(x, g, g, layer_norm_tiling(*shape, np.float16, chip), 1e-5, chip, "timing")[1]


def pass_cycles(trace, core: int = 0) -> dict:
    """Busy cycles (repeats; the start-ups are latency) of ``core``'s vector pipe by instruction (its name up to the first space:
    ``cast``, ``mul``, ...), largest first, beside MTE2's and MTE3's busy cycles: what a row
    kernel spends on its fp32 passes against what its copies take."""
    sel = (trace.core == core) & (trace.kind == int(Kind.WORK))
    vec = {}
    for i in np.flatnonzero(sel & (trace.pipe == int(Pipe.V))):
        op = trace.name[i].split(" ")[0]
        if op not in _QUEUE_MARKS and trace.busy_end[i] > trace.start[i]:
            vec[op] = vec.get(op, 0) + int(trace.busy_end[i] - trace.start[i])   # its repeats
    busy = trace.busy_cycles(core)
    return {"vector": dict(sorted(vec.items(), key=lambda kv: -kv[1])),
            "MTE2": int(busy[Pipe.MTE2]), "MTE3": int(busy[Pipe.MTE3])}


def plot_passes(trace, core: int = 0, ax=None):
    """Two bars: the vector pipe's busy cycles stacked by instruction, and MTE2's (copies in)."""
    import matplotlib.pyplot as plt
    p = pass_cycles(trace, core)
    ax = ax or plt.subplots(figsize=(7, 2.6))[1]
    left = 0
    for k, (op, cyc) in enumerate(p["vector"].items()):
        ax.barh(1, cyc, left=left, color=plt.cm.tab20(k % 20), edgecolor="white", label=op)
        left += cyc
    ax.barh(0, p["MTE2"], color="0.55")
    ax.set_yticks([0, 1], ["MTE2 (copies in)", "vector unit"])
    ax.set_xlabel(f"busy cycles on core {core}")
    ax.legend(ncol=4, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.35), frameon=False)
    ax.figure.tight_layout()
    return ax


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


class SoftmaxStages(KernelSoftmaxAR):
    """Softmax over rows, every step in fp32 (ops-nn's order): CopyIn, widen, ``compute_rows``,
    round, CopyOut. A subclass writes ``compute_rows(x32, out32, n)``; ``self.stats`` holds two
    fp32 vectors of one value a row."""


def run_softmax(cls, x, chip: str = "teach", mode: str = "functional"):
    """Launch ``cls`` (a SoftmaxStages subclass) over the rows of x, fp16 widened to fp32 first
    (``narrow=False``). Returns (y, trace)."""
    t = softmax_ar_tiling(x.shape[0], x.shape[1], x.dtype, chip, narrow=False, exp16=False)

    def kernel(x_gm, y_gm, tt):
        cls(x_gm, y_gm, tt).process()

    return launch_rows(kernel, x, [], t, chip, mode)


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


# -- which pipe bounds a norm ---------------------------------------------------------------------
#: exercise 4's kernels on the 910: (op, dtype) -> shape (BERT-base's LayerNorm rows, Llama's
#: RMSNorm rows, an attention score's softmax rows)
BOUND_CASES = {("LayerNorm", "float32"): (32 * 128, 768), ("RMSNorm", "float32"): (1024, 4096),
               ("Softmax", "float16"): (4096, 1024), ("Softmax", "float32"): (4096, 1024)}
BOUND_CHIP = "910"


def _run_case(op: str, dtype: str, shape, chip: str):
    x = np.zeros(shape, dtype)
    g = np.zeros(shape[1], dtype)
    if op == "LayerNorm":
        return launch_layer_norm(x, g, g, layer_norm_tiling(*shape, dtype, chip), 1e-5, chip, "timing")[1]
    if op == "RMSNorm":
        return run_rms_norm(KernelRmsNorm, x, g, chip=chip, mode="timing")[1]
    # Softmax: every step in fp32, as ops-nn's SoftmaxV2 runs it
    return launch_softmax(x, softmax_ar_tiling(*shape, dtype, chip, narrow=False, exp16=False), chip, "timing")[1]


def bound_pipes(chip: str = BOUND_CHIP) -> dict:
    """For each of BOUND_CASES, timing mode on ``chip``, core 0: the vector pipe's and MTE2's busy
    cycles and which of the two is busier (``"V"`` or ``"MTE2"``: the pipe that bounds it)."""
    out = {}
    for (op, dt), shape in BOUND_CASES.items():
        busy = _run_case(op, dt, shape, chip).busy_cycles(0)
        v, m = int(busy[Pipe.V]), int(busy[Pipe.MTE2])
        out[f"{op} {'fp16' if dt == 'float16' else 'fp32'}"] = {"V": v, "MTE2": m, "bound": "V" if v > m else "MTE2"}
    return out


# -- the challenge: rows too long for the UB ---------------------------------------------------------
#: fp16 rows of 16,384 values on the 910 (a row with its slots and fp32 copies overflows the UB)
CHUNKED_SHAPE, CHUNKED_CHIP = (256, 16384), "910"


class ChunkedStages(KernelRmsNormChunked):
    """The chunked RMSNorm kernel without its ``process``: ``load(r, c0, w)`` (CopyIn and widen
    one chunk into ``self.x32``, returned), ``store(r, c0, w, y32)`` (round and CopyOut),
    ``chunks()`` (each chunk's first column and width), ``self.acc`` / ``self.part`` (one fp32
    value each), ``self.gamma`` (fp32, the whole row), ``self.eps``, ``self.nrows``. ``CHUNK``:
    values of a row a UB tile."""
    CHUNK = 512

    def process(self) -> None:
        raise NotImplementedError("write process(self): the two passes over each row")


def chunked_inputs(shape=CHUNKED_SHAPE, seed: int = SEED):
    """x (fp16, rows of 16,384 values, one all zeros) and gamma: :func:`rms_inputs` at this shape."""
    return rms_inputs(shape, seed)


def run_chunked(cls, x, gamma, eps: float = RMS_EPS, chip: str = CHUNKED_CHIP, mode: str = "functional"):
    """Launch ``cls`` with chunks of ``cls.CHUNK`` values: a ChunkedStages subclass or the
    package's KernelRmsNormChunked; a RmsNormStages subclass (whole rows a tile) runs with the
    package's RMSNorm tiling instead. Returns (y, trace)."""
    if issubclass(cls, KernelRmsNorm):
        return run_rms_norm(cls, x, gamma, eps, chip, mode)
    t = chunk_tiling(x.shape[0], x.shape[1], x.dtype, chip, cls.CHUNK)
    return launch_rms_norm_chunked(cls, x, gamma, t, eps, chip, mode)


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


def gelu_formula_error(lo: float = -12.0, hi: float = 12.0, n: int = 48001) -> float:
    """The worst error of the erf kernel's formula itself, in float64, against the exact GELU on
    [lo, hi], in units of the fp32 tolerance (1e-5 + 1e-5 |y|): x Phi(x) = relu(x) - |x| (1 -
    Phi(|x|)), the tail written 1 - Phi(a) = exp(E(a)) with E the degree-5 polynomial
    GELU_ERF_E fitted to log(1 - Phi(a)) on 0 <= a <= 5."""
    x = np.linspace(lo, hi, n)
    a = np.abs(x)
    y = np.maximum(x, 0) - a * np.exp(np.polynomial.polynomial.polyval(a, GELU_ERF_E))
    exact = golden.gelu(x)
    return float((np.abs(y - exact) / (1e-5 + 1e-5 * np.abs(exact))).max())


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


__all__ = ["chip_rates", "draw_row_tile", "layer_norm_run", "pass_cycles", "plot_passes", "softmax_naive", "softmax_logits", "SoftmaxStages", "run_softmax", "RmsNormStages",
           "rms_inputs", "run_rms_norm", "BOUND_CASES", "BOUND_CHIP", "bound_pipes", "CHUNKED_SHAPE",
           "CHUNKED_CHIP", "ChunkedStages", "chunked_inputs", "run_chunked", "gelu_grid", "gelu_errors",
           "gelu_cycles", "gelu_formula_error", "layer_norm_pipelining", "fp16_exp_limit"]
