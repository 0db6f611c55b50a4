"""Lab 06 (convolution on the cube): the exercises' cases, their layers and the batch-1
measurement. The ground truth of exercise 1 is the img2col matrix read back from the simulator
(:func:`npulab.kernels.examples.img2col.img2col_on_npu`), the lab's pictures are
:func:`npulab.plot.plot_img2col` and :func:`npulab.plot.plot_nc1hwc0`, and its convolutions are
checked against the goldens of :mod:`npulab.ops.golden`.

* :func:`print_sizes`, :func:`print_chip`: C0 per dtype, a chip's buffers, cube and GM rate, an
  img2col matrix against its map;
* :func:`img2col_shape`: (M, K) of an fp16 img2col matrix; :func:`inputs`: seeded arrays;
* :func:`stem_problem`: ResNet-50's first conv in NC1HWC0 or C04 (exercise 3);
* :func:`tiling_problem`, :func:`tiling_from_tuple`, :func:`try_tiles`, :func:`simulate_tiles`:
  exercise 4's layer on the teaching chip and a tiling tuple simulated in timing mode;
* :func:`hbm_terms`: a layer's bytes and cube cycles as a function of the batch (exercise 5);
* :func:`batch_table`, :func:`print_batch_table`, :func:`core_timeline`: a few ResNet-50
  layers at batch 1 and 8;
* :func:`challenge_problem`, :func:`busy_cores`: the challenge's layer, and how many cores a
  tiling gives work.
"""
from __future__ import annotations

import math

import numpy as np

from .. import formats as F
from ..arch import DEFAULT_CHIP, ceil_div
from ..bench.conv import RESNET50_CONVS, roofline_cycles
from ..chips import get_chip
from ..kernels.conv import block_work, buffer_demand, default_tiling, make_problem, problems, simulate, tiled
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
#: exercise 4: a 3 x 3 conv, padding 1, batch 1, on the teaching chip: x (N, C, H, W), w (Cout, C, kh, kw)
TILING_X, TILING_W, TILING_CHIP = (1, 64, 32, 32), (64, 64, 3, 3), "teach"
#: exercise 5: the chip whose ridge the layers are held to
HBM_CHIP = "910"
#: the measure: layers of ResNet-50 at batch 1 and 8
MEASURE_LAYERS = ("layer1.0.conv2", "layer2.1.conv2", "layer3.1.conv2", "layer4.1.conv2", "layer4.2.conv3")
MEASURE_BATCHES = (1, 8)
#: the challenge: a ResNet-50 layer at batch 1 on the 910
CHALLENGE_LAYER, CHALLENGE_BATCH, CHALLENGE_CHIP = "layer3.1.conv2", 1, "910"
SAMPLE_LOOPS = 16                # tilings with more block tiles a core are simulated for this many


def print_sizes(chip: str = "910") -> None:
    """What the idea section's numbers are: C0 for each dtype the cube takes, ``chip``'s buffers
    and cube, and the img2col matrix of a 3 x 3 conv over a 256 x 14 x 14 map against the map."""
    print(f"C0 = 32 bytes of channels: {F.c0_of(np.float16)} fp16, {F.c0_of(np.float32)} fp32, "
          f"{F.c0_of(np.int8)} int8")
    print_chip(chip)
    m, k = img2col_shape((1, 256, 14, 14), 3, 1, 1)
    print(f"a 3x3 conv over a 256 x 14 x 14 fp16 map: img2col is {m} x {k} = {m * k * 2:,} B; "
          f"the map itself is {256 * 14 * 14 * 2:,} B")


# -- img2col ----------------------------------------------------------------------------------------
def print_chip(chip: str) -> None:
    """``chip``'s buffers per core, its cube and cores, and the rate its GM sustains."""
    c = get_chip(chip)
    print(f"{c.name}: L1 {c.buffers.l1:,} B, L0A {c.buffers.l0a:,} B, L0B {c.buffers.l0b:,} B, "
          f"L0C {c.buffers.l0c:,} B per core; cube {c.cube.macs_per_cycle_fp16:,} fp16 MACs a cycle x "
          f"{c.ai_cores} cores; GM sustains {c.gm_sustained_bytes_per_cycle:,.1f} B a cycle")


def img2col_shape(x_shape, k: int, stride: int, pad: int) -> tuple[int, int]:
    """(M, K) of the fp16 img2col matrix: batch x output pixels, C1 x k x k x C0."""
    n, c, h, w = x_shape
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    return n * oh * ow, ceil_div(c, C0) * k * k * C0


def inputs(shape, seed: int = SEED, dtype=np.float16) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# -- exercise 3: C04 ------------------------------------------------------------------------------
def stem_problem(c04: bool):
    """ResNet-50's first conv (3 -> 64 channels, 7 x 7, stride 2, padding 3, 224 x 224) at batch
    1, fp16, in NC1HWC0 (``c04=False``) or C04."""
    return make_problem((1, 3, 1, 224, 224), (64, 3, 1, 7, 7), np.float16, (1, 2, 2),
                        ((0, 0), (3, 3), (3, 3)), c04=c04)


# -- exercise 4: a conv tiling -----------------------------------------------------------------------
def _layer(name: str):
    return next(ly for ly in RESNET50_CONVS if ly[0] == name)


def layer_problem(name: str, batch: int, dtype=np.float16):
    """The ConvProblem (no tiles chosen) of a ResNet-50 layer at ``batch``."""
    _, cin, cout, k, s, p, h = _layer(name)
    return make_problem((batch, cin, 1, h, h), (cout, cin, 1, k, k), dtype, (1, s, s),
                        ((0, 0), (p, p), (p, p)))


def tiling_problem():
    """Exercise 4's conv: TILING_X * TILING_W, stride 1, padding 1, fp16."""
    n, c, h, w = TILING_X
    cout, cin, kh, kw = TILING_W
    return make_problem((n, c, 1, h, w), (cout, cin, 1, kh, kw), np.float16, (1, 1, 1),
                        ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2)))


def tiling_from_tuple(tiles, problem=None, chip=TILING_CHIP):
    """(TILE_M, TILE_N, C1_STEP, TILE_K0, l1, l0, l0c buffers) -> the ConvTiling of ``problem``
    (default: exercise 4's), block tiles dealt round-robin over every core they can use."""
    tm, tn, cs, k0, l1, l0, l0c = (int(v) for v in tiles)
    t = tiled(problem or tiling_problem(), tile_m=tm, tile_n=tn, c1_step=cs, tile_k0=k0, l1_buffers=l1,
              l0_buffers=l0, l0c_buffers=l0c, name="yours")
    return t.with_tiles(block_dim=max(1, min(get_chip(chip).ai_cores, t.core_loops)))


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


def gm_read_bytes(t, chip=TILING_CHIP) -> int:
    """Bytes tiling ``t`` copies in from GM (map slabs and weight windows, halos and repeats
    included), from a timing-mode run (sampled and scaled up as :func:`simulate_tiles` does)."""
    per_core = ceil_div(t.core_loops, t.tiles.block_dim)
    if per_core <= SAMPLE_LOOPS:
        return int(simulate(t, chip).bytes_by_route().get("GM->L1", 0))
    part = simulate(t, chip, sample_loops=SAMPLE_LOOPS).bytes_by_route().get("GM->L1", 0)
    return int(round(part * per_core / SAMPLE_LOOPS))


def buffer_table(t, chip=TILING_CHIP) -> str:
    """What each buffer must hold for tiling ``t`` against what the chip has."""
    c = get_chip(chip)
    lines = [f"{'buffer':6}  {'needs':>9}  {'holds':>9}  what"]
    for buf, (need, how) in buffer_demand(t, c).items():
        cap = c.buffer_bytes(buf)
        lines.append(f"{buf:6}  {need:>9,}  {cap:>9,}  {how}{'  <- OVERFLOW' if need > cap else ''}")
    return "\n".join(lines)


def try_tiles(t, chip=TILING_CHIP) -> None:
    """Print what a tiling (a ConvTiling, or exercise 4's tuple) needs of each buffer and, when it
    fits, its simulated cycles and the bytes it copies in from GM: the tool of exercise 4."""
    if not hasattr(t, "tiles"):
        t = tiling_from_tuple(t, chip=chip)
    print(f"{t.recipe()}\n{buffer_table(t, chip)}")
    if not problems(t, chip):
        print(f"{simulate_tiles(t, chip)[0]:,} cycles; {gm_read_bytes(t, chip):,} B copied in from GM")


# -- exercise 5: when HBM stops being the bound ------------------------------------------------------
def hbm_terms(name: str, chip=HBM_CHIP) -> dict:
    """Layer ``name``'s roofline in the batch b: the cube needs ``cube_per_image`` x b cycles
    (useful MACs over every core's cube), HBM ``hbm_fixed`` + ``hbm_per_image`` x b (the
    weights once, each image's map in and output out once, at the sustained rate)."""
    c = get_chip(chip)
    one, two = (tiled(layer_problem(name, b)) for b in (1, 2))
    cube = lower_bound_cycles(c, one.problem.macs, np.float16)
    h1, h2 = roofline_cycles(one, c), roofline_cycles(two, c)
    return {"cube_per_image": cube, "hbm_fixed": 2 * h1 - h2, "hbm_per_image": h2 - h1}


def hbm_bound_batch(name: str, chip=HBM_CHIP) -> int | None:
    """The smallest batch at which layer ``name``'s cube time reaches its HBM time (the HBM no
    longer bounds it), or None when no batch does (each image brings as many bytes per MAC as
    the ridge allows, or more)."""
    h = hbm_terms(name, chip)
    gain = h["cube_per_image"] - h["hbm_per_image"]
    if gain <= 0:
        return None
    return max(1, math.ceil(h["hbm_fixed"] / gain - 1e-9))


# -- the measure: batch 1 against batch 8 ---------------------------------------------------------
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


def challenge_problem():
    """The challenge's layer: CHALLENGE_LAYER at CHALLENGE_BATCH."""
    return layer_problem(CHALLENGE_LAYER, CHALLENGE_BATCH)


def busy_cores(t) -> int:
    """How many of tiling ``t``'s blocks compute at least one block tile."""
    return sum(1 for blk in range(t.tiles.block_dim) if block_work(t, blk))


def print_batch_table(rows) -> None:
    print(f"{'layer':16} {'batch':>5} {'M':>7} {'N':>5} {'K':>5} {'tiles':>6} {'cores':>5} "
          f"{'cycles':>9} {'util':>6} {'HBM allows':>10} {'MACs/B':>7}")
    for r in rows:
        print(f"{r['layer']:16} {r['batch']:>5} {r['m']:>7,} {r['n']:>5} {r['k']:>5} {r['tiles']:>6} "
              f"{r['busy_cores']:>5} {r['cycles']:>9,} {r['utilization']:>6.1%} {r['roofline']:>10.1%} "
              f"{r['macs_per_byte']:>7.0f}")
