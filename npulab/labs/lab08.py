"""Lab 08 (fusion): fused against separate kernels, measured on the simulator, and the matmul
whose epilogue the learner fuses.

* :func:`conv_bn_relu`: Conv+BN+ReLU as one kernel against conv, BatchNorm and ReLU apart
  (:func:`npulab.bench.conv.fused_vs_separate`), as rows of a table;
* :func:`matmul_bias_relu`: MatMul with bias and ReLU in its epilogue (FixPipe, or the vector
  unit on the 910) against MatMul, a broadcast Add and a ReLU; :func:`pool_scale`: AvgPool x scale in one kernel against AvgPool then Mul;
* :func:`epilogue_kernel`, :func:`run_epilogue`: a matmul (the lab 05 template's block
  scheduler and block mmad) whose epilogue is a function the learner writes, with the bias of
  each n tile brought into L1 by the template (MTE2 -> FIX handshake through flags);
  :func:`fused_epilogue_reference` is one;
* :func:`bn_fold_reference`, :func:`run_conv_bn_relu`: BatchNorm folded into the per-channel
  scale and offset the epilogue applies, run on the conv kernel.

The checks hold both exercises' outputs to the goldens of :mod:`npulab.ops.golden`
(``conv2d_bn_relu``, ``matmul`` with bias and ReLU).
"""
from __future__ import annotations

import inspect
import textwrap

import numpy as np

from .. import lang
from ..arch import round_up
from ..bench.conv import RESNET50_CONVS, fused_vs_separate, gm_bytes
from ..kernels.conv import default_tiling as conv_default_tiling
from ..kernels.conv import launch_conv, make_problem
from ..kernels.matmul import BlockMmad, BlockScheduler, MatmulProblem, default_tiling, make_tiling
from ..kernels.matmul import simulate as simulate_matmul
from ..lang import (A1, PIPE_FIX, PIPE_MTE2, TBuf, TPipe, data_copy_pad, fixpipe, get_block_idx,
                    get_block_num, launch, set_flag, wait_flag)
from ..ops.registry import dispatch

SEED = 0
CHIP = "910"
#: Conv+BN+ReLU: the bench's layer (a 3 x 3 conv of ResNet-50's first stage) at this batch
FUSED_BATCH = 8
#: the GM-bytes exercise: another layer and batch
BYTES_LAYER, BYTES_BATCH = "layer2.0.conv2", 16
#: MatMul+BiasAdd(+ReLU): a Linear of a BERT-base FFN, 32 x 128 tokens x 768 -> 3072
LINEAR_SHAPE = (4096, 3072, 768)
#: Pool+Scale: a 2 x 2 average pool over ResNet-sized maps
POOL_SHAPE, POOL_SCALE = (8, 256, 28, 28), 0.5
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


def _row(what, fused, parts: dict) -> dict:
    sep_c = sum(p.cycles for p in parts.values())
    sep_b = sum(gm_bytes(p) for p in parts.values())
    return {"what": what, "fused_cycles": int(fused.cycles), "fused_bytes": gm_bytes(fused),
            "separate_cycles": int(sep_c), "separate_bytes": sep_b,
            "parts": {k: (int(p.cycles), gm_bytes(p)) for k, p in parts.items()}}


# -- the measurements ---------------------------------------------------------------------------
def conv_bn_relu(batch: int = FUSED_BATCH, chip=CHIP) -> dict:
    """The conv bench's fused-vs-separate row for its layer at ``batch`` (timing mode, fp16)."""
    return fused_vs_separate(batch, chip)


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
    return _row(f"MatMul {m}x{k} @ {k}x{n} + bias, ReLU", fused, {"matmul": mm, "add bias": add, "relu": relu})


def pool_scale(shape=POOL_SHAPE, scale: float = POOL_SCALE, chip=CHIP) -> dict:
    """avg_pool2d(x, 2) x scale, fp16: AvgPoolScale in one kernel against AvgPool then Mul."""
    x = np.zeros(shape, np.float16)
    _, fused = dispatch("AvgPoolScale", x, chip=chip, mode="timing", kernel_size=2, stride=2, scale=scale)
    _, pool = dispatch("AvgPool", x, chip=chip, mode="timing", kernel_size=2, stride=2)
    n, c, h, w = shape
    y = np.zeros((n, c, h // 2, w // 2), np.float16)
    _, mul = dispatch("Mul", y, np.full((1,), scale, np.float16), chip=chip, mode="timing")
    return _row(f"AvgPool 2x2 {shape} x {scale}", fused, {"avg pool": pool, "mul": mul})


def print_rows(rows) -> None:
    print(f"{'':44} {'cycles':>10} {'GM bytes':>13}")
    for r in rows:
        print(f"{r['what']}")
        for part, (c, b) in r["parts"].items():
            print(f"  separate: {part:32} {c:>10,} {b:>13,}")
        print(f"  {'separate, total':42} {r['separate_cycles']:>10,} {r['separate_bytes']:>13,}")
        print(f"  {'fused':42} {r['fused_cycles']:>10,} {r['fused_bytes']:>13,}   "
              f"cycles x{r['fused_cycles'] / r['separate_cycles']:.2f}, bytes x{r['fused_bytes'] / r['separate_bytes']:.2f}")


def print_conv_row(r: dict) -> None:
    print(f"Conv+BN+ReLU, {r['layer']}, input {r['shape']}, weight {r['weight']}, fp16, {r['chip']}")
    for part, c in r["separate_parts_cycles"].items():
        print(f"  separate: {part:12} {c:>10,} cycles")
    print(f"  separate, total        {r['separate_cycles']:>10,} cycles {r['separate_gm_bytes']:>13,} GM bytes")
    print(f"  fused                  {r['cycles']:>10,} cycles {r['gm_bytes']:>13,} GM bytes")
    print(f"  fused / separate: cycles x{r['cycles_ratio']:.2f}, GM bytes x{r['gm_bytes_ratio']:.2f}")


# -- Conv+BN+ReLU bytes (the arithmetic exercise's truth, from the simulator) -------------------
def layer_output_bytes(name: str = BYTES_LAYER, batch: int = BYTES_BATCH) -> int:
    """Bytes of the layer's fp16 output tensor."""
    _, cin, cout, k, s, p, h = next(ly for ly in RESNET50_CONVS if ly[0] == name)
    ho = (h + 2 * p - k) // s + 1
    return batch * cout * ho * ho * 2


def simulated_bytes_saved(name: str = BYTES_LAYER, batch: int = BYTES_BATCH, chip=CHIP) -> int:
    """Separate minus fused GM bytes of Conv+BN+ReLU on the layer, from the simulator."""
    r = fused_vs_separate(batch, chip, layer_name=name)
    return int(r["separate_gm_bytes"] - r["gm_bytes"])


# -- BN folded into FixPipe ---------------------------------------------------------------------
def bn_fold_reference(mean, var, gamma, beta, eps):
    """BatchNorm (inference) as y * scale + offset: scale = gamma / sqrt(var + eps),
    offset = beta - mean * scale."""
    scale = gamma / np.sqrt(var + eps)
    return scale, beta - mean * scale


def bn_inputs(cout: int = 32, seed: int = SEED):
    """(x, w, mean, var, gamma, beta) of a small fp16 conv; one channel has var = 0."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 16, 8, 8)).astype(np.float16)
    w = (rng.standard_normal((cout, 16, 3, 3)) * 0.2).astype(np.float16)
    mean = rng.standard_normal(cout)
    var = rng.uniform(0.5, 2.0, cout)
    var[3] = 0.0
    gamma, beta = rng.uniform(0.5, 1.5, cout), rng.standard_normal(cout)
    return x, w, mean, var, gamma, beta


def run_conv_bn_relu(x, w, scale, offset, chip: str = "teach"):
    """The conv kernel with the per-channel ``scale`` and ``offset`` applied in FixPipe and ReLU
    (padding 1, stride 1). Returns y (N, Cout, H, W) fp16."""
    cout = w.shape[0]
    t = make_problem((x.shape[0], x.shape[1], 1, *x.shape[2:]), (cout, w.shape[1], 1, *w.shape[2:]),
                     np.float16, (1, 1, 1), ((0, 0), (1, 1), (1, 1)), scale="channel", has_offset=True,
                     relu=True)
    t = conv_default_tiling(t, chip)
    y, _ = launch_conv(x[:, :, None], w[:, :, None], t, scale=np.asarray(scale, np.float32),
                       offset=np.asarray(offset, np.float32), chip=chip)
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
