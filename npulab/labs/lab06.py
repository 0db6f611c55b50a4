"""Lab 06 (convolution on the cube): the exercises' cases, the conv tiling exercise's problem and
the batch-1 measurement. The ground truth of exercise 1 is the img2col matrix read back from the
simulator (:func:`npulab.kernels.examples.img2col.img2col_on_npu`), the lab's pictures are
:func:`npulab.plot.plot_img2col` and :func:`npulab.plot.plot_nc1hwc0`, and its convolutions are
checked against the goldens of :mod:`npulab.ops.golden`.

* :func:`img2col_shape`: (M, K) of an fp16 img2col matrix; :func:`inputs`: seeded arrays;
* :func:`tiling_problem`, :func:`tiling_from_tuple`, :func:`simulate_tiles`: exercise 3's layer
  on the 910 and a tiling tuple simulated in timing mode;
* :func:`batch_table`, :func:`print_batch_table`: a few ResNet-50 layers at batch 1 and 32.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..arch import DEFAULT_CHIP, ceil_div
from ..bench.conv import RESNET50_CONVS, roofline_cycles
from ..chips import get_chip
from ..kernels.conv import block_work, buffer_demand, default_tiling, make_problem, simulate, tiled
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


# -- img2col ----------------------------------------------------------------------------------------
def img2col_shape(x_shape, k: int, stride: int, pad: int) -> tuple[int, int]:
    """(M, K) of the fp16 img2col matrix: batch x output pixels, C1 x k x k x C0."""
    n, c, h, w = x_shape
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    return n * oh * ow, ceil_div(c, C0) * k * k * C0


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
                         "macs_per_byte": macs / (roofline_cycles(t, c) * c.gm_sustained_bytes_per_cycle)})
    return rows


def core_timeline(name: str, batch: int, chip: str = DEFAULT_CHIP, core: int = 0) -> dict:
    """Layer ``name`` at ``batch``, default tiling, timing mode, on ``core``: when its first
    mmad starts and its last ends, when the core finishes, its block tiles, and the busy cycles
    of MTE2 (GM -> L1), MTE1 (img2col and weight loads into L0), the cube and the output's path:
    FixPipe, or on a chip without one the vector unit (L0C -> UB, the epilogue) and MTE3."""
    c = get_chip(chip)
    t = default_tiling(layer_problem(name, batch), c)
    tr = simulate(t, c)
    on = (tr.core == core) & (tr.kind == int(Kind.WORK)) & (tr.end > tr.start)
    mm = np.flatnonzero(on & (tr.pipe == int(HwPipe.M)))
    busy = tr.busy_cycles(core)
    out = (HwPipe.FIX,) if c.cube.output_path == "fixpipe" else (HwPipe.V, HwPipe.MTE3)
    return {"layer": name, "batch": batch, "tiles": len(block_work(t, core)),
            "first_mmad": int(tr.start[mm].min()), "last_mmad_end": int(tr.end[mm].max()),
            "end": int(tr.core_cycles[core]), "cycles": int(tr.cycles),
            "busy": {p.name: int(busy[p]) for p in (HwPipe.MTE2, HwPipe.MTE1, HwPipe.M) + out}}


def print_batch_table(rows) -> None:
    print(f"{'layer':16} {'batch':>5} {'M':>7} {'N':>5} {'K':>5} {'tiles':>6} {'cores':>5} "
          f"{'cycles':>9} {'util':>6} {'HBM allows':>10} {'MACs/B':>7}")
    for r in rows:
        print(f"{r['layer']:16} {r['batch']:>5} {r['m']:>7,} {r['n']:>5} {r['k']:>5} {r['tiles']:>6} "
              f"{r['busy_cores']:>5} {r['cycles']:>9,} {r['utilization']:>6.1%} {r['roofline']:>10.1%} "
              f"{r['macs_per_byte']:>7.0f}")
