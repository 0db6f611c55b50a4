"""Lab 06 (convolution on the cube): img2col read back from the simulator, NC1HWC0 pictures,
numpy references for the convolutions, the conv tiling exercise's problem and the batch-1
measurement.

* :func:`img2col_on_npu`: run ``load_3d`` on the simulator over a map whose every element holds
  its own NCHW index, and read the img2col matrix back out of L0A (the ground truth of
  exercise 1);
* :func:`img2col_source_reference`: the same index arithmetic written as a function;
* :func:`plot_img2col`, :func:`plot_nc1hwc0`: the two pictures of the lab;
* :func:`conv_numpy`, :func:`conv_transpose2d_numpy`: plain numpy references (float64);
* :func:`tiling_problem`, :func:`tiling_from_tuple`, :func:`simulate_tiles`: exercise 3's layer
  on the 910 and a tiling tuple simulated in timing mode;
* :func:`batch_table`, :func:`print_batch_table`: a few ResNet-50 layers at batch 1 and 32.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .. import formats as F
from ..arch import DEFAULT_CHIP, ceil_div, round_up
from ..bench.conv import RESNET50_CONVS, roofline_cycles
from ..chips import get_chip
from ..errors import ArgumentError
from ..kernels.conv import (block_work, buffer_demand, default_tiling, make_problem, map_copies, pack_input,
                            simulate, tile_boxes, tiled)
from ..lang import A1, A2, Queue, TPipe, launch
from ..lang.conv_load import Fmatrix, data_copy_strided, load_3d
from ..sim.cost import lower_bound_cycles
from ..sim.isa import Kind
from ..sim.isa import Pipe as HwPipe

SEED = 0
C0 = 16                          # fp16: 32 bytes of channels
#: exercise 1: (x_shape NCHW, kernel, stride, pad); fp16 maps
IMG2COL_CASES = (((2, 3, 5, 5), 3, 1, 1), ((1, 20, 7, 6), 3, 2, 1), ((1, 4, 6, 6), 2, 2, 0))
#: exercise 2: (shape, dtype)
NC1HWC0_CASES = (((2, 3, 4, 5), np.float16), ((1, 40, 3, 2), np.float16), ((1, 20, 2, 3), np.float32),
                 ((2, 40, 2, 2), np.int8))
#: exercise 3: a ResNet-50 layer (torchvision name) at a batch, on the 910
TILING_LAYER, TILING_BATCH, TILING_CHIP = "layer2.1.conv2", 8, "910"
#: the measure: layers of ResNet-50 at batch 1 and 32
MEASURE_LAYERS = ("layer1.0.conv2", "layer2.1.conv2", "layer3.1.conv2", "layer4.1.conv2", "layer4.2.conv3")
MEASURE_BATCHES = (1, 32)
SAMPLE_LOOPS = 16                # tilings with more block tiles a core are simulated for this many


# -- img2col, read back from L0A -------------------------------------------------------------------
def _problem_2d(x_shape, k, stride, pad, dtype=np.float16, cout=16, c04=False):
    """The conv problem; plain NC1HWC0 unless ``c04`` (the default tiling would pick the C04
    format for a map of at most 4 channels: see :func:`img2col_c04_on_npu`)."""
    n, c, h, w = x_shape
    return make_problem((n, c, 1, h, w), (cout, c, 1, k, k), dtype, (1, stride, stride),
                        ((0, 0), (pad, pad), (pad, pad)), c04=c04)


def img2col_on_npu(x_shape, k: int, stride: int, pad: int) -> np.ndarray:
    """The (M, K) img2col matrix of an fp16 NCHW map of ``x_shape``, as ``load_3d`` writes it
    into L0A: each entry is the NCHW flat index of the input element it holds, -1 for padding
    (outside the map, or the zero channels that pad C to C1 x C0). Simulated on one core of the
    910 (the map moves GM -> L1 in NC1HWC0, load_3d expands it into L0A, the host reads L0A)."""
    t = _problem_2d(x_shape, k, stride, pad)
    n, c, h, w = x_shape
    x = (np.arange(n * c * h * w) + 1).reshape(n, c, 1, h, w).astype(np.float16)   # exact up to 2048
    if n * c * h * w > 2048:
        raise ArgumentError("img2col_on_npu: at most 2048 map elements (fp16 holds the indices exactly)")
    m, kk = t.m, t.k
    boxes, c1_elems = tile_boxes(t.geom, t.batch, m, t.c0, 0)
    seen = []

    def kernel(x_gm):
        pipe = TPipe()
        a1q, a2q = Queue(A1, "map_l1"), Queue(A2, "img2col_l0a")
        pipe.init_buffer(a1q, 1, t.c1 * c1_elems * 2)
        pipe.init_buffer(a2q, 1, round_up(m, 16) * kk * 2)
        a1 = a1q.alloc_tensor(np.float16)
        for dst, src, count, length, ss, ds in map_copies(t, boxes, t.c1, c1_elems):
            data_copy_strided(a1[dst:], x_gm[src:], count, length, ss, ds)     # NC1HWC0 slab -> L1
        a1q.enque(a1)
        a1 = a1q.deque()
        a2 = a2q.alloc_tensor(np.float16)
        load_3d(a2, a1, Fmatrix(t.geom, t.c0, t.c1, c1_elems, 0, boxes), m, kk)  # img2col -> L0A (ZZ)
        seen.append(a2.numpy()[:round_up(m, 16) * kk].copy())                # the host peeks at L0A
        a2q.free_tensor(a2)
        a1q.free_tensor(a1)

    launch(kernel, 1, pack_input(x, t).reshape(-1), chip=DEFAULT_CHIP)
    zz = seen[0].reshape(ceil_div(m, 16), kk // t.c0, 16, t.c0)
    return F.zz_to_nd(zz, m, kk).astype(np.int64) - 1


def img2col_source_reference(r: int, c: int, x_shape, k: int, stride: int, pad: int):
    """(n, channel, h, w) of the input element at row r, column c of the fp16 img2col matrix,
    or None where the matrix holds padding."""
    n_img, ch_in, h_in, w_in = x_shape
    oh, ow = (h_in + 2 * pad - k) // stride + 1, (w_in + 2 * pad - k) // stride + 1
    n, rem = divmod(r, oh * ow)
    o_h, o_w = divmod(rem, ow)
    c1, rem = divmod(c, k * k * C0)
    tap, c0 = divmod(rem, C0)
    i, j = divmod(tap, k)
    ch, h, w = c1 * C0 + c0, o_h * stride - pad + i, o_w * stride - pad + j
    if ch >= ch_in or not (0 <= h < h_in and 0 <= w < w_in):
        return None
    return (n, ch, h, w)


def img2col_shape(x_shape, k: int, stride: int, pad: int) -> tuple[int, int]:
    """(M, K) of the fp16 img2col matrix: batch x output pixels, C1 x k x k x C0."""
    n, c, h, w = x_shape
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    return n * oh * ow, ceil_div(c, C0) * k * k * C0


def plot_img2col(x_shape=(1, 3, 4, 4), k: int = 3, stride: int = 1, pad: int = 1, ax=None):
    """The img2col matrix from the simulator, each entry coloured by the input channel it
    holds (white: padding), labelled with its (h, w) for the first channels."""
    import matplotlib.pyplot as plt
    a = img2col_on_npu(x_shape, k, stride, pad)
    n, c, h, w = x_shape
    m, kk = a.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 3.6), layout="constrained")
    ch = np.where(a >= 0, (a // (h * w)) % c, -1).astype(float)
    ax.imshow(np.ma.masked_less(ch, 0), cmap="Set2", vmin=0, vmax=7, aspect="auto", interpolation="nearest")
    for r in range(m):
        for col in range(kk):
            if a[r, col] >= 0 and col % C0 < c:
                hh, ww = divmod(a[r, col] % (h * w), w)
                ax.text(col, r, f"{hh}{ww}", ha="center", va="center", fontsize=4.5)
    for x0 in range(C0, kk, C0):
        ax.axvline(x0 - 0.5, color="black", lw=0.6)
    ax.set_xlabel(f"column: (c1, kh, kw, c0), C0 = {C0} channels innermost ({kk} = C1 x {k}x{k} x C0)")
    ax.set_ylabel("row: output pixel (n, oh, ow)")
    ax.set_title(f"img2col of a {n}x{c}x{h}x{w} fp16 map, {k}x{k} kernel, stride {stride}, pad {pad}, "
                 f"read back from L0A (colour: input channel, text: h w, white: padding)", fontsize=9)
    return ax


def plot_nc1hwc0(c: int = 20, h: int = 2, w: int = 3, dtype=np.float32, ax=None):
    """Storage offset of every (channel, pixel) of a 1 x c x h x w map in NC1HWC0."""
    import matplotlib.pyplot as plt
    c0 = F.c0_of(dtype)
    c1 = ceil_div(c, c0)
    idx = np.arange(c1 * c0 * h * w).reshape(1, c1 * c0, h, w)
    z = F.nchw_to_nc1hwc0(idx[:, :c1 * c0].astype(np.int64), c0=c0).reshape(-1)   # element at each offset
    off = np.empty_like(z)
    off[z] = np.arange(z.size)
    off = off.reshape(c1 * c0, h * w)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2), layout="constrained")
    ax.imshow((np.arange(c1 * c0)[:, None] // c0) + 0 * off, cmap="Pastel1", aspect="auto",
              interpolation="nearest")
    for ch in range(c1 * c0):
        for p in range(h * w):
            ax.text(p, ch, str(off[ch, p]), ha="center", va="center", fontsize=6,
                    color="black" if ch < c else "grey")
    ax.axhline(c - 0.5, color="red", lw=1)
    ax.set_xticks(range(h * w), [f"{p // w},{p % w}" for p in range(h * w)])
    ax.set_xlabel("pixel (h, w)")
    ax.set_ylabel("channel")
    ax.set_title(f"1x{c}x{h}x{w} {np.dtype(dtype).name} in NC1HWC0: C0 = {c0}, C1 = {c1} "
                 f"(numbers: storage offset; below the red line: zero padding)", fontsize=9)
    return ax


# -- numpy references ------------------------------------------------------------------------------
def conv_numpy(x, w, stride=1, pad=0) -> np.ndarray:
    """N-d convolution (cross-correlation, as torch) in float64: x (N, C, *spatial), w
    (Cout, C, *kernel); one stride and pad for every spatial axis."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    nd = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pad, pad)] * nd)
    ks = w.shape[2:]
    out = [(s + 2 * pad - k) // stride + 1 for s, k in zip(x.shape[2:], ks)]
    y = np.zeros((x.shape[0], w.shape[0], *out))
    for tap in np.ndindex(*ks):
        win = xp[(slice(None), slice(None)) + tuple(slice(t, t + stride * (o - 1) + 1, stride)
                                                    for t, o in zip(tap, out))]
        y += np.einsum("nc...,oc->no...", win, w[(slice(None), slice(None)) + tap])
    return y


def conv_transpose2d_numpy(x, w, stride=1, pad=0) -> np.ndarray:
    """Transposed 2-D convolution in float64 by scattering: x (N, Cin, H, W), w (Cin, Cout, kh, kw)."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    n, _, h, wd = x.shape
    _, cout, kh, kw = w.shape
    full = np.zeros((n, cout, (h - 1) * stride + kh, (wd - 1) * stride + kw))
    for i in range(kh):
        for j in range(kw):
            full[:, :, i:i + stride * (h - 1) + 1:stride, j:j + stride * (wd - 1) + 1:stride] += \
                np.einsum("nchw,co->nohw", x, w[:, :, i, j])
    return full[:, :, pad:full.shape[2] - pad, pad:full.shape[3] - pad]


def inputs(shape, seed: int = SEED, dtype=np.float16) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# -- exercise 3: a conv tiling -----------------------------------------------------------------------
def _layer(name: str):
    return next(ly for ly in RESNET50_CONVS if ly[0] == name)


def layer_problem(name: str, batch: int, dtype=np.float16):
    """The ConvProblem (no tiles chosen) of a ResNet-50 layer at ``batch``."""
    _, cin, cout, k, s, p, h = _layer(name)
    return make_problem((batch, cin, 1, h, h), (cout, cin, 1, k, k), dtype, (1, s, s),
                        ((0, 0), (p, p), (p, p)))


def tiling_problem():
    return layer_problem(TILING_LAYER, TILING_BATCH)


def tiling_from_tuple(tiles, chip=TILING_CHIP):
    """(TILE_M, TILE_N, C1_STEP, TILE_K0, l1, l0, l0c buffers) -> the ConvTiling of exercise 3's
    layer, on every core the block tiles can use."""
    tm, tn, cs, k0, l1, l0, l0c = (int(v) for v in tiles)
    t = tiled(tiling_problem(), tile_m=tm, tile_n=tn, c1_step=cs, tile_k0=k0, l1_buffers=l1,
              l0_buffers=l0, l0c_buffers=l0c, name="yours")
    cores = get_chip(chip).ai_cores
    return t.with_tiles(block_dim=max(1, min(cores, t.core_loops)))


def simulate_tiles(t, chip=TILING_CHIP) -> tuple[int, bool]:
    """(cycles, extrapolated): timing-mode cycles of tiling ``t``; a tiling with more than
    SAMPLE_LOOPS block tiles a core runs its first SAMPLE_LOOPS and is scaled up: every block
    tile repeats the same instructions, so this is close, not exact (their overlap with the
    copies changes as a run goes on; lab 05 measures the difference for a matmul)."""
    per_core = ceil_div(t.core_loops, t.tiles.block_dim)
    if per_core <= SAMPLE_LOOPS:
        return int(simulate(t, chip).cycles), False
    part = simulate(t, chip, sample_loops=SAMPLE_LOOPS).cycles
    return int(round(part * per_core / SAMPLE_LOOPS)), True


def reference_tiling(chip=TILING_CHIP):
    """The default tiling function's pick for exercise 3's layer, with the weights streamed
    through L1 as a tiling tuple streams them (the default may keep a group's weights resident
    in L1 instead, which the tuple cannot ask for)."""
    return replace(default_tiling(tiling_problem(), chip).with_tiles(w_resident=False), name="default, streamed")


def buffer_table(t, chip=TILING_CHIP) -> str:
    """What each buffer must hold for tiling ``t`` against what the chip has."""
    c = get_chip(chip)
    lines = [f"{'buffer':6}  {'needs':>9}  {'holds':>9}  what"]
    for buf, (need, how) in buffer_demand(t).items():
        cap = c.buffer_bytes(buf)
        lines.append(f"{buf:6}  {need:>9,}  {cap:>9,}  {how}{'  <- OVERFLOW' if need > cap else ''}")
    return "\n".join(lines)


# -- the measure: batch 1 against batch 32 ---------------------------------------------------------
def batch_table(layers=MEASURE_LAYERS, batches=MEASURE_BATCHES, chip: str = DEFAULT_CHIP) -> list[dict]:
    """Each layer at each batch, default tiling, timing mode: the conv as a matmul (M, N, K),
    the most block tiles a core computes (``tiles``) and the cores that compute any
    (``busy_cores``), cycles, utilization of the cube and the best the HBM allows."""
    c = get_chip(chip)
    rows = []
    for name in layers:
        _, cin, cout, k, s, p, h = _layer(name)
        for b in batches:
            t = default_tiling(layer_problem(name, b), c)
            cycles = simulate(t, c).cycles
            macs = t.problem.macs
            lb = lower_bound_cycles(c, macs, np.float16)
            roof = max(lb, roofline_cycles(t, c))
            per_core = [len(block_work(t, blk)) for blk in range(t.tiles.block_dim)]
            rows.append({"layer": name, "batch": b, "m": t.problem.m, "n": cout, "k": t.problem.k,
                         "tiles": max(per_core), "busy_cores": sum(1 for n in per_core if n),
                         "cycles": int(cycles), "utilization": lb / cycles, "roofline": lb / roof,
                         "macs_per_byte": macs / (roofline_cycles(t, c) * c.memory.gm_bytes_per_cycle)})
    return rows


def core_timeline(name: str, batch: int, chip: str = DEFAULT_CHIP, core: int = 0) -> dict:
    """Layer ``name`` at ``batch``, default tiling, timing mode, on ``core``: when its first
    mmad starts and its last ends, when the core finishes, its block tiles, and the busy cycles
    of MTE2 (GM -> L1), MTE1 (img2col and weight loads into L0), the cube and FixPipe."""
    c = get_chip(chip)
    t = default_tiling(layer_problem(name, batch), c)
    tr = simulate(t, c)
    on = (tr.core == core) & (tr.kind == int(Kind.WORK)) & (tr.end > tr.start)
    mm = np.flatnonzero(on & (tr.pipe == int(HwPipe.M)))
    busy = tr.busy_cycles(core)
    return {"layer": name, "batch": batch, "tiles": len(block_work(t, core)),
            "first_mmad": int(tr.start[mm].min()), "last_mmad_end": int(tr.end[mm].max()),
            "end": int(tr.core_cycles[core]), "cycles": int(tr.cycles),
            "busy": {p.name: int(busy[p]) for p in (HwPipe.MTE2, HwPipe.MTE1, HwPipe.M, HwPipe.FIX)}}


def print_batch_table(rows) -> None:
    print(f"{'layer':16} {'batch':>5} {'M':>7} {'N':>5} {'K':>5} {'tiles':>6} {'cores':>5} "
          f"{'cycles':>9} {'util':>6} {'HBM allows':>10} {'MACs/B':>7}")
    for r in rows:
        print(f"{r['layer']:16} {r['batch']:>5} {r['m']:>7,} {r['n']:>5} {r['k']:>5} {r['tiles']:>6} "
              f"{r['busy_cores']:>5} {r['cycles']:>9,} {r['utilization']:>6.1%} {r['roofline']:>10.1%} "
              f"{r['macs_per_byte']:>7.0f}")
