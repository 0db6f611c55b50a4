"""Checkers of lab 06 (convolution on the cube): img2col index arithmetic (against what load_3d
wrote into L0A on the simulator), NC1HWC0 conversion, and a conv tiling that fits every buffer
and runs within 150% of the default tiling's cycles."""
from __future__ import annotations

import numpy as np

from ... import formats as F
from ...kernels.conv import problems
from ...kernels.examples.img2col import img2col_on_npu
from .. import lab06 as ref
from . import exercise, failed, is_blank, not_attempted, passed, perf_verdict, screen_function, whole_numbers

C0 = ref.C0


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
                "(oh x stride - pad + kh, ow x stride - pad + kw), zero outside the map")
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
                "innermost, C padded with zeros to C1 x C0")
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


# -- exercise 3: a conv tiling -------------------------------------------------------------------
@exercise("06", "conv tiling: each buffer holds buffers x its tile (L0A: TILE_M x TILE_K0, L0B: "
                "TILE_K0 x TILE_N, L0C: TILE_M x TILE_N fp32, L1: map slab + weights per C1_STEP)",
          performance=True)
def conv_tiles(answer):
    """(TILE_M, TILE_N, C1_STEP, TILE_K0, l1, l0, l0c buffers) for the lab's layer on the 910."""
    if is_blank(answer):
        return not_attempted()
    tiles = whole_numbers(answer, 7)
    if tiles is None:
        return failed("the answer should be 7 whole numbers",
                      expected="(TILE_M, TILE_N, C1_STEP, TILE_K0, l1_buffers, l0_buffers, l0c_buffers)",
                      got=repr(answer), hint="a tuple such as (64, 64, 1, 64, 2, 2, 2).")
    t = ref.tiling_from_tuple(tiles)
    found = problems(t, ref.TILING_CHIP)
    if found:
        over = [p for p in found if " needs " in p]
        if over:
            name = over[0].split()[0]
            how = {"L0A": "L0A holds l0_buffers x TILE_M x TILE_K0 x 2 B",
                   "L0B": "L0B holds l0_buffers x TILE_K0 x TILE_N x 2 B",
                   "L0C": "L0C holds l0c_buffers x TILE_M x TILE_N x 4 B (fp32)",
                   "L1": "L1 holds l1_buffers x (map slab + C1_STEP x 9 x 16 x TILE_N x 2 B of weights)"}[name]
            hint = f"{how}: shrink the tiles of the buffer that overflows."
        else:
            hint = "TILE_M and TILE_N are multiples of 16, TILE_K0 a multiple of C0 = 16, C1_STEP in 1..C1, buffers 1 or 2."
        return failed("the tiling cannot run", got="; ".join(found), hint=hint)
    cycles, extrapolated = ref.simulate_tiles(t)
    reference, _ = ref.simulate_tiles(ref.reference_tiling())
    if min(t.tiles.l1_buffers, t.tiles.l0_buffers, t.tiles.l0c_buffers) < 2:
        hint = "with one buffer at a level, its copies and the cube take turns: use 2 at every level."
    elif t.tiles.tile_m * t.tiles.tile_n < 64 * 64:
        hint = ("small block tiles reload the map slab and the weights for every tile and pay a copy "
                "start-up each time: bigger TILE_M x TILE_N reuse each loaded byte more.")
    else:
        hint = "a longer C1_STEP (more K per L1 copy) and a longer TILE_K0 (longer mmads) pay fewer start-ups."
    v = perf_verdict(cycles, reference, f"{t.recipe()} fits every buffer of the {ref.TILING_CHIP}", hint)
    if extrapolated:
        v.lines.append(f"(simulated the first {ref.SAMPLE_LOOPS} block tiles of each core and scaled up)")
    return v
