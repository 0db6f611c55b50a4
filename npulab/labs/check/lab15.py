"""Checkers of lab 15 (capstone): a prediction of what fusion alone buys ResNet-50, read off the
naive build's trace; the two optimisations to keep when only two are allowed; and the
challenge, the naive build's slowest layer found and re-tiled to within 150% of the tiling
search's default."""
from __future__ import annotations

from dataclasses import replace

from ...errors import NpuError
from ...kernels.conv import ConvTiles
from .. import lab15 as ref
from . import ONE_BUFFER_HINT, as_number, close, exercise, failed, is_blank, not_attempted, passed, perf_verdict

#: a prediction within this fraction of the measured latency passes
PREDICT_TOLERANCE = 0.04
#: an answer this close to a typical slip's arithmetic (from the printed figures) is that slip
SLIP = 0.005
#: the best pair of optimisations for ResNet-50 at batch 1 (the tests build all ten pairs)
REFERENCE_PAIR = ("fusion", "tiling")


def _naive_us(model: str = "resnet50") -> dict:
    return ref.time_by_op(model, ref.NAIVE)


# -- exercise 1: predict fusion's gain --------------------------------------------------------------
@exercise("15", "fusion removes the launches it absorbs: each BatchNorm and the ReLU after it go into the "
                "conv's epilogue, each residual Add and its ReLU become one AddRelu kernel",
          key=('naive_us["BatchNorm"] + naive_us["Relu"]',))
def fusion_latency(answer):
    """The naive ResNet-50 build's latency (ms) with fusion on and nothing else, predicted."""
    if is_blank(answer):
        return not_attempted()
    x = as_number(answer)
    if x is None:
        return failed("the answer should be a latency in ms", expected="a number", got=repr(answer),
                      hint="a float: milliseconds.")
    naive = ref.figures("resnet50", ref.NAIVE)["latency_ms"] * 1000
    fused = ref.figures("resnet50", ref.alone("fusion"))["latency_ms"]
    if abs(x - fused) <= PREDICT_TOLERANCE * fused:
        return passed(f"you predicted {x:.3f} ms; the build measures {fused:.3f} ms "
                      f"({(x - fused) / fused:+.1%}): what is left over is the work the fused kernels took "
                      f"on, the BatchNorm's scale and offset and the ReLUs applied to each tile in UB.")
    us = _naive_us()
    relu = ref.relu_time_by_producer()
    bn, relu_all, add = us.get("BatchNorm", 0.0), us.get("Relu", 0.0), us.get("Add", 0.0)
    relu_bn = relu.get("BatchNorm", (0, 0.0))[1]
    if close(x * 1000, naive - bn - relu_bn, SLIP):
        hint = ("the ReLUs after the residual Adds go too: TbeEltwiseFusionPass makes each Add + ReLU one "
                "AddRelu kernel that rectifies the sum in UB, so one launch and one pass over GM remain of two.")
    elif close(x * 1000, naive - bn, SLIP):
        hint = "the ReLU after each BatchNorm goes into the conv's epilogue too, not only the BatchNorm."
    elif close(x * 1000, naive - bn - relu_all - add, SLIP):
        hint = "the residual Adds stay: each becomes an AddRelu kernel, which still reads both inputs from GM."
    elif close(x, naive / 1000 / fused, PREDICT_TOLERANCE) or close(x * (naive - bn - relu_all), naive, SLIP):
        hint = "that is a speed-up; the answer is the latency in ms."
    elif x >= naive / 1000:
        hint = "fusion removes launches: the fused build is faster than the naive one."
    elif x < (naive - bn - relu_all - add) / 1000:
        hint = "the convs stay, and take as long as before plus their epilogue: only BN and ReLU time goes."
    else:
        hint = "start from the naive latency and take away the time of the launches fusion absorbs."
    return failed("the prediction is off", expected=f"within {PREDICT_TOLERANCE:.0%} of the measured latency",
                  got=f"{x:.3f} ms, {(x - fused) / fused:+.1%} from the measurement",
                  hint=hint, lines=[f"(the BatchNorm launches took {bn:,.0f} us, the ReLUs {relu_all:,.0f} us: "
                                    f"{relu.get('BatchNorm', (0, 0))[0]} of them after a BatchNorm)"])


# -- exercise 2: two optimisations ------------------------------------------------------------------
def _pair(names) -> float:
    return ref.figures("resnet50", replace(ref.NAIVE, **{k: True for k in names}))["latency_ms"]


@exercise("15", "the ablation and the traces: what each optimisation removes, and which gains compound "
                "(static memory changes memory only; C04 touches the stem conv alone)",
          key=('{"fusion", "tiling"}',))
def two_optimisations(answer):
    """The ALLOWED optimisations (names of OPTIMISATIONS) that make ResNet-50 at batch 1 fastest."""
    if is_blank(answer):
        return not_attempted()
    names = answer if isinstance(answer, (set, frozenset, tuple, list)) else None
    if names is None or not all(isinstance(n, str) for n in names):
        return failed("the answer should be a set of optimisation names", expected="e.g. {'fusion', 'static_memory'}",
                      got=repr(answer), hint=f"names from {', '.join(ref.OPTIMISATIONS)}.")
    names = {n.strip().lower() for n in names}
    unknown = sorted(names - set(ref.OPTIMISATIONS))
    if unknown or len(names) != ref.ALLOWED:
        return failed(f"exactly {ref.ALLOWED} optimisations, by name",
                      expected=f"{ref.ALLOWED} of {', '.join(ref.OPTIMISATIONS)}",
                      got=repr(answer), hint=f"unknown: {', '.join(unknown)}." if unknown else
                      f"the toolchain allows {ref.ALLOWED}: pick {ref.ALLOWED}.")
    yours, best = _pair(sorted(names)), _pair(REFERENCE_PAIR)
    if yours <= best * (1 + 1e-9):
        return passed(f"{' + '.join(sorted(names))}: {yours:.3f} ms, the fastest of the ten pairs "
                      f"(all five: {ref.figures('resnet50', ref.OPTIMISED)['latency_ms']:.3f} ms).")
    if "static_memory" in names:
        hint = "static memory plans where the intermediates live; on the simulator it buys no time at all."
    elif "small_channel" in names:
        hint = "C04 changes one conv, the stem: the other 52 convs and their BN and ReLU launches stay as they were."
    else:
        hint = ("double buffering only overlaps the seed tile's copies; the searched tilings pick tiles that "
                "spread a late layer's few rows over every core and are double-buffered themselves.")
    return failed("there is a faster pair", expected=f"<= {best:.3f} ms", got=f"{yours:.3f} ms", hint=hint)


# -- the challenge: the slowest layer, re-tiled ------------------------------------------------------
def _slowest() -> str:
    return ref.run("resnet50", ref.NAIVE)[1].slowest(1)[0].name


@exercise("15", "the slowest layer at batch 1: a late 3 x 3 conv whose output has few rows, so the seed's "
                "128 x 128 tiles give only a few cores work; smaller N tiles on every core, longer K "
                "steps and double buffering fix it", performance=True,
          key=("tile_m=64, tile_n=16, c1_step=4",))
def slowest_layer_fix(answer):
    """(name of the naive build's slowest task, ConvTiles for it)."""
    if is_blank(answer) or (isinstance(answer, tuple) and any(a is Ellipsis for a in answer)):
        return not_attempted()
    if not (isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[0], str)
            and isinstance(answer[1], ConvTiles)):
        return failed("the answer should be (layer name, ConvTiles(...))", expected="a pair",
                      got=repr(answer), hint="e.g. ('layer1.0.conv1', ConvTiles(tile_m=64, ...)).")
    name, tiles = answer
    slowest = _slowest()
    if name != slowest:
        trace = ref.run("resnet50", ref.NAIVE)[1]
        mine = next((r for r in trace.records if r.name == name), None)
        got = f"{name!r}" + (f" ({mine.dur_us:.1f} us)" if mine else " (no such task)")
        return failed("that is not the slowest layer of the naive build", expected="the task with the longest dur_us",
                      got=got, hint="trace.slowest(1) of the naive build's trace: ref.run(model, NAIVE)[1].")
    try:
        cycles = ref.run_layer(name, tiles).cycles
    except NpuError as err:
        return failed("the tiling cannot run on this layer", got=f"{type(err).__name__}: {err}",
                      hint="every tile must fit its buffer, TILE_M and TILE_N multiples of 16, "
                           "block_dim at most the cores and the block tiles.")
    reference = ref.run_layer(name, "default").cycles
    naive = ref.run_layer(name).cycles
    cores = ref.get_chip(ref.CHIP).ai_cores
    if tiles.block_dim < cores // 2:
        hint = (f"block_dim={tiles.block_dim} of {cores} cores: at batch 1 this layer's output has few "
                f"rows; narrower N tiles make more block tiles, one for every core.")
    elif min(tiles.l1_buffers, tiles.l0_buffers, tiles.l0c_buffers) < 2:
        hint = ONE_BUFFER_HINT
    else:
        hint = "K is 9 x 512 long: a longer C1_STEP and TILE_K0 pay fewer copy and mmad start-ups."
    v = perf_verdict(cycles, reference, f"{name}, the slowest layer ({naive:,} cycles naive), re-tiled", hint)
    v.lines.append(f"the tiling search's default for it: {reference:,} cycles")
    return v


__all__ = ["PREDICT_TOLERANCE", "REFERENCE_PAIR", "fusion_latency", "slowest_layer_fix", "two_optimisations"]
