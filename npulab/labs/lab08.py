"""Lab 08 (fusion): fused against separate kernels, measured on the simulator, and the matmul
whose epilogue the learner fuses.

* :func:`block_kernel`, :func:`plan_cycles`: the kernels of a fusion plan over a ResNet-50
  bottleneck (:data:`BLOCK_OPS`), each group of consecutive ops run as one kernel (timing mode);
  :func:`plot_gm_traffic` draws what runs like these move through GM over time;
* :func:`matmul_bias_relu`: MatMul with bias and ReLU in its epilogue (FixPipe, or the vector
  unit on the 910) against MatMul, a broadcast Add and a ReLU; :func:`pool_scale`: AvgPool x
  scale in one kernel against AvgPool then Mul;
* :func:`epilogue_kernel`, :func:`run_epilogue`: a matmul (the lab 05 template's block
  scheduler and block mmad) whose epilogue is a function the learner writes, with the bias of
  each n tile brought into L1 by the template (MTE2 -> FIX handshake through flags);
  :func:`fused_epilogue_reference` is one;
* :func:`fold_bn_reference`, :func:`run_folded_conv`: BatchNorm folded into a conv's weights
  and bias (what CANN's graph compiler does), run on the conv kernel.

The checks hold the exercises' outputs to the goldens of :mod:`npulab.ops.golden`
(``conv2d_bn_relu``, ``matmul`` with bias and ReLU) and the plan's cycles to the reference
plan's, simulated live.
"""
from __future__ import annotations

import functools
import inspect
import re
import textwrap

import numpy as np

from .. import lang
from ..arch import round_up
from ..bench.conv import RESNET50_CONVS, gm_bytes
from ..errors import ArgumentError, UnsupportedOpError
from ..kernels.activation import activation_tiling, launch_activation
from ..kernels.conv import default_tiling as conv_default_tiling
from ..kernels.conv import launch_conv, make_problem
from ..kernels.conv import simulate as simulate_conv
from ..kernels.matmul import BlockMmad, BlockScheduler, MatmulProblem, default_tiling, make_tiling
from ..kernels.matmul import simulate as simulate_matmul
from ..lang import (A1, PIPE_FIX, PIPE_MTE2, TBuf, TPipe, data_copy_pad, fixpipe, get_block_idx,
                    get_block_num, launch, set_flag, wait_flag)
from ..kernels.norm import batch_norm_tiling, launch_batch_norm
from ..ops.registry import dispatch

SEED = 0
CHIP = "910"
#: the bottleneck of "See it" and of the challenge: torchvision's layer1.1 (256 -> 64 -> 64 -> 256
#: channels over 56 x 56, its input added back before the last ReLU), at a batch small enough to
#: simulate in a moment
BLOCK, BLOCK_BATCH = "layer1.1", 2
BLOCK_OPS = ("conv1", "bn1", "relu1", "conv2", "bn2", "relu2", "conv3", "bn3", "add", "relu3")
#: the kernels npulab has for a group of consecutive ops, by the ops' kinds
BLOCK_KERNELS = {("conv",): "Conv2D", ("conv", "bn"): "Conv2D, BN in its epilogue",
                 ("conv", "bn", "relu"): "Conv2DBNRelu", ("bn",): "BatchNorm", ("relu",): "Relu",
                 ("add",): "Add", ("add", "relu"): "AddRelu"}
#: "See it": the block's 3 x 3 conv with its BatchNorm and ReLU, apart and fused
SEE_APART, SEE_FUSED = (("conv2",), ("bn2",), ("relu2",)), (("conv2", "bn2", "relu2"),)
BN_EPS = 1e-5
#: the GM-bytes exercise: another layer and batch
BYTES_LAYER, BYTES_BATCH = "layer2.0.conv2", 16
#: MatMul+BiasAdd(+ReLU): a Linear of a BERT-base FFN, 8 x 128 tokens x 768 -> 3072
LINEAR_SHAPE = (1024, 3072, 768)
#: Pool+Scale: a 2 x 2 average pool over ResNet-sized maps, at the bottleneck's batch
POOL_SHAPE, POOL_SCALE = (2, 256, 28, 28), 0.5
#: the epilogue exercise: fp16 matmuls on the 910B, whose FixPipe the exercise programs (the 910
#: has none: there the template's epilogue runs on the vector unit, npulab.kernels.epilogue), a
#: small one checked against numpy and a larger one (several block tiles a core) timed
EPI_CHIP = "910b"
EPI_SHAPE, EPI_PERF_SHAPE = (512, 1024, 128), (2048, 2048, 256)
#: block tiles of 128 x 128: two of them in fp32 fill the 910B's 128 KiB L0C, so FixPipe drains one
#: while the cube computes the next
EPI_RECIPE = (128, 128, 256, 64, 2, 2, 2)
BIAS_SLOTS = 2


def show(obj) -> None:
    print(textwrap.dedent(inspect.getsource(obj)))


def _row(short: str, what: str, fused, parts: dict) -> dict:
    sep_c = sum(p.cycles for p in parts.values())
    sep_b = sum(gm_bytes(p) for p in parts.values())
    return {"short": short, "what": what, "fused_cycles": int(fused.cycles), "fused_bytes": gm_bytes(fused),
            "separate_cycles": int(sep_c), "separate_bytes": sep_b,
            "parts": {k: (int(p.cycles), gm_bytes(p)) for k, p in parts.items()}}


# -- a fusion plan over the bottleneck ---------------------------------------------------------
def _conv_layer(i: int):
    """(name, Cin, Cout, k, stride, pad, H) of the block's conv ``i`` (1, 2 or 3)."""
    return next(ly for ly in RESNET50_CONVS if ly[0] == f"{BLOCK}.conv{i}")


def _output(i: int, batch: int) -> np.ndarray:
    """A zero fp16 tensor of conv ``i``'s output shape (timing mode reads only shapes)."""
    _, _, cout, k, s, p, h = _conv_layer(i)
    ho = (h + 2 * p - k) // s + 1
    return np.zeros((batch, cout, ho, ho), np.float16)


def group_kinds(group) -> tuple:
    """The op kinds of a group of op names: ("conv2", "bn2") -> ("conv", "bn")."""
    return tuple(re.sub(r"\d+$", "", op) for op in group)


def check_plan(plan) -> tuple:
    """``plan`` as a tuple of groups (tuples of op names), checked: the groups cover
    :data:`BLOCK_OPS` once each, in order, and each group is a kernel npulab has
    (:data:`BLOCK_KERNELS`). Raises ArgumentError or UnsupportedOpError saying what is wrong."""
    try:
        groups = tuple(tuple(g) for g in plan)
    except TypeError:
        raise ArgumentError(f"a plan is a list of tuples of op names, got {plan!r:.80}") from None
    flat = tuple(op for g in groups for op in g)
    if flat != BLOCK_OPS or not all(groups):
        raise ArgumentError(f"the plan's groups must list the block's ops once each, in order, "
                            f"{BLOCK_OPS}; they list {flat}")
    for g in groups:
        if group_kinds(g) not in BLOCK_KERNELS:
            raise UnsupportedOpError(f"no kernel runs {g} as one: the kernels take "
                                     f"{sorted(BLOCK_KERNELS)}")
    return groups


@functools.lru_cache(maxsize=64)
def block_kernel(group: tuple, batch: int = BLOCK_BATCH, chip=CHIP):
    """The Trace of one group of the bottleneck's consecutive ops run as one kernel (timing mode,
    fp16, default tilings): a conv with BN's per-channel scale and offset and/or ReLU in its
    epilogue, a BatchNorm, a ReLU, an Add (the residual) or an AddRelu."""
    kinds = group_kinds(group)
    if kinds not in BLOCK_KERNELS:
        raise UnsupportedOpError(f"no kernel runs {group} as one: the kernels take {sorted(BLOCK_KERNELS)}")
    digits = re.findall(r"\d+$", group[0])
    i = int(digits[0]) if digits else 3                    # the residual add: the block's output
    y = _output(i, batch)
    if kinds[0] == "conv":
        _, cin, cout, k, s, p, h = _conv_layer(i)
        ep = dict(scale="channel", has_offset=True, relu="relu" in kinds) if "bn" in kinds else {}
        prob = make_problem((batch, cin, 1, h, h), (cout, cin, 1, k, k), np.float16, (1, s, s),
                            ((0, 0), (p, p), (p, p)), **ep)
        return simulate_conv(conv_default_tiling(prob, chip), chip)
    if kinds == ("bn",):
        n, c, h, w = y.shape
        stats = [np.ones(c, np.float16) for _ in range(4)]
        return launch_batch_norm(y, *stats, batch_norm_tiling(n, c, h * w, np.float16, chip), BN_EPS,
                                 chip, "timing")[1]
    if kinds == ("relu",):
        return launch_activation(y, activation_tiling(y.size, np.float16, "relu", chip), chip, "timing")[1]
    return dispatch("AddRelu" if "relu" in kinds else "Add", y, y, chip=chip, mode="timing")[1]


def plan_cycles(plan, batch: int = BLOCK_BATCH, chip=CHIP) -> int:
    """Cycles of the bottleneck run as ``plan``: its kernels one after another, each with its
    launch (the graph's ops run in order on one stream)."""
    return sum(int(block_kernel(g, batch, chip).cycles) for g in check_plan(plan))


# -- the picture: GM traffic over time --------------------------------------------------------
GM_BINS = 160


def _gm_series(kernels, bins: int, t_end: float):
    """Read and written GM bytes a cycle, averaged over ``bins`` equal bins of [0, t_end), of
    kernels run back to back (each one's instructions shifted by the kernels before it and by its
    own launch); a copy's bytes are spread evenly over the cycles it occupies its pipe."""
    edges = np.linspace(0.0, t_end, bins + 1)
    reads, writes, spans, t0 = np.zeros(bins), np.zeros(bins), [], 0
    for label, tr in kernels:
        start = t0 + tr.launch_cycles
        gm = np.array([bool(r) and "GM" in r for r in tr.route])
        rd = np.array([bool(r) and r.startswith("GM") for r in tr.route])
        for sel, acc in ((gm & rd, reads), (gm & ~rd, writes)):
            s0 = start + tr.start[sel].astype(np.float64)
            s1 = np.maximum(start + tr.busy_end[sel].astype(np.float64), s0 + 1)
            frac = np.clip((edges[:, None] - s0) / (s1 - s0), 0.0, 1.0)     # share moved by each edge
            acc += np.diff(frac @ tr.nbytes[sel].astype(np.float64))
        spans.append((label, t0, start, t0 + tr.cycles, gm_bytes(tr)))
        t0 += tr.cycles
    width = edges[1] - edges[0]
    return edges, reads / width, writes / width, spans


def plot_gm_traffic(runs: dict, bins: int = GM_BINS):
    """One row per run (name -> [(label, Trace), ...] of kernels run back to back): the GM bytes
    read and written, in GB/s, over time in us, against the HBM peak (dashed: reads that L2 serves
    may pass it); above, each
    kernel's label and GM megabytes; a grey stripe is a kernel's launch, before its cores start.
    Returns the Figure."""
    import matplotlib.pyplot as plt

    end = max(sum(tr.cycles for _, tr in ks) for ks in runs.values())
    series = {name: _gm_series(ks, bins, end) for name, ks in runs.items()}
    chip = next(iter(runs.values()))[0][1].chip
    top = max([chip.gm_bandwidth_gbs] + [float((rd + wr).max()) * chip.clock_ghz for _, rd, wr, _ in series.values()])
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.0 * len(runs)), sharex=True, sharey=True,
                             layout="constrained", squeeze=False)
    for ax, (name, kernels) in zip(axes[:, 0], runs.items()):
        us = 1.0 / (chip.clock_ghz * 1000.0)
        edges, rd, wr, spans = series[name]
        x, w = edges[:-1] * us, (edges[1] - edges[0]) * us
        ax.bar(x, rd * chip.clock_ghz, width=w, align="edge", color="tab:blue", label="read from GM")
        ax.bar(x, wr * chip.clock_ghz, width=w, align="edge", bottom=rd * chip.clock_ghz,
               color="tab:orange", label="written to GM")
        ax.axhline(chip.gm_bandwidth_gbs, color="0.3", lw=0.8, ls="--", label="HBM peak")
        for label, t0, t1, t2, nb in spans:
            ax.axvspan(t0 * us, t1 * us, color="0.88", lw=0)
            ax.axvline(t0 * us, color="0.4", lw=0.6)
            ax.text((t1 + t2) / 2 * us, 1.03 * top, f"{label}: {nb / 1e6:.1f} MB", ha="center",
                    va="bottom", fontsize=7)
        ax.set_ylim(0, 1.2 * top)
        ax.set_ylabel(f"{name}\nGB/s")
    axes[0, 0].legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
    axes[-1, 0].set_xlabel("time (us); grey: a kernel's launch")
    return fig


def kernels_of(groups, batch: int = BLOCK_BATCH, chip=CHIP) -> list:
    """(label, Trace) of each group of ops run as one kernel, in order (any consecutive groups of
    the block, not only a whole plan): what :func:`plot_gm_traffic` draws."""
    return [(" + ".join(g), block_kernel(tuple(g), batch, chip)) for g in groups]


def see_it_runs(batch: int = BLOCK_BATCH, chip=CHIP) -> dict:
    """The block's 3 x 3 conv, its BatchNorm and its ReLU as three kernels and as one."""
    return {"apart": kernels_of(SEE_APART, batch, chip), "fused": kernels_of(SEE_FUSED, batch, chip)}


def conv_bn_relu_row(batch: int = BLOCK_BATCH, chip=CHIP) -> dict:
    """The "See it" runs as a row of :func:`print_rows`."""
    runs = see_it_runs(batch, chip)
    _, cin, cout, k, s, p, h = _conv_layer(2)
    return _row("Conv+BN+ReLU", f"Conv {cout}x{cin}x{k}x{k} over {batch}x{cin}x{h}x{h} + BN + ReLU", runs["fused"][0][1],
                dict(runs["apart"]))


# -- the measurements ---------------------------------------------------------------------------
def matmul_bias_relu(shape=LINEAR_SHAPE, chip=CHIP) -> dict:
    """y = relu(x W + b), fp16: one matmul kernel with bias and ReLU in FixPipe, against a matmul
    kernel, a broadcast Add kernel and a ReLU kernel (timing mode, default tilings)."""
    m, n, k = shape
    fused_t = default_tiling(MatmulProblem(1, m, n, k, "float16", has_bias=True, relu=True), chip)
    plain_t = default_tiling(MatmulProblem(1, m, n, k, "float16"), chip)
    fused = simulate_matmul(fused_t, chip)
    mm = simulate_matmul(plain_t, chip)
    y = np.zeros((m, n), np.float16)
    _, add = dispatch("AddBroadcast", y, np.zeros(n, np.float16), chip=chip, mode="timing")
    _, relu = dispatch("Relu", y, chip=chip, mode="timing")
    return _row("MatMul+bias+ReLU", f"MatMul {m}x{k} @ {k}x{n} + bias, ReLU", fused, {"matmul": mm, "add bias": add, "relu": relu})


def pool_scale(shape=POOL_SHAPE, scale: float = POOL_SCALE, chip=CHIP) -> dict:
    """avg_pool2d(x, 2) x scale, fp16: AvgPoolScale in one kernel against AvgPool then Mul."""
    x = np.zeros(shape, np.float16)
    _, fused = dispatch("AvgPoolScale", x, chip=chip, mode="timing", kernel_size=2, stride=2, scale=scale)
    _, pool = dispatch("AvgPool", x, chip=chip, mode="timing", kernel_size=2, stride=2)
    n, c, h, w = shape
    y = np.zeros((n, c, h // 2, w // 2), np.float16)
    _, mul = dispatch("Mul", y, np.full((1,), scale, np.float16), chip=chip, mode="timing")
    return _row("AvgPool x scale", f"AvgPool 2x2 {shape} x {scale}", fused, {"avg pool": pool, "mul": mul})


def print_rows(rows) -> None:
    print(f"{'':44} {'cycles':>10} {'GM bytes':>13}")
    for r in rows:
        print(f"{r['what']}")
        for part, (c, b) in r["parts"].items():
            print(f"  separate: {part:32} {c:>10,} {b:>13,}")
        print(f"  {'separate, total':42} {r['separate_cycles']:>10,} {r['separate_bytes']:>13,}")
        print(f"  {'fused':42} {r['fused_cycles']:>10,} {r['fused_bytes']:>13,}   "
              f"cycles x{r['fused_cycles'] / r['separate_cycles']:.2f}, bytes x{r['fused_bytes'] / r['separate_bytes']:.2f}")


def plot_ratios(rows):
    """Bars of each row's fused cycles and GM bytes, as % of the separate kernels'. Returns the Axes."""
    import matplotlib.pyplot as plt

    names = [r["short"] for r in rows]
    cyc = [100 * r["fused_cycles"] / r["separate_cycles"] for r in rows]
    byt = [100 * r["fused_bytes"] / r["separate_bytes"] for r in rows]
    _, ax = plt.subplots(figsize=(7, 2.8), layout="constrained")
    x = np.arange(len(rows))
    ax.bar(x - 0.2, cyc, width=0.4, label="cycles")
    ax.bar(x + 0.2, byt, width=0.4, label="GM bytes")
    ax.axhline(100, color="grey", lw=0.8)
    ax.set_xticks(x, names)
    ax.set_ylabel("fused, % of separate")
    ax.legend()
    return ax


# -- Conv+BN+ReLU bytes (the arithmetic exercise's truth, from the simulator) -------------------
def layer_output_bytes(name: str = BYTES_LAYER, batch: int = BYTES_BATCH) -> int:
    """Bytes of the layer's fp16 output tensor."""
    _, cin, cout, k, s, p, h = next(ly for ly in RESNET50_CONVS if ly[0] == name)
    ho = (h + 2 * p - k) // s + 1
    return batch * cout * ho * ho * 2


# -- BN folded into the conv's weights and bias ------------------------------------------------
def fold_bn_reference(w, b, mean, var, gamma, beta, eps):
    """BatchNorm (inference) after conv(x, w) + b, folded into the conv: BN(y) = y x scale +
    (beta - mean x scale) with scale = gamma / sqrt(var + eps) per output channel, so the conv
    with w x scale (each output channel's filter scaled) and bias (b - mean) x scale + beta
    computes the same. Returns (w_folded, b_folded), float64."""
    scale = gamma / np.sqrt(var + eps)
    return w * scale[:, None, None, None], (b - mean) * scale + beta


def bn_inputs(cin: int = 16, cout: int = 32, seed: int = SEED):
    """(x, w, b, mean, var, gamma, beta) of a small conv followed by a BatchNorm: x fp16 (2, cin,
    8, 8), w (cout, cin, 3, 3) and the rest (cout,) float64; one channel has var = 0."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, cin, 8, 8)).astype(np.float16)
    w = rng.standard_normal((cout, cin, 3, 3)) * 0.2
    b = rng.standard_normal(cout) * 0.5
    mean = rng.standard_normal(cout)
    var = rng.uniform(0.5, 2.0, cout)
    var[3] = 0.0
    gamma, beta = rng.uniform(0.5, 1.5, cout), rng.standard_normal(cout)
    return x, w, b, mean, var, gamma, beta


def run_folded_conv(x, w, b, chip: str = "teach"):
    """The conv kernel (padding 1, stride 1) with weights ``w`` (cast to fp16, as a compiled
    graph stores them), bias ``b`` (fp32, added in the accumulator) and ReLU in its epilogue.
    Returns y (N, Cout, H, W) fp16."""
    w16 = np.asarray(w).astype(np.float16)
    cout = w16.shape[0]
    prob = make_problem((x.shape[0], x.shape[1], 1, *x.shape[2:]), (cout, w16.shape[1], 1, *w16.shape[2:]),
                        np.float16, (1, 1, 1), ((0, 0), (1, 1), (1, 1)), has_bias=True, relu=True)
    y, _ = launch_conv(x[:, :, None], w16[:, :, None], conv_default_tiling(prob, chip),
                       bias=np.asarray(b, np.float32), chip=chip)
    return y[:, :, 0]


# -- the epilogue exercise ------------------------------------------------------------------------
def fused_epilogue_reference(c_gm, c, bias, slot, m, n, dst_stride):
    """Wait for the bias copy, drain L0C with bias and ReLU in FixPipe, release the bias slot."""
    wait_flag(PIPE_MTE2, PIPE_FIX, slot)
    fixpipe(c_gm, c, m, n, dst_stride=dst_stride, bias=bias, relu=True)
    set_flag(PIPE_FIX, PIPE_MTE2, slot)


def epilogue_kernel(epilogue):
    """The matmul kernel around ``epilogue(c_gm, c, bias, slot, m, n, dst_stride)``: per block
    tile, the template runs the K loop into L0C (its copies of A and B go first on MTE2), then
    copies the tile's bias (n fp32 values) into L1 slot ``slot`` and sets the MTE2 -> FIX flag
    ``slot``; hands the L0C tile ``c`` to the epilogue; frees L0C. Before it reuses a slot it
    waits on the FIX -> MTE2 flag of that slot, which the epilogue must set once FixPipe has
    read the bias."""

    def kernel(a_gm, b_gm, c_gm, bias_gm, t):
        p, tn = t.problem, t.tiles.tile_n
        pipe = TPipe()
        sched = BlockScheduler(t)
        block_mmad = BlockMmad(pipe, t)
        slot_bytes = round_up(tn * 4, 32)
        bias_l1 = TBuf(A1, "bias_l1")
        pipe.init_buffer(bias_l1, slot_bytes * BIAS_SLOTS)
        used = [False] * BIAS_SLOTS
        count = 0
        for i in range(get_block_idx(), sched.core_loops(), get_block_num()):
            batch, m_idx, n_idx = sched.block_coord(i)
            m, n = sched.actual_shape(m_idx, n_idx)
            s = count % BIAS_SLOTS
            count += 1
            block_mmad(a_gm, b_gm, batch, m_idx, n_idx, m, n)  # the K loop into L0C
            if used[s]:
                wait_flag(PIPE_FIX, PIPE_MTE2, s)              # FixPipe is done with this slot
            bias = bias_l1.get(np.float32)[s * slot_bytes // 4:]
            data_copy_pad(bias, bias_gm[n_idx * tn:], n)       # MTE2: the tile's bias -> L1
            set_flag(PIPE_MTE2, PIPE_FIX, s)
            used[s] = True
            c = block_mmad.c.deque()
            off = m_idx * t.tiles.tile_m * p.n + n_idx * tn
            epilogue(c_gm[off:], c, bias, s, m, n, p.n)        # <- the exercise
            block_mmad.c.free_tensor(c)
        for s in range(BIAS_SLOTS):
            if used[s]:
                wait_flag(PIPE_FIX, PIPE_MTE2, s)

    return kernel


def epilogue_tiling(shape=EPI_SHAPE, chip=EPI_CHIP):
    m, n, k = shape
    return make_tiling(MatmulProblem(1, m, n, k, "float16", has_bias=True, relu=True), chip, EPI_RECIPE)


def epilogue_inputs(shape=EPI_SHAPE, seed: int = SEED):
    m, n, k = shape
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16)
    bias = rng.standard_normal(n).astype(np.float32)
    return a, b, bias


def run_epilogue(epilogue, shape=EPI_SHAPE, chip=EPI_CHIP, mode: str = "functional"):
    """Run the matmul with ``epilogue`` on fp16 A (m, k), B (k, n) and an fp32 bias. Returns
    (C fp16 (m, n) or None in timing mode, trace, (a, b, bias))."""
    t = epilogue_tiling(shape, chip)
    p = t.problem
    a, b, bias = epilogue_inputs(shape)
    if mode == "functional":
        args = [a.reshape(-1), b.reshape(-1), np.zeros(p.m * p.n, np.float16), bias]
    else:
        GT = lang.GlobalTensor
        args = [GT.empty(a.size, np.float16, "arg0"), GT.empty(b.size, np.float16, "arg1"),
                GT.empty(p.m * p.n, np.float16, "arg2"), GT.empty(p.n, np.float32, "arg3")]
    res = launch(epilogue_kernel(epilogue), t.tiles.block_dim, *args, t, chip=chip, mode=mode)
    c = res.outputs[2]
    return (c.reshape(p.m, p.n) if c is not None else None), res.trace, (a, b, bias)
