"""Checkers of lab 08 (fusion): BatchNorm folded into the epilogue's per-channel scale and offset
(run on the conv kernel, on the 910's vector unit), the fused bias + ReLU epilogue of a matmul (numerics, then cycles within
150% of the reference), and the GM bytes Conv+BN+ReLU saves on a layer."""
from __future__ import annotations

import numpy as np

from ...errors import DeadlockError, RaceError, ShapeError, SyncError
from ...ops import golden
from .. import lab08 as ref
from . import (as_number, close, exercise, failed, is_blank, not_attempted, passed, perf_verdict, ratio_is,
               screen_function, stopped)

EPS = 1e-5
CONV_ATOL, CONV_RTOL = 0.03, 2e-3   # fp16 output of a 144-long dot product, then BN (values up to ~1e3)


# -- exercise 1: BN folded into scale and offset -----------------------------------------------------
def _fold_variants(mean, var, gamma, beta, eps):
    s = gamma / np.sqrt(var + eps)
    with np.errstate(all="ignore"):
        return [
            ((gamma / (var + eps), beta - mean * gamma / (var + eps)),
             "BN divides by the standard deviation sqrt(var + eps), not the variance."),
            ((gamma / np.sqrt(var), beta - mean * gamma / np.sqrt(var)),
             "add eps before the square root: a channel with var = 0 would divide by zero."),
            ((s, beta - mean), "the mean is scaled too: (y - mean) x scale + beta = y x scale + (beta - mean x scale)."),
            ((s, beta + mean * s), "(y - mean) x scale: the mean enters with a minus sign."),
            ((gamma * np.sqrt(var + eps), beta - mean * gamma * np.sqrt(var + eps)),
             "scale = gamma / sqrt(var + eps): divide by the standard deviation."),
        ]


@exercise("08", "BatchNorm in inference is a per-channel affine map: scale = gamma / sqrt(var + eps), "
                "offset = beta - mean x scale, which the epilogue applies on the way out of L0C")
def bn_fold(fn):
    """``fn(mean, var, gamma, beta, eps)`` -> (scale, offset), float64 arrays of Cout."""
    if (v := screen_function(fn, "bn_scale_offset")) is not None:
        return v
    x, w, mean, var, gamma, beta = ref.bn_inputs()
    with np.errstate(all="ignore"):
        got = fn(mean.copy(), var.copy(), gamma.copy(), beta.copy(), EPS)
    try:
        scale, offset = (np.asarray(v, np.float64) for v in got)
    except (TypeError, ValueError):
        return failed("the answer should be a pair (scale, offset)", expected="(scale, offset)",
                      got=repr(got)[:80], hint="return scale, offset: two arrays of one value a channel.")
    want_s, want_o = ref.bn_fold_reference(mean, var, gamma, beta, EPS)
    if scale.shape != want_s.shape or offset.shape != want_o.shape:
        return failed("wrong shapes", expected=f"two arrays of shape {want_s.shape}",
                      got=f"{scale.shape} and {offset.shape}", hint="one scale and one offset per output channel.")
    if not (np.allclose(scale, want_s, rtol=1e-9) and np.allclose(offset, want_o, rtol=1e-9, atol=1e-12)):
        hint = "y_bn = (y - mean) / sqrt(var + eps) x gamma + beta = y x scale + offset."
        for (vs, vo), h in _fold_variants(mean, var, gamma, beta, EPS):
            if np.allclose(np.nan_to_num(scale), np.nan_to_num(vs), rtol=1e-9) and \
                    np.allclose(np.nan_to_num(offset), np.nan_to_num(vo), rtol=1e-9):
                hint = h
                break
        i = int(np.argmax(np.abs(np.nan_to_num(scale - want_s)) + np.abs(np.nan_to_num(offset - want_o))))
        return failed(f"wrong scale or offset (channel {i}, var = {var[i]:.3f})",
                      expected=f"scale {want_s[i]:.5f}, offset {want_o[i]:.5f}",
                      got=f"scale {scale[i]:.5f}, offset {offset[i]:.5f}", hint=hint)
    y = ref.run_conv_bn_relu(x, w, scale, offset)
    want = golden.conv2d_bn_relu(x, w, None, mean, var, gamma, beta, EPS, padding=1)
    excess = np.abs(y.astype(np.float64) - want) - (CONV_ATOL + CONV_RTOL * np.abs(want))
    if np.any(excess > 0):
        return failed("the fused conv does not match conv -> BN -> ReLU",
                      expected=f"within {CONV_ATOL} + {CONV_RTOL} x |y|", got=f"off by {excess.max():.4f} more",
                      hint="scale and offset must be float64 arrays of Cout values.")
    return passed(f"scale and offset right; the conv kernel with them in its epilogue (and ReLU) gives "
                  f"relu(BN(conv(x))) within {CONV_ATOL} + {CONV_RTOL} x |y| of numpy (fp16 output).")


# -- exercise 2: the fused epilogue ------------------------------------------------------------------
_ERRORS = {
    RaceError: "FixPipe reads the bias that MTE2 copies into L1: wait_flag(PIPE_MTE2, PIPE_FIX, slot) "
               "before fixpipe, and set_flag(PIPE_FIX, PIPE_MTE2, slot) only after it (the next copy into "
               "the slot must not overwrite a bias FixPipe still reads).",
    DeadlockError: "the template waits on the FIX -> MTE2 flag before it reuses a bias slot: "
                   "set_flag(PIPE_FIX, PIPE_MTE2, slot) after fixpipe (and wait each MTE2 -> FIX flag once).",
    SyncError: "one wait_flag(PIPE_MTE2, PIPE_FIX, slot) before and one set_flag(PIPE_FIX, PIPE_MTE2, slot) "
               "after fixpipe, for the slot you were given.",
    ShapeError: "fixpipe(c_gm, c, m, n, dst_stride=dst_stride, bias=bias, relu=True): the tile is m x n, "
                "its rows dst_stride apart in C.",
}


@exercise("08", "epilogue fusion: FixPipe adds the bias and applies ReLU while it drains L0C, so C "
                "goes to GM once; the bias copy (MTE2) and FixPipe hand the L1 slot over by flags",
          performance=True)
def fused_epilogue(fn):
    """``fn(c_gm, c, bias, slot, m, n, dst_stride)``: drain one block tile with bias and ReLU."""
    if (v := screen_function(fn, "fused_epilogue")) is not None:
        return v
    try:
        # several block tiles a core, so each bias slot is reused: the race checker (on in
        # functional runs) sees a slot released before FixPipe has read it
        c, _, (a, b, bias) = ref.run_epilogue(fn, shape=ref.EPI_PERF_SHAPE)
    except tuple(_ERRORS) as err:
        return stopped(err, _ERRORS)
    want = golden.matmul(a, b, bias=bias, relu=True)
    c32 = c.astype(np.float32)
    ok = np.abs(c32 - want) <= 0.01 + 0.005 * np.abs(want)
    if not ok.all():
        r, col = (int(v) for v in np.argwhere(~ok)[0])
        plain = golden.matmul(a, b)
        if not c.any():
            hint = "C is all zeros: fixpipe must write the tile to c_gm."
        elif np.allclose(c32, np.maximum(plain, 0), atol=0.01, rtol=0.005):
            hint = "the bias is missing: fixpipe(..., bias=bias, ...) adds it in the accumulator's precision."
        elif np.allclose(c32, plain + bias, atol=0.01, rtol=0.005):
            hint = "ReLU is missing: fixpipe(..., relu=True) applies it after the bias."
        else:
            hint = "fixpipe(c_gm, c, m, n, dst_stride=dst_stride, bias=bias, relu=True)."
        return failed("C is not relu(A B + bias)", expected=f"C[{r}, {col}] = {want[r, col]:.4f}",
                      got=f"C[{r}, {col}] = {c32[r, col]:.4f} ({int((~ok).sum()):,} of {c.size:,} wrong)",
                      hint=hint)
    _, trace, _ = ref.run_epilogue(fn, shape=ref.EPI_PERF_SHAPE, mode="timing")
    _, reference, _ = ref.run_epilogue(ref.fused_epilogue_reference, shape=ref.EPI_PERF_SHAPE, mode="timing")
    m, n, k = ref.EPI_PERF_SHAPE
    return perf_verdict(trace.cycles, reference.cycles,
                        f"C = relu(A B + bias) right; timed on {m}x{k} @ {k}x{n}",
                        "nothing but the flags should order FixPipe: a barrier (or an extra wait) stops "
                        "the next tile's copies and mmads from overlapping this drain.")


# -- exercise 3: GM bytes saved --------------------------------------------------------------------
@exercise("08", "fusion saves the intermediate's round trips: conv writes Y, BN reads and writes it, "
                "ReLU reads and writes it; fused, Y is written once")
def gm_bytes_saved(answer):
    """Bytes of GM traffic the fused Conv+BN+ReLU saves on the lab's layer and batch."""
    if is_blank(answer):
        return not_attempted()
    x = as_number(answer)
    out = ref.layer_output_bytes()
    want = 4 * out
    if x is None:
        return failed("the answer should be a number of bytes", expected="a number", got=repr(answer),
                      hint="an int: bytes.")
    sim = ref.simulated_bytes_saved()
    if close(x, want, 1e-6) or close(x, sim, 1e-6):
        return passed(f"{want:,} B = 4 x the {out:,} B output (BN's read and write, ReLU's read and write); "
                      f"the simulator measures {sim:,} B saved (the rest: the parameter vectors and the "
                      f"two kernels' different tilings).")
    _, cin, cout, k, s, p, h = next(ly for ly in ref.RESNET50_CONVS if ly[0] == ref.BYTES_LAYER)
    if ratio_is(x, want, 0.5):
        hint = ("half the saving: count bytes (fp16: 2 an element), and both round trips: BN reads and "
                "writes Y, then ReLU reads and writes it again.")
    elif ratio_is(x, want, 0.25):
        hint = "the output is written once either way; the fused kernel saves the 4 passes of BN and ReLU over it."
    elif ratio_is(x, want, 0.75) or ratio_is(x, want, 1.25):
        hint = ("count the separate kernels' passes over Y: conv writes it (1), BN reads and writes (2), "
                "ReLU reads and writes (2); fused writes it once (1): 5 - 1 = 4.")
    elif ratio_is(x, want, s * s):
        hint = f"the stride is {s}: the output is {h // s} x {h // s}, not the input's {h} x {h}."
    else:
        hint = ("output = batch x Cout x Ho x Wo x 2 bytes with Ho = (H + 2 pad - k) // stride + 1; "
                "saved = 4 x output.")
    return failed("wrong number of bytes", expected=f"{want:,}", got=f"{x:,.0f}", hint=hint)
