"""``npulab bench kernels --family conv``: the 53 convolutions of ResNet-50 on the cube, and Conv+BN+ReLU fused vs apart.

Rows have the format of :mod:`npulab.bench.matmul` (``op``, ``shape``, ``dtype``, ``chip``,
``tiling``, ``cycles``, ``lower_bound_cycles`` = MACs / (cores x MACs per cycle),
``utilization`` = lower_bound_cycles / cycles), plus ``layer`` (torchvision's module name),
``roofline_utilization``: the best utilization the chip's HBM allows this layer (its MACs
against the cycles needed to read the input pixels the conv uses and the weights once and write
the output once at the GM bandwidth: a 1 x 1 conv over a 56 x 56 map cannot pass about 0.24),
and ``estimated``
(false: every row is simulated in full, timing mode). Summary rows give the mean utilization
over the 53 layers at each batch, the MAC-weighted one, and the mean roofline bound.

The table of layers is data (:data:`RESNET50_CONVS`), torchvision's ``resnet50`` (v1.5: the
stride sits in the 3 x 3 conv of a bottleneck): the 7 x 7 / 2 stem, 16 bottlenecks of three
convs (1 x 1 reduce, 3 x 3, 1 x 1 expand) and the 1 x 1 downsample of each stage's first block.
"""
from __future__ import annotations

import time

import numpy as np

from ..arch import DEFAULT_CHIP
from ..chips import get_chip
from ..kernels.activation import activation_tiling, launch_activation
from ..kernels.conv import default_tiling, make_problem, simulate
from ..kernels.norm import batch_norm_tiling, launch_batch_norm
from ..sim.cost import lower_bound_cycles


def _resnet50_convs() -> tuple:
    """(name, in_channels, out_channels, kernel, stride, padding, input size) for all 53 convs."""
    out = [("conv1", 3, 64, 7, 2, 3, 224)]
    size, cin = 56, 64                       # after the stem (112) and the 3 x 3 / 2 max-pool
    for stage, (planes, blocks, stride) in enumerate(((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)), 1):
        for b in range(blocks):
            s = stride if b == 0 else 1
            pre = f"layer{stage}.{b}"
            out.append((f"{pre}.conv1", cin, planes, 1, 1, 0, size))
            out.append((f"{pre}.conv2", planes, planes, 3, s, 1, size))
            out.append((f"{pre}.conv3", planes, planes * 4, 1, 1, 0, size // s))
            if b == 0:
                out.append((f"{pre}.downsample.0", cin, planes * 4, 1, s, 0, size))
            cin, size = planes * 4, size // s
    return tuple(out)


#: torchvision resnet50's convolutions: (name, Cin, Cout, kernel, stride, padding, input H = W)
RESNET50_CONVS = _resnet50_convs()
BATCHES = (1, 32)
TARGET_UTILIZATION = 0.70        # issue 5: mean cube utilization at batch 32 on the 910
FUSED_LAYER = "layer1.0.conv2"   # a 3 x 3 conv followed by BN and ReLU in the network


def _problem(layer, batch: int, dtype=np.float16, **epilogue):
    name, cin, cout, k, s, p, h = layer
    return make_problem((batch, cin, 1, h, h), (cout, cin, 1, k, k), dtype, (1, s, s),
                        ((0, 0), (p, p), (p, p)), **epilogue)


def touched(n: int, out: int, k: int, stride: int, dilation: int, pad: int) -> int:
    """How many of an axis' ``n`` input positions some output reads (a 1 x 1 kernel with
    stride 2 reads every other one)."""
    return len({o * stride + j * dilation - pad for o in range(out) for j in range(k)} & set(range(n)))


def roofline_cycles(t, chip) -> float:
    """Cycles to move the input pixels the convolution reads and the weights in once, and the
    output out once, at the rate the chip's DRAM sustains (``gm_sustained_bytes_per_cycle``: no
    tiling moves GM bytes faster)."""
    chip = get_chip(chip)
    prob = t.problem
    g = prob.geom
    item = prob.np_dtype.itemsize
    cin = prob.cin_e * prob.groups
    pixels = 1
    for n, out, k, s, d, p in zip((g.d, g.h, g.w), (g.od, g.oh, g.ow), (g.kd, g.kh, g.kw),
                                  g.stride, g.dilation, g.pad):
        pixels *= touched(n, out, k, s, d, p)
    nbytes = (prob.batch * cin * pixels * item + prob.cout * prob.cin_e * g.taps * item
              + prob.m * prob.cout * np.dtype(prob.out_dtype).itemsize)
    return nbytes / chip.gm_sustained_bytes_per_cycle


def conv_row(layer, batch: int, chip=DEFAULT_CHIP, dtype=np.float16) -> dict:
    """Tile (default tiling: for a layer this size it simulates its best-estimated candidates
    and keeps the fastest, remembered per chip and problem), simulate (timing mode) and report
    one layer. ``sim_seconds`` includes that search the first time a shape is seen."""
    chip = get_chip(chip)
    name, cin, cout, k, s, p, h = layer
    t0 = time.perf_counter()
    t = default_tiling(_problem(layer, batch, dtype), chip)
    tr = simulate(t, chip)
    secs = time.perf_counter() - t0
    lb = lower_bound_cycles(chip, t.problem.macs, dtype)
    roof = max(lb, roofline_cycles(t, chip))
    return {"op": "conv2d", "layer": name, "shape": [batch, cin, h, h], "weight": [cout, cin, k, k],
            "stride": s, "padding": p, "dtype": np.dtype(dtype).name, "chip": chip.name,
            "tiling": t.name, "recipe": t.recipe(), "cycles": int(tr.cycles),
            "lower_bound_cycles": int(round(lb)), "utilization": lb / tr.cycles,
            "roofline_utilization": lb / roof, "gm_bytes": gm_bytes(tr), "estimated": False,
            "instructions": len(tr), "sim_seconds": secs}


def gm_bytes(trace) -> int:
    """Bytes read from and written to GM (copies GM -> L1/UB, FixPipe and MTE3 to GM)."""
    return int(sum(v for route, v in trace.bytes_by_route().items() if "GM" in route))


def resnet50_rows(batch: int, chip=DEFAULT_CHIP, dtype=np.float16) -> list[dict]:
    rows = [conv_row(layer, batch, chip, dtype) for layer in RESNET50_CONVS]
    lb = sum(r["lower_bound_cycles"] for r in rows)
    cyc = sum(r["cycles"] for r in rows)
    mean = float(np.mean([r["utilization"] for r in rows]))
    summary = {"op": "conv2d_resnet50_summary", "shape": [batch], "dtype": np.dtype(dtype).name,
               "chip": get_chip(chip).name, "tiling": "default", "layers": len(rows),
               "cycles": cyc, "lower_bound_cycles": lb, "utilization": lb / cyc,
               "mean_utilization": mean,
               "mean_roofline_utilization": float(np.mean([r["roofline_utilization"] for r in rows])),
               "estimated": False}
    if batch == 32:
        summary.update(target_mean_utilization=TARGET_UTILIZATION, meets_target=mean >= TARGET_UTILIZATION)
    return rows + [summary]


def fused_vs_separate(batch: int = 32, chip=DEFAULT_CHIP, layer_name: str = FUSED_LAYER) -> dict:
    """Conv+BN+ReLU as one kernel (BN and ReLU in FixPipe) against the three kernels apart
    (conv writes its output to GM, BatchNorm reads and writes it, ReLU reads and writes it
    again), timing mode, fp16: GM bytes and cycles of each and their ratios."""
    chip = get_chip(chip)
    layer = next(ly for ly in RESNET50_CONVS if ly[0] == layer_name)
    _, cin, cout, k, s, p, h = layer
    fused_t = default_tiling(_problem(layer, batch, scale="channel", has_offset=True, relu=True), chip)
    fused = simulate(fused_t, chip)
    conv_t = default_tiling(_problem(layer, batch), chip)
    conv = simulate(conv_t, chip)
    ho = (h + 2 * p - k) // s + 1
    y = np.zeros((batch, cout, ho, ho), np.float16)           # shapes only: timing mode
    stats = [np.ones(cout, np.float16) for _ in range(4)]          # BatchNorm takes its input dtype
    # the tilings ops.batch_norm and ops.relu pick for these shapes (a kernel module does not
    # import the ops layer above it)
    _, bn = launch_batch_norm(y, *stats, batch_norm_tiling(batch, cout, ho * ho, np.float16, chip), 1e-5,
                              chip, "timing")
    _, relu = launch_activation(y, activation_tiling(y.size, np.float16, "relu", chip), chip, "timing")
    sep_cycles = conv.cycles + bn.cycles + relu.cycles
    sep_bytes = gm_bytes(conv) + gm_bytes(bn) + gm_bytes(relu)
    fused_bytes = gm_bytes(fused)
    return {"op": "conv2d_bn_relu_fused_vs_separate", "layer": layer_name,
            "shape": [batch, cin, h, h], "weight": [cout, cin, k, k], "dtype": "float16",
            "chip": chip.name, "tiling": fused_t.name, "recipe": fused_t.recipe(),
            "cycles": int(fused.cycles), "separate_cycles": int(sep_cycles),
            "separate_parts_cycles": {"conv": int(conv.cycles), "batch_norm": int(bn.cycles),
                                      "relu": int(relu.cycles)},
            "gm_bytes": fused_bytes, "separate_gm_bytes": sep_bytes,
            "cycles_ratio": fused.cycles / sep_cycles, "gm_bytes_ratio": fused_bytes / sep_bytes,
            "fused_fewer_bytes": fused_bytes < sep_bytes, "fused_fewer_cycles": fused.cycles < sep_cycles,
            "estimated": False}


def bench_conv(chip=DEFAULT_CHIP, batches=BATCHES) -> list[dict]:
    """Every row: the 53 layers and a summary per batch, then fused vs separate Conv+BN+ReLU."""
    rows = []
    for b in batches:
        rows += resnet50_rows(b, chip)
    rows.append(fused_vs_separate(32, chip))
    return rows


__all__ = ["RESNET50_CONVS", "BATCHES", "TARGET_UTILIZATION", "bench_conv", "resnet50_rows", "gm_bytes",
           "conv_row", "fused_vs_separate", "roofline_cycles"]
