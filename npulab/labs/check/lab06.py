"""Checkers of lab 06 (convolution on the cube): img2col index arithmetic (against what load_3d
wrote into L0A on the simulator), NC1HWC0 conversion, the K of the stem in NC1HWC0 and C04, a
conv tiling that beats the default tiling function's pick on the teaching chip, the batch at
which a layer stops being HBM-bound, and the challenge: a batch-1 layer spread over the 910's
cores within 150% of a reference tiling's cycles (each reference simulated once a process)."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ... import formats as F
from ...chips import get_chip
from ...kernels.conv import ConvTiles, problems, simulate, tiled
from ...kernels.examples.img2col import img2col_on_npu
from .. import lab06 as ref
from . import (ONE_BUFFER_HINT, exercise, failed, is_blank, not_attempted, passed, perf_verdict, screen_function,
               whole_numbers)

C0 = ref.C0
#: exercise 4's reference solution: tall block tiles, so the halo rows and the weights are read
#: from GM fewer times (the teaching chip's GM is slow)
TILING_REFERENCE = (128, 32, 1, 32, 2, 2, 2)
#: the challenge's reference solution: narrow N tiles so every core gets one, a whole channel
#: block's taps per mmad, the team schedule
CHALLENGE_REFERENCE = ConvTiles(tile_m=112, tile_n=16, c1_step=4, tile_k0=144, block_dim=32, schedule="teams")


# -- exercise 1: img2col ---------------------------------------------------------------------------
def _variants(r, c, x_shape, k, stride, pad):
    """(answer, hint) of the typical slips at (r, c)."""
    n_img, ch_in, h_in, w_in = x_shape
    oh, ow = (h_in + 2 * pad - k) // stride + 1, (w_in + 2 * pad - k) // stride + 1
    n, rem = divmod(r, oh * ow)
    o_h, o_w = divmod(rem, ow)
    c1, rem = divmod(c, k * k * C0)
    tap, c0 = divmod(rem, C0)
    i, j = divmod(tap, k)
    ch = c1 * C0 + c0

    def src(ch_, h_, w_, keep_pad=False):
        if keep_pad or (ch_ < ch_in and 0 <= h_ < h_in and 0 <= w_ < w_in):
            return (n, ch_, h_, w_)
        return None

    out = []
    # torch's unfold order: column = channel x k x k + i x k + j
    ch_t, tap_t = divmod(c, k * k)
    i_t, j_t = divmod(tap_t, k)
    out.append((src(ch_t, o_h * stride - pad + i_t, o_w * stride - pad + j_t),
                "that is torch's unfold order (channel outermost). On the cube the columns go "
                "(c1, kh, kw, c0): C0 channels innermost, so each fractal row is 32 contiguous "
                "bytes of the NC1HWC0 map."))
    out.append((src(ch, o_h * stride + i, o_w * stride + j),
                "the window of output pixel (oh, ow) starts at (oh x stride - pad, ow x stride - pad): "
                "subtract the padding."))
    out.append((src(ch, o_h - pad + i, o_w - pad + j),
                "output pixel (oh, ow) reads from oh x stride, ow x stride: multiply by the stride."))
    out.append((src(ch, o_h * stride - pad + i, o_w * stride - pad + j, keep_pad=True),
                "taps outside the map, and channels C..C1 x C0 - 1, hold the zero padding: return None there."))
    out.append((src(ch, o_h * stride - pad + j, o_w * stride - pad + i),
                "kh runs along h and kw along w: tap = i x k + j with i the row of the kernel."))
    return out


def _as_source(got):
    if got is None:
        return None
    try:
        t = tuple(int(v) for v in got)
    except (TypeError, ValueError):
        return "bad"
    return t if len(t) == 4 and not any(isinstance(v, bool) for v in got) else "bad"


@exercise("06", "img2col: row = output pixel (n, oh, ow), column = (c1, kh, kw, c0); the tap reads "
                "(oh x stride - pad + kh, ow x stride - pad + kw), zero outside the map",
          key=("divmod(c, k * k * 16)", "* stride - pad +"))
def img2col_source(fn):
    """``fn(r, c, x_shape, k, stride, pad)``: (n, channel, h, w) or None."""
    if (v := screen_function(fn, "img2col_source")) is not None:
        return v
    for case in ref.IMG2COL_CASES:
        truth = img2col_on_npu(*case)                      # what load_3d wrote into L0A
        shape = case[0]
        for r in range(truth.shape[0]):
            for c in range(truth.shape[1]):
                want = None if truth[r, c] < 0 else tuple(int(v) for v in np.unravel_index(truth[r, c], shape))
                got = _as_source(fn(r, c, *case))
                if got == "bad":
                    return failed("the answer should be a tuple (n, channel, h, w) or None",
                                  expected=repr(want), got=repr(fn(r, c, *case)),
                                  hint="return (n, ch, h, w) as whole numbers, or None for padding.")
                if got != want:
                    hint = next((h for v, h in _variants(r, c, *case) if v == got and v != want),
                                "n, oh, ow from the row; c1, tap, c0 from the column (C0 = 16 innermost); "
                                "h = oh x stride - pad + kh, w = ow x stride - pad + kw.")
                    return failed(f"wrong source for row {r}, column {c} (map {shape}, k={case[1]}, "
                                  f"stride={case[2]}, pad={case[3]})", expected=repr(want), got=repr(got),
                                  hint=hint)
    sizes = ", ".join(f"{ref.img2col_shape(*c)[0]}x{ref.img2col_shape(*c)[1]}" for c in ref.IMG2COL_CASES)
    return passed(f"every entry of the three img2col matrices ({sizes}) matches what load_3d wrote "
                  f"into L0A on the simulator.")


# -- exercise 2: NC1HWC0 -----------------------------------------------------------------------------
def _describe(a):
    return f"shape {a.shape}, dtype {a.dtype}"


@exercise("06", "NC1HWC0: channels in blocks of C0 = 32 bytes (16 fp16, 8 fp32, 32 int8), C0 "
                "innermost, C padded with zeros to C1 x C0",
          key=("32 // x.dtype.itemsize", "transpose(0, 1, 3, 4, 2)"))
def nc1hwc0(fn):
    """``fn(x)``: (N, C, H, W) -> (N, C1, H, W, C0)."""
    if (v := screen_function(fn, "to_nc1hwc0")) is not None:
        return v
    rng = np.random.default_rng(ref.SEED)
    for shape, dt in ref.NC1HWC0_CASES:
        x = (rng.integers(1, 100, size=shape)).astype(dt)    # no zeros: padding shows
        want = F.nchw_to_nc1hwc0(x)
        case = f"{dt.__name__} {shape}"
        try:
            got = np.asarray(fn(x))
        except ValueError as err:
            return failed(f"{case}: your function raised ValueError", got=str(err),
                          hint=f"pad the channels with zeros up to C1 x C0 first: C1 = ceil(C / C0) "
                               f"({shape[1]} channels -> {want.shape[1]} x {want.shape[4]}).")
        if got.shape != want.shape:
            if got.shape == (want.shape[0], want.shape[1], want.shape[4], want.shape[2], want.shape[3]):
                hint = "C0 goes last (innermost): (N, C1, H, W, C0), so one pixel's C0 channels are 32 contiguous bytes."
            elif x.dtype.itemsize != 2 and got.ndim == 5 and got.shape[4] == 16:
                hint = f"C0 is 32 bytes of elements: 32 // itemsize = {32 // x.dtype.itemsize} for {x.dtype}, not 16."
            elif got.ndim == 5 and got.shape[1] < want.shape[1]:
                hint = "C1 = ceil(C / C0): the last block is padded with zero channels, not dropped."
            else:
                hint = "(N, C, H, W) -> (N, C1, H, W, C0) with C1 = ceil(C / C0), C0 = 32 // itemsize."
            return failed(f"{case}: wrong shape", expected=_describe(want), got=_describe(got), hint=hint)
        if got.dtype != want.dtype:
            return failed(f"{case}: wrong dtype", expected=str(want.dtype), got=str(got.dtype),
                          hint="a layout change moves elements; it keeps their dtype.")
        if not np.array_equal(got, want):
            bad = np.argwhere(got != want)[0]
            idx = tuple(int(v) for v in bad)
            c = idx[1] * want.shape[4] + idx[4]
            if c >= shape[1]:
                hint = f"channel {c} does not exist (C = {shape[1]}): the padding channels must be 0."
            else:
                hint = ("element [n, c1, h, w, c0] is channel c1 x C0 + c0 of pixel (h, w): reshape to "
                        "(N, C1, C0, H, W), then move C0 last.")
            return failed(f"{case}: wrong element at {idx}", expected=repr(want[idx].item()),
                          got=repr(got[idx].item()), hint=hint)
    return passed(f"right for {len(ref.NC1HWC0_CASES)} maps in fp16, fp32 and int8 (C0 = 16, 8, 32), "
                  f"channels padded with zeros. This is CANN's TransData NCHW -> NC1HWC0.")


# -- exercise 3: C04 ------------------------------------------------------------------------------
FORMATS = ("NC1HWC0", "C04")


@exercise("06", "K of a conv's matmul: NC1HWC0 pads the channels to a block of C0 = 16 at every tap "
                "(K = C1 x taps x C0); C04 puts 4 channels at each tap and pads K to 16 once",
          key=('"NC1HWC0": 784', '"C04": 208'))
def c04_k(answer):
    """{"NC1HWC0": K, "C04": K} of ResNet-50's stem (3 channels, 7 x 7) in fp16."""
    if is_blank(answer) or (isinstance(answer, dict) and any(v is Ellipsis for v in answer.values())):
        return not_attempted()
    if not isinstance(answer, dict) or set(answer) != set(FORMATS):
        return failed("the answer should be a dict with the two formats as keys",
                      expected='{"NC1HWC0": K, "C04": K}', got=repr(answer),
                      hint="one whole number of K columns for each format.")
    got = {f: whole_numbers([answer[f]], 1) for f in FORMATS}
    if any(v is None for v in got.values()):
        return failed("each K should be a whole number", got=repr(answer), hint="K counts columns: an int.")
    got = {f: v[0] for f, v in got.items()}
    want = {"NC1HWC0": ref.stem_problem(False).k, "C04": ref.stem_problem(True).k}
    taps, cin = 7 * 7, 3
    useful = taps * cin
    if got == want:
        return passed(f"K = {want['NC1HWC0']} in NC1HWC0, {want['C04']} in C04: the cube multiplies "
                      f"{useful} useful columns of K = {useful / want['NC1HWC0']:.0%} of its work in NC1HWC0, "
                      f"{useful / want['C04']:.0%} in C04.")
    n, c = got["NC1HWC0"], got["C04"]
    if n != want["NC1HWC0"]:
        if n == useful:
            hint = ("that is 3 channels x 49 taps with no padding: NC1HWC0 stores a whole block of C0 = 16 "
                    "channels at every pixel, so every tap brings 16 columns, 13 of them zeros.")
        else:
            hint = "NC1HWC0: K = C1 x taps x C0, with C1 = ceil(3 / 16) = 1 block of 16 channels per tap."
        return failed("K in NC1HWC0 is wrong", expected="C1 x kh x kw x C0", got=str(n), hint=hint)
    if c == taps * 4:
        hint = ("4 channels x 49 taps is right so far, but the cube takes K in whole fractals of K0 = 16: "
                "C04 pads K once, at the end.")
    elif c == want["NC1HWC0"] or c == taps * 16:
        hint = "that pads each tap to 16 channels, as NC1HWC0 does: C04's blocks hold 4 channels a tap."
    elif c == -(-useful // 16) * 16:
        hint = "C04 stores 4 channels a pixel (3 real, 1 zero), not 3: each tap brings 4 columns."
    else:
        hint = "C04: each tap brings a block of 4 channels; K = taps x 4, padded once to a multiple of 16."
    return failed("K in C04 is wrong", expected="taps x 4, padded to a multiple of 16", got=str(c), hint=hint)


# -- exercise 4: a conv tiling that beats the default -------------------------------------------------
@lru_cache(maxsize=None)
def _tiling_reference_cycles() -> int:
    return ref.simulate_tiles(ref.tiling_from_tuple(TILING_REFERENCE))[0]


@lru_cache(maxsize=None)
def _tiling_reference_reads() -> int:
    return ref.gm_read_bytes(ref.tiling_from_tuple(TILING_REFERENCE))


_HOW = {"L0A": "L0A holds l0_buffers x TILE_M x TILE_K0 x 2 B",
        "L0B": "L0B holds l0_buffers x TILE_K0 x TILE_N x 2 B",
        "L0C": "L0C holds l0c_buffers x TILE_M x TILE_N x 4 B (fp32)",
        "L1": "L1 holds l1_buffers x (the map slab: the input rows a tile's output pixels read, halo included, "
              "x C1_STEP blocks, + C1_STEP x 9 x 16 x TILE_N x 2 B of weights)"}


@exercise("06", "a conv tiling against GM traffic: every block tile copies its map slab (its input rows "
                "plus the halo of kh - 1 rows) and its weight window from GM, so taller tiles read each "
                "byte fewer times; each buffer holds buffers x its tile", performance=True,
          key=("(128, 32, 1, 32, 2, 2, 2)",))
def conv_tiles(answer):
    """(TILE_M, TILE_N, C1_STEP, TILE_K0, l1, l0, l0c buffers) for exercise 4's layer on the teaching chip."""
    if is_blank(answer):
        return not_attempted()
    tiles = whole_numbers(answer, 7)
    if tiles is None:
        return failed("the answer should be 7 whole numbers",
                      expected="(TILE_M, TILE_N, C1_STEP, TILE_K0, l1_buffers, l0_buffers, l0c_buffers)",
                      got=repr(answer), hint="a tuple such as (32, 32, 1, 32, 2, 2, 2).")
    t = ref.tiling_from_tuple(tiles)
    found = problems(t, ref.TILING_CHIP)
    if found:
        over = [p for p in found if " needs " in p]
        if over:
            name = over[0].split()[0]
            hint = f"{_HOW.get(name, name + ' holds buffers x its tile')}: shrink the tiles of the buffer that overflows."
        else:
            hint = "TILE_M and TILE_N are multiples of 16, TILE_K0 a multiple of C0 = 16, C1_STEP in 1..C1, buffers 1 or 2."
        return failed("the tiling cannot run", got="; ".join(found), hint=hint)
    cycles, extrapolated = ref.simulate_tiles(t)
    reference = _tiling_reference_cycles()
    reads = ref.gm_read_bytes(t)
    if min(t.tiles.l1_buffers, t.tiles.l0_buffers, t.tiles.l0c_buffers) < 2:
        hint = ONE_BUFFER_HINT
    elif reads > 1.2 * _tiling_reference_reads():
        rate = get_chip(ref.TILING_CHIP).gm_sustained_bytes_per_cycle
        hint = (f"your tiles copy {reads:,} B in from GM, which moves {rate:.0f} B a cycle on this chip: each block "
                f"tile reads its slab with a halo of 2 input rows and the weights of its N tile again, so "
                f"taller TILE_M (fewer tiles per column) read the halo and the weights fewer times; spend "
                f"L0C on TILE_M rather than TILE_N.")
    else:
        hint = "longer mmads (a longer TILE_K0) and fewer, larger copies pay fewer start-ups."
    v = perf_verdict(cycles, reference, f"{t.recipe()} fits every buffer of the {ref.TILING_CHIP} chip", hint)
    v.lines.append(f"it copies {reads:,} B in from GM")
    if extrapolated:
        v.lines.append(f"(simulated the first {ref.SAMPLE_LOOPS} block tiles of each core and scaled up)")
    return v


# -- exercise 5: the batch at which HBM stops bounding a layer ------------------------------------------
BATCH_LAYERS = ("layer4.1.conv2", "layer3.1.conv3")


def _slip_batches(name: str) -> dict:
    """The answer a typical slip gives for layer ``name``: {slip: batch or None}."""
    h = ref.hbm_terms(name)
    c = get_chip(ref.HBM_CHIP)
    out = {}

    def crossing(cube, fixed, per):
        gain = cube - per
        return None if gain <= 0 else max(1, int(np.ceil(fixed / gain - 1e-9)))
    out["no weights"] = crossing(h["cube_per_image"], 0.0, h["hbm_per_image"])
    out["one core"] = crossing(h["cube_per_image"] * c.ai_cores, h["hbm_fixed"], h["hbm_per_image"])
    pins = 1 / c.memory.gm_efficiency                    # bytes at the pins' rate, not the sustained one
    out["pins"] = crossing(h["cube_per_image"] * pins, h["hbm_fixed"], h["hbm_per_image"])
    return out


@exercise("06", "MACs per byte grow with the batch: the weights are read once for the whole batch, "
                "while each image brings its own map and output bytes; a layer stops being HBM-bound "
                "when its cube time reaches its HBM time, or never, when one image's bytes already "
                "outweigh its MACs", key=('"layer4.1.conv2": 6', '"layer3.1.conv3": None'))
def smallest_batch(answer):
    """{layer: smallest batch at which its cube time reaches its HBM time, or None} on the 910."""
    if is_blank(answer) or (isinstance(answer, dict) and any(v is Ellipsis for v in answer.values())):
        return not_attempted()
    if not isinstance(answer, dict) or set(answer) != set(BATCH_LAYERS):
        return failed("the answer should be a dict with the two layers as keys",
                      expected="{" + ", ".join(f"{n!r}: batch or None" for n in BATCH_LAYERS) + "}",
                      got=repr(answer), hint="a whole number (the smallest batch) or None for each layer.")
    for name in BATCH_LAYERS:
        got = answer[name]
        if got is not None and whole_numbers([got], 1) is None:
            return failed(f"{name}: the answer should be a whole number or None", got=repr(got),
                          hint="a batch size is a whole number; None when no batch is large enough.")
        want = ref.hbm_bound_batch(name)
        got = None if got is None else int(got)
        if got == want:
            continue
        slips = _slip_batches(name)
        if want is None:
            hint = ("every image brings its own map and output bytes, as many per MAC as the one before: "
                    "the batch shares only the weights, so the MACs per byte rise towards one image's "
                    "ratio and no further. Compare that ratio with the chip's.")
        elif got is None:
            hint = ("the weights are read once for the whole batch: the MACs per byte grow with the "
                    "batch towards one image's MACs per map-and-output byte, which for this layer is far "
                    "above the chip's ratio, so some batch gets there.")
        elif got == slips["no weights"]:
            hint = "the weights are read from HBM too, once whatever the batch: at small batches they are most of the bytes."
        elif got == slips["one core"]:
            hint = "the cube time is the MACs over every core's cube: all the cores compute, HBM is shared by all."
        elif got == slips["pins"]:
            hint = "HBM sustains less than its pins' rate: use the sustained bytes a cycle."
        elif got in (want - 1, want + 1):
            hint = "the smallest batch whose cube time is at least its HBM time: check the batches either side."
        else:
            hint = ("cube cycles = MACs / (cores x MACs a cycle); HBM cycles = (weights + batch x (map + "
                    "output)) bytes / sustained bytes a cycle.")
        return failed(f"{name}: wrong batch", expected="the smallest batch the HBM no longer bounds, or None",
                      got=repr(got), hint=hint)
    return passed(f"{BATCH_LAYERS[0]} stops being HBM-bound at batch {ref.hbm_bound_batch(BATCH_LAYERS[0])}: "
                  f"its weights dominate its bytes and the batch shares them; {BATCH_LAYERS[1]} never does: "
                  f"each image brings more bytes per MAC than the chip's ratio allows, however many images "
                  f"share the weights.")


# -- the challenge: batch 1 on every core ------------------------------------------------------------
@lru_cache(maxsize=None)
def _challenge_cycles(tiles: ConvTiles) -> int:
    return int(simulate(tiled(ref.challenge_problem(), tiles), ref.CHALLENGE_CHIP).cycles)


@exercise("06", "batch 1 on a many-core chip: M is one image's output pixels, so large block tiles "
                "leave most cores idle; narrower N (and shorter M) tiles make a block tile for every "
                "core, and a long K is cut in long mmads (TILE_K0) and long L1 steps (C1_STEP)",
          performance=True, challenge=True, key=("tile_n=16", "tile_k0=144"))
def fill_the_cores(answer):
    """ConvTiles for the challenge's layer (CHALLENGE_LAYER at batch 1) on the 910."""
    if is_blank(answer):
        return not_attempted()
    if not isinstance(answer, ConvTiles):
        return failed("the answer should be a ConvTiles", expected="ConvTiles(tile_m=..., ...)", got=repr(answer),
                      hint="build it with ConvTiles(tile_m=..., tile_n=..., c1_step=..., tile_k0=..., block_dim=...).")
    chip = get_chip(ref.CHALLENGE_CHIP)
    t = tiled(ref.challenge_problem(), answer, name="yours")
    found = problems(t, chip)
    if answer.block_dim > chip.ai_cores:
        found.append(f"block_dim={answer.block_dim} is more than the {chip.ai_cores} cores of the {chip.name}")
    if found:
        return failed("the tiling cannot run", got="; ".join(found),
                      hint="every tile within its buffer (buffers x tile), TILE_M and TILE_N multiples of 16, "
                           "TILE_K0 of C0 = 16, block_dim at most the cores.")
    cycles = _challenge_cycles(answer)
    reference = _challenge_cycles(CHALLENGE_REFERENCE)
    busy = ref.busy_cores(t)
    if busy < chip.ai_cores // 2:
        hint = (f"only {busy} of the {chip.ai_cores} cores compute a block tile: at batch 1 M is "
                f"{t.problem.m} output pixels, so tiles this large are few; make more of them (narrower "
                f"N tiles, shorter M tiles) and launch a block for each.")
    elif answer.tile_k0 < 64:
        hint = (f"K is {t.problem.k} long and TILE_K0 = {answer.tile_k0} cuts it into "
                f"{-(-t.problem.k // answer.tile_k0)} mmads a tile, each paying its start-up: longer mmads "
                f"(TILE_K0) and longer L1 steps (C1_STEP).")
    elif min(answer.l1_buffers, answer.l0_buffers, answer.l0c_buffers) < 2:
        hint = ONE_BUFFER_HINT
    else:
        hint = "longer L1 steps (C1_STEP) pay fewer copy start-ups; balance the tiles so no core runs two."
    v = perf_verdict(cycles, reference, f"{t.recipe()} gives {busy} of {chip.ai_cores} cores a block tile", hint)
    v.lines.append(f"ConvTiles() as it comes: {_challenge_cycles(ConvTiles()):,} cycles")
    return v


__all__ = ["img2col_source", "nc1hwc0", "c04_k", "conv_tiles", "smallest_batch", "fill_the_cores",
           "TILING_REFERENCE", "CHALLENGE_REFERENCE"]
