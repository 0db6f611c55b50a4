"""Checkers of lab 08 (fusion): BatchNorm folded into a conv's weights and bias (run on the conv
kernel), where each epilogue goes on the 910B, the fused bias + ReLU epilogue of a matmul
(numerics, then cycles within 150% of the reference), the GM bytes Conv+BN+ReLU saves on a
layer, the cycles fusing bias and ReLU into a matmul saves (a prediction held to the
simulator), and the challenge: a fusion plan for a ResNet-50 bottleneck within 150% of the
reference plan's cycles."""
from __future__ import annotations

import functools

import numpy as np

from ...chips import get_chip
from ...errors import DeadlockError, RaceError, ShapeError, SyncError
from ...ops import golden
from .. import lab08 as ref
from . import (as_number, close, exercise, failed, is_blank, not_attempted, passed, perf_verdict, ratio_is,
               screen_function, stopped)

EPS = 1e-5
#: the folded conv's fp16 output against numpy's conv -> BN -> ReLU in float64: each folded weight
#: rounds to fp16 (a relative 2^-11, so up to 2^-11 x sum |x| |w'| on a dot product), the output
#: rounds once more (2^-11 x |y|, twice for slack), and a small absolute floor
W_ROUND, Y_ROUND, FLOOR = 2.0 ** -11, 2.0 ** -10, 1e-3


# -- exercise 1: BN folded into the conv's weights and bias -----------------------------------------
def _fold_variants(w, b, mean, var, gamma, beta, eps):
    s = gamma / np.sqrt(var + eps)
    ws = w * s[:, None, None, None]
    with np.errstate(all="ignore"):
        sv = gamma / (var + eps)
        s0 = gamma / np.sqrt(var)
        return [
            ((w * sv[:, None, None, None], (b - mean) * sv + beta),
             "BN divides by the standard deviation, the square root of var + eps, not by the variance."),
            ((w * s0[:, None, None, None], (b - mean) * s0 + beta),
             "eps goes in before the square root: a channel with var = 0 would divide by zero."),
            ((ws, b - mean + beta), "the bias passes through BN too: (b - mean) is scaled like the conv's output."),
            ((ws, beta - mean * s), "the conv's own bias b goes through BN as well: it is part of y."),
            ((ws, (b + mean) * s + beta), "BN subtracts the mean: it enters with a minus sign."),
            ((w, (b - mean) * s + beta), "the weights must carry the scale too: conv(x, w) x scale = conv(x, w x scale)."),
        ]


@exercise("08", "BatchNorm in inference is a per-channel affine map of the conv's output, so it folds "
                "into the conv: each output channel's filter and bias scaled, the bias shifted",
          key=("scale[:, None, None, None]", "(b - mean) * scale + beta"))
def fold_bn(fn):
    """``fn(w, b, mean, var, gamma, beta, eps)`` -> (w_folded, b_folded), float64 arrays of w's
    and b's shapes."""
    if (v := screen_function(fn, "fold_bn")) is not None:
        return v
    x, w, b, mean, var, gamma, beta = ref.bn_inputs()
    with np.errstate(all="ignore"):
        got = fn(w.copy(), b.copy(), mean.copy(), var.copy(), gamma.copy(), beta.copy(), EPS)
    try:
        wf, bf = (np.asarray(v, np.float64) for v in got)
    except (TypeError, ValueError):
        return failed("the answer should be a pair (w_folded, b_folded)", expected="(w_folded, b_folded)",
                      got=repr(got)[:80], hint="return the folded weights and the folded bias: two arrays.")
    want_w, want_b = ref.fold_bn_reference(w, b, mean, var, gamma, beta, EPS)
    if wf.shape != want_w.shape or bf.shape != want_b.shape:
        return failed("wrong shapes", expected=f"{want_w.shape} and {want_b.shape}",
                      got=f"{wf.shape} and {bf.shape}",
                      hint="the folded conv has the same weight shape and one bias per output channel "
                           "(w's first axis).")
    if not (np.allclose(wf, want_w, rtol=1e-9, atol=1e-12) and np.allclose(bf, want_b, rtol=1e-9, atol=1e-12)):
        hint = "write BN(conv(x, w) + b) out and collect what multiplies x and what is left over."
        for (vw, vb), h in _fold_variants(w, b, mean, var, gamma, beta, EPS):
            if np.allclose(np.nan_to_num(wf), np.nan_to_num(vw), rtol=1e-9) and \
                    np.allclose(np.nan_to_num(bf), np.nan_to_num(vb), rtol=1e-9):
                hint = h
                break
        err = np.nan_to_num(np.abs(wf - want_w).reshape(len(bf), -1).max(axis=1) + np.abs(bf - want_b), nan=np.inf)
        i = int(np.argmax(err))
        return failed(f"wrong folded weights or bias (channel {i}, var = {var[i]:.3f})",
                      expected=f"bias {want_b[i]:.5f}, first weight {want_w[i].flat[0]:.5f}",
                      got=f"bias {bf[i]:.5f}, first weight {wf[i].flat[0]:.5f}", hint=hint)
    y = ref.run_folded_conv(x, wf, bf).astype(np.float64)
    x64 = x.astype(np.float64)
    want = golden.conv2d_bn_relu(x64, w, b, mean, var, gamma, beta, EPS, padding=1)
    bound = W_ROUND * golden.conv2d(np.abs(x64), np.abs(want_w), padding=1) + Y_ROUND * np.abs(want) + FLOOR
    worst = float(np.max(np.abs(y - want) / bound))
    if worst > 1:
        return failed("the folded conv does not match conv -> BN -> ReLU", expected="within the fp16 rounding bound",
                      got=f"{worst:.1f} x the bound", hint="w_folded and b_folded must be float64 arrays.")
    return passed(f"folded right; the conv kernel with your fp16 weights and fp32 bias (and ReLU) gives "
                  f"relu(BN(conv(x))) within {worst:.0%} of the fp16 rounding bound: BatchNorm costs nothing "
                  f"at run time.")


# -- exercise 2: where each epilogue goes on the 910B ------------------------------------------------
#: the reference, written from Ascend C's Fixpipe (FixpipeParamsV220: quantPre, reluEn; the bias via
#: the bias table into Mmad) and CANN's BN folding
EPILOGUE_HOMES = {"bias": "drain", "relu": "drain", "cast": "drain", "dequant": "drain", "batch_norm": "fold",
                  "gelu": "vector", "residual_add": "vector"}
HOMES = ("drain", "fold", "vector")
_HOME_HINTS = {
    ("bias", "vector"): "a bias is one value per output channel: it never leaves the cube's side (Ascend C "
                        "loads it into the bias table for Mmad; the simulator's FixPipe adds it).",
    ("bias", "fold"): "the bias is already part of the matmul: it rides the drain, nothing to fold.",
    ("relu", "vector"): "ReLU is one of FixPipe's own switches (reluEn): it rides the drain.",
    ("relu", "fold"): "ReLU is not affine: no weight can absorb it; FixPipe applies it on the drain.",
    ("cast", "vector"): "the fp32 -> fp16 conversion is one of FixPipe's quantPre modes: the drain casts.",
    ("cast", "fold"): "a cast happens on the accumulator's way out, FixPipe's quantPre does it.",
    ("dequant", "vector"): "an int32 accumulator times a scale per channel to fp16 is what FixPipe's "
                           "quantisation does (a vector of scales): it rides the drain.",
    ("dequant", "fold"): "an int8 matmul accumulates exact int32 values: the scale cannot go into int8 weights; "
                         "FixPipe applies it on the drain.",
    ("batch_norm", "drain"): "FixPipe's scales are a quantisation's; after an fp16 conv CANN folds inference "
                             "BatchNorm into the weights and bias when it compiles the graph (exercise 1).",
    ("batch_norm", "vector"): "inference BatchNorm is affine per channel: it folds into the weights and bias "
                              "at compile time (exercise 1), nothing runs.",
    ("gelu", "drain"): "FixPipe runs only the steps its parameters name (quantisation, ReLU); GELU needs "
                       "erf or tanh: the vector unit, on the 910B another core (AIV).",
    ("gelu", "fold"): "GELU is not affine: no weight can absorb it.",
    ("residual_add", "drain"): "FixPipe reads at most one value per channel, not a second tensor of C's shape: "
                               "adding the residual takes the vector unit (the AIV on the 910B).",
    ("residual_add", "fold"): "the residual is another tensor, not a function of this conv's output: "
                              "nothing to fold into its weights.",
}


@exercise("08", "FixPipe is a fixed pipeline on the drain from L0C (a quantisation or cast, its scales, "
                "ReLU; the bias rides the cube's side); affine per-channel maps fold into the weights; "
                "anything else needs the vector unit, on the 910B another core",
          key=('"gelu": "vector"', '"residual_add": "vector"', '"dequant": "drain"'))
def epilogue_home(answer):
    """A dict: each epilogue of :data:`EPILOGUE_HOMES` -> "drain", "fold" or "vector"."""
    if is_blank(answer):
        return not_attempted()
    if not isinstance(answer, dict):
        return failed("the answer should be a dict", expected="{'bias': ..., ...}", got=type(answer).__name__,
                      hint="map each epilogue's name to 'drain', 'fold' or 'vector'.")
    got = {str(k): str(v).strip().lower() for k, v in answer.items()}
    if set(got) != set(EPILOGUE_HOMES):
        return failed("wrong keys", expected=sorted(EPILOGUE_HOMES), got=sorted(got),
                      hint="one entry for each of the seven epilogues, named as in the spec.")
    odd = sorted(v for v in got.values() if v not in HOMES)
    if odd:
        return failed("unknown homes", expected=" / ".join(HOMES), got=", ".join(odd),
                      hint="each epilogue goes to 'drain', 'fold' or 'vector'.")
    wrong = [k for k in EPILOGUE_HOMES if got[k] != EPILOGUE_HOMES[k]]
    if wrong:
        k = wrong[0]
        return failed(f"{len(wrong)} of {len(EPILOGUE_HOMES)} wrong, the first: {k}", expected=EPILOGUE_HOMES[k],
                      got=got[k], hint=_HOME_HINTS[(k, got[k])])
    return passed("all seven placed: the bias, the cast, the dequantisation and ReLU ride FixPipe's drain, "
                  "BatchNorm folds away, GELU and the residual add need the vector unit (on the 910B the "
                  "AIV, which reads the tile back from a GM workspace). On the 910 all but the fold run on "
                  "the vector unit, each tile in UB on its way out.")


# -- exercise 3: the fused epilogue ------------------------------------------------------------------
_ERRORS = {
    RaceError: "FixPipe and MTE2 share the bias slot: FixPipe may read it only after MTE2's copy has "
               "landed (the template sets a flag for that), and MTE2 may refill it only once FixPipe has "
               "read it (the template waits on a flag for that, which you set once FixPipe is done).",
    DeadlockError: "the template waits on the FIX -> MTE2 flag of a slot before it refills it: someone must "
                   "set it once FixPipe has read the bias.",
    SyncError: "each flag the template sets is waited for once, and each flag it waits on is set once, "
               "with the slot you were given as its id.",
    ShapeError: "the tile is m x n, its rows dst_stride elements apart in C.",
}


@exercise("08", "epilogue fusion: FixPipe adds the bias and applies ReLU while it drains L0C, so C "
                "goes to GM once; the bias copy (MTE2) and FixPipe hand the L1 slot over by flags",
          performance=True,
          key=("wait_flag(PIPE_MTE2, PIPE_FIX, slot)", "set_flag(PIPE_FIX, PIPE_MTE2, slot)", "bias=bias, relu=True"))
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
            hint = "C is all zeros: the drain must write the tile to c_gm."
        elif np.allclose(c32, np.maximum(plain, 0), atol=0.01, rtol=0.005):
            hint = "the bias is missing: FixPipe can add it (in the accumulator's precision) as it drains."
        elif np.allclose(c32, plain + bias, atol=0.01, rtol=0.005):
            hint = "ReLU is missing: FixPipe can apply it after the bias."
        else:
            hint = "drain the m x n tile into c_gm, rows dst_stride apart, with the bias and ReLU."
        return failed("C is not relu(A B + bias)", expected=f"C[{r}, {col}] = {want[r, col]:.4f}",
                      got=f"C[{r}, {col}] = {c32[r, col]:.4f} ({int((~ok).sum()):,} of {c.size:,} wrong)",
                      hint=hint)
    _, trace, _ = ref.run_epilogue(fn, shape=ref.EPI_PERF_SHAPE, mode="timing")
    m, n, k = ref.EPI_PERF_SHAPE
    return perf_verdict(trace.cycles, _epilogue_reference_cycles(),
                        f"C = relu(A B + bias) right; timed on {m}x{k} @ {k}x{n}",
                        "nothing but the flags should order FixPipe: a barrier (or an extra wait) stops "
                        "the next tile's copies and mmads from overlapping this drain.")


@functools.lru_cache(maxsize=1)
def _epilogue_reference_cycles() -> int:
    return int(ref.run_epilogue(ref.fused_epilogue_reference, shape=ref.EPI_PERF_SHAPE, mode="timing")[1].cycles)


# -- exercise 4: GM bytes saved --------------------------------------------------------------------
@exercise("08", "fusion saves the intermediate's round trips: conv writes Y, BN reads and writes it, "
                "ReLU reads and writes it; fused, Y is written once",
          key=("4 * output_bytes", "(56 + 2 * 1 - 3) // 2 + 1"))
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
    if close(x, want, 1e-6):
        return passed(f"{want:,} B = 4 x the {out:,} B output (BN's read and write, ReLU's read and write); "
                      f"the fused kernel writes the output once, as the conv alone did.")
    _, cin, cout, k, s, p, h = next(ly for ly in ref.RESNET50_CONVS if ly[0] == ref.BYTES_LAYER)
    if ratio_is(x, want, 0.5):
        hint = ("half the saving: count bytes (fp16: 2 an element), and both round trips: BN reads and "
                "writes Y, then ReLU reads and writes it again.")
    elif ratio_is(x, want, 0.25):
        hint = "the output is written once either way; the fused kernel saves the passes of BN and ReLU over it."
    elif ratio_is(x, want, 0.75) or ratio_is(x, want, 1.25):
        hint = ("count the separate kernels' passes over Y: conv writes it, BN reads and writes it, "
                "ReLU reads and writes it; fused, it is written once.")
    elif ratio_is(x, want, s * s):
        hint = f"the stride is {s}: the output is {h // s} x {h // s}, not the input's {h} x {h}."
    else:
        hint = ("output = batch x Cout x Ho x Wo x 2 bytes, Ho from the input size, kernel, stride and padding; "
                "then count the passes over it that fusion removes.")
    return failed("wrong number of bytes", expected=f"{want:,}", got=f"{x:,.0f}", hint=hint)


# -- exercise 5: the cycles fusing bias and ReLU saves, predicted -------------------------------------
#: a prediction from the chip's figures is held to the simulator within this fraction
PREDICT_REL = 0.12


@functools.lru_cache(maxsize=1)
def _linear_row() -> dict:
    return ref.matmul_bias_relu()


@exercise("08", "a separate elementwise kernel costs its launch and a read and a write of its whole "
                "tensor at the GM bandwidth; fused into the matmul's drain it costs nothing",
          key=("2 * c.launch.launch_cycles", "4 * m * n * 2"))
def cycles_saved(answer):
    """Predicted cycles the fused MatMul + bias + ReLU saves against MatMul, Add, ReLU apart."""
    if is_blank(answer):
        return not_attempted()
    x = as_number(answer)
    if x is None:
        return failed("the answer should be a number of cycles", expected="a number", got=repr(answer),
                      hint="a float or an int: cycles.")
    row = _linear_row()
    sim = row["separate_cycles"] - row["fused_cycles"]
    line = f"the simulator: {row['separate_cycles']:,} cycles apart, {row['fused_cycles']:,} fused, {sim:,} saved"
    if abs(x - sim) <= PREDICT_REL * sim:
        return passed(f"predicted {x:,.0f} cycles saved; {line} ({x / sim - 1:+.0%}).")
    c = get_chip(ref.CHIP)
    m, n, _ = ref.LINEAR_SHAPE
    launches, per_pass = 2 * c.launch.launch_cycles, m * n * 2 / c.gm_sustained_bytes_per_cycle
    peak_pass = m * n * 2 / c.memory.gm_bytes_per_cycle
    guesses = [(4 * per_pass, "the two kernels are two launches too (the chip's launch_cycles each)."),
               (launches + 2 * per_pass, "each of the two kernels reads C and writes it: four passes, not two."),
               (launches + 5 * per_pass, "the matmul writes C in both versions: only the Add's and the ReLU's "
                                         "passes go."),
               (launches + 4 * peak_pass, "HBM sustains less than its pins' rate: use the sustained bandwidth."),
               (launches + 8 * per_pass, "C is fp16 (2 bytes an element), not fp32.")]
    hint = ("the saving is the Add and ReLU kernels: their launches and their passes over C in GM, "
            "at the sustained bandwidth.")
    for guess, h in guesses:
        if abs(x - guess) <= 0.03 * guess:
            hint = h
            break
    return failed("prediction off by more than "
                  f"{PREDICT_REL:.0%}", expected=f"within {PREDICT_REL:.0%} of the simulated saving",
                  got=f"{x:,.0f} cycles", hint=hint, lines=[line])


# -- exercise 6 (challenge): a fusion plan for a bottleneck ------------------------------------------
#: the reference plan: every BN into the conv before it, the ReLUs with them, the last ReLU into
#: the residual Add
REFERENCE_PLAN = (("conv1", "bn1", "relu1"), ("conv2", "bn2", "relu2"), ("conv3", "bn3"), ("add", "relu3"))


@functools.lru_cache(maxsize=1)
def _reference_plan_cycles() -> int:
    return ref.plan_cycles(REFERENCE_PLAN)


def _group_hint(kinds: tuple) -> str:
    if "add" in kinds and len(kinds) > 1 and kinds[0] != "add":
        return ("a conv's epilogue takes per-channel vectors, not a second tensor: the residual Add is a "
                "kernel of its own (it may take what follows it).")
    if kinds.count("conv") > 1:
        return "a conv kernel's epilogue ends at the next conv: each conv starts a kernel of its own."
    if kinds[0] != "conv" and "conv" in kinds:
        return "ops fuse into the kernel before them (its epilogue), not into the conv after them."
    if kinds[0] == "bn":
        return ("npulab has no BatchNorm + ReLU kernel: a BatchNorm after a conv belongs in that conv's "
                "epilogue, and what follows it can come along.")
    return f"the kernels npulab has run these groups: {', '.join(map(str, ref.BLOCK_KERNELS))}."


@exercise("08", "a fusion plan: each op left as its own kernel costs a launch and a pass over its "
                "tensor in GM; elementwise ops ride the epilogue of the kernel before them",
          performance=True, challenge=True, key=('("conv3", "bn3")', '("add", "relu3")'))
def fusion_plan(plan):
    """A list of tuples of the bottleneck's op names (:data:`~npulab.labs.lab08.BLOCK_OPS`), each
    group run as one kernel."""
    if is_blank(plan):
        return not_attempted()
    if isinstance(plan, str) or not isinstance(plan, (list, tuple)):
        return failed("the plan should be a list of tuples of op names", expected='[("conv1", ...), ...]',
                      got=repr(plan)[:80], hint='a list of groups, each a tuple of op names, e.g. ("conv1",).')
    if (one := next((g for g in plan if isinstance(g, str)), None)) is not None:
        return failed("a group is a string, not a tuple", expected=f'("{one}",)', got=repr(one),
                      hint='a group of one op needs its comma: ("conv1",) is a tuple, ("conv1") a string.')
    groups = [tuple(g) if isinstance(g, (list, tuple)) else None for g in plan]
    if any(g is None or not all(isinstance(op, str) for op in g) for g in groups):
        return failed("the plan should be a list of tuples of op names", expected='[("conv1", ...), ...]',
                      got=repr(plan)[:80], hint='each group is a tuple of op names, e.g. ("conv1",).')
    flat = tuple(op for g in groups for op in g)
    if flat != ref.BLOCK_OPS or not all(groups):
        return failed("the groups do not list the block's ops once each, in order", expected=ref.BLOCK_OPS,
                      got=flat, hint="a kernel runs consecutive ops; every op goes in exactly one group.")
    for g in groups:
        kinds = ref.group_kinds(g)
        if kinds not in ref.BLOCK_KERNELS:
            return failed(f"no kernel runs {g} as one", expected="groups a kernel can run", got=g,
                          hint=_group_hint(kinds))
    cycles = ref.plan_cycles(groups)
    return perf_verdict(cycles, _reference_plan_cycles(),
                        f"{len(groups)} kernels for the bottleneck at batch {ref.BLOCK_BATCH}",
                        "every op kept as its own kernel costs a launch and a read and a write of its tensor "
                        "in GM: which of them can ride the epilogue of the kernel before it?")
