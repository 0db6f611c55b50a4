"""Unary math on the vector unit (CANN's ops-math family): Exp, Log, Sqrt, Rsqrt, Reciprocal,
Abs, Neg, Tanh, Sigmoid, Erf, Pows (a scalar exponent), and Cast between float16 and float32.

What you learn here:

* an element-wise math op is an activation by another name: the same kernel
  (:class:`~npulab.kernels.activation.KernelActivation`: CopyIn -> Compute -> CopyOut, elements
  split over the cores and into ramped UB tiles) runs the formulas below, which this module
  adds to the activation kernel's set (``activation.ACTIVATIONS``);
* exp, ln, sqrt, rsqrt, reciprocal and abs are one vector instruction each (the
  transcendental ones cost ``transcendental_cycles_per_repeat`` a repeat), and their fp16 forms
  compute in fp32 inside the instruction and round once (:mod:`npulab.lang.vector`), so they
  run on the input dtype; Neg is one Muls by -1 (exact);
* the vector unit has no tanh, sigmoid or erf: they are built from what it has, and every
  instruction is a pass over the tile. As ops-nn's fp16 kernels do, an fp16 tile is widened
  to fp32 (one Cast), the formula runs in fp32 and the result is rounded once (one Cast);
* Pows (x ** e, e a number fixed at compile time) picks its instructions by e on the host:
  one Mul for 2, one Sqrt for 0.5, squarings and products for any other integer (exact in
  sign for a negative base), and exp(e * ln x) for the rest, which is defined for x > 0 only:
  a negative base with a non-integer exponent gives NaN, as torch does (``ops.pow`` refuses
  it with an error, the graph runtime gets NaN).

Each formula is ``f(formula, dst, x, n)`` over n elements in UB (dst may be x), ``formula``
the :class:`~npulab.kernels.activation.ActivationFormula` holding the scratch tiles, the
constants and the scalar (Pows's exponent).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import lang
from ..arch import BLOCK_BYTES, DEFAULT_CHIP, ceil_div, round_up
from ..chips import get_chip
from ..errors import ShapeError
from ..lang import VECIN, VECOUT, Queue, TPipe, get_block_idx
from ..lang import vector as V
from .tiling_data import Tiling
from .vector_base import BUFFER_NUM, TILES_PER_BLOCK, check_float, copy_elements, launch_vector, ramp_tiles

# Erf: Ascend C's own rational form (CANN 8.1 ascendc highlevel_api lib/math/erf.h, the Erf
# API of the Atlas A2 / training series): erf(x) = c P(c^2) / Q(c^2), c = x clipped to
# [-3.92, 3.92] (erf(3.92) rounds to 1 in fp32), P of degree 5, Q monic of degree 5. In fp32
# arithmetic it stays within 0.02 of the fp32 tolerance row (tests/kernels/test_math_vector.py).
ERF_CLIP = 3.92
ERF_P = (0.053443748819, 7.5517016694, 101.62808918, 1393.8061484, 5063.7915060, 29639.384698)
ERF_Q = (31.212858877, 398.56963806, 3023.1248150, 13243.365831, 26267.224157)   # after the x^10 term
#: integer exponents up to this size run as squarings and products; larger ones as exp(e ln x)
POW_INT_MAX = 1 << 16


@dataclass(frozen=True)
class UnaryMath:
    fn: Callable          # (formula, dst, x, n)
    work: int = 0         # scratch tiles of the compute dtype
    widens: bool = False  # fp16 input computed in fp32
    consts: tuple = ()    # one repeat each, for FusedMulAdd


def _exp(f, dst, x, n):
    lang.exp(dst, x, n)


def _log(f, dst, x, n):
    lang.ln(dst, x, n)


def _sqrt(f, dst, x, n):
    lang.sqrt(dst, x, n)


def _rsqrt(f, dst, x, n):
    V.rsqrt(dst, x, n)


def _reciprocal(f, dst, x, n):
    lang.reciprocal(dst, x, n)


def _abs(f, dst, x, n):
    lang.abs(dst, x, n)


def _neg(f, dst, x, n):
    lang.muls(dst, x, -1.0, n)


def _sigmoid(f, dst, x, n):
    """1 / (1 + exp(-x)), ops-nn's Sigmoid (activation/sigmoid): Muls, Exp, Adds, Reciprocal.
    For x below -88 exp(-x) overflows to inf and the result is 1 / inf = 0, as it should be."""
    lang.muls(dst, x, -1.0, n)
    lang.exp(dst, dst, n)
    lang.adds(dst, dst, 1.0, n)
    lang.reciprocal(dst, dst, n)


def _tanh(f, dst, x, n):
    """tanh x = (e^2x - 1) / (e^2x + 1) = 1 - 2 / (1 + e^2x), the exponential form (the one
    Ascend C's Tanh API documents), rearranged so that e^2x = inf (x > 44) gives 1 - 0 = 1,
    not inf / inf: Muls, Exp, Adds, Reciprocal, Muls, Adds. Near 0 the difference 1 - 2 / (1 +
    e^2x) loses relative precision but its absolute error stays about one fp32 ulp of 1
    (1.2e-7), inside the table's atol."""
    lang.muls(dst, x, 2.0, n)
    lang.exp(dst, dst, n)
    lang.adds(dst, dst, 1.0, n)
    lang.reciprocal(dst, dst, n)
    lang.muls(dst, dst, -2.0, n)
    lang.adds(dst, dst, 1.0, n)


def _erf(f, dst, x, n):
    """c P(c^2) / Q(c^2), c = clip(x, -3.92, 3.92) (ERF_P, ERF_Q): Maxs, Mins, Mul, then
    Horner's rule, each step h = h s + k one FusedMulAdd with a constant (ERF_P: Muls, Adds and
    four steps; ERF_Q, monic: Adds and four steps), Mul and Div: 16 instructions, one of them
    transcendental (Div)."""
    c, s, q = dst, f.work[0], f.work[1]
    lang.maxs(c, x, -ERF_CLIP, n)
    lang.mins(c, c, ERF_CLIP, n)
    lang.mul(s, c, c, n)
    pc, qc = f.consts[:len(ERF_P) - 2], f.consts[len(ERF_P) - 2:]
    lang.muls(q, s, ERF_P[0], n)                 # q = P(s), built in q then moved
    lang.adds(q, q, ERF_P[1], n)
    for k in pc:
        V.fused_mul_add_const(q, s, k, n)
    lang.mul(c, c, q, n)                         # c P(s)
    lang.adds(q, s, ERF_Q[0], n)                 # Q(s), monic
    for k in qc:
        V.fused_mul_add_const(q, s, k, n)
    lang.div(dst, c, q, n)


def pow_plan(exponent: float) -> tuple:
    """How Pows computes x ** exponent: ("const1",), ("copy",), ("sqrt",), ("rsqrt",),
    ("int", k) for an integer k with 1 < |k| <= POW_INT_MAX (squarings and products, then a
    Reciprocal when k < 0), or ("exp_ln", e) for the rest: exp(e ln x), defined for x > 0."""
    e = float(exponent)
    if not math.isfinite(e):
        raise ShapeError(f"Pows: the exponent must be a finite number, got {exponent!r}")
    if e == 0:
        return ("const1",)
    if e == 1:
        return ("copy",)
    if e == 0.5:
        return ("sqrt",)
    if e == -0.5:
        return ("rsqrt",)
    if e == int(e) and abs(e) <= POW_INT_MAX:
        return ("int", int(e))
    return ("exp_ln", e)


def _pows(f, dst, x, n):
    """x ** e by :func:`pow_plan`: one instruction for e in (0, 1, 0.5, -0.5, 2, -1), an
    integer k by binary exponentiation (b = x; b *= b at every bit of |k|, dst *= b where the
    bit is set; about 2 log2 |k| Muls; exact sign for x < 0), else Ln, Muls, Exp."""
    plan = pow_plan(f.scalar)
    if plan[0] == "const1":
        lang.duplicate(dst, 1.0, n)                    # 0 ** 0 = 1, as torch
    elif plan[0] == "copy":
        lang.adds(dst, x, 0.0, n)
    elif plan[0] == "sqrt":
        lang.sqrt(dst, x, n)
    elif plan[0] == "rsqrt":
        V.rsqrt(dst, x, n)
    elif plan[0] == "exp_ln":
        lang.ln(dst, x, n)
        lang.muls(dst, dst, plan[1], n)
        lang.exp(dst, dst, n)
    else:
        _int_power(f, dst, x, n, plan[1])


def _int_power(f, dst, x, n, k):
    if abs(k) == 1:
        lang.reciprocal(dst, x, n)                     # k = -1 (k = 1 is "copy")
        return
    if abs(k) == 2:
        lang.mul(dst, x, x, n)
    else:
        b, m, have = f.work[0], abs(k), False
        lang.adds(b, x, 0.0, n)                        # b = x (dst may be x)
        while m:
            if m & 1:
                if have:
                    lang.mul(dst, dst, b, n)
                else:
                    lang.adds(dst, b, 0.0, n)
                    have = True
            m >>= 1
            if m:
                lang.mul(b, b, b, n)
    if k < 0:
        lang.reciprocal(dst, dst, n)


UNARY = {
    "exp": UnaryMath(_exp), "log": UnaryMath(_log), "sqrt": UnaryMath(_sqrt), "rsqrt": UnaryMath(_rsqrt),
    "reciprocal": UnaryMath(_reciprocal), "abs": UnaryMath(_abs), "neg": UnaryMath(_neg),
    "sigmoid": UnaryMath(_sigmoid, widens=True), "tanh": UnaryMath(_tanh, widens=True),
    "erf": UnaryMath(_erf, work=2, widens=True, consts=ERF_P[2:] + ERF_Q[1:]),
    "pows": UnaryMath(_pows, work=1, widens=True),
}


# -- Cast: float16 <-> float32 ------------------------------------------------------------------
CAST_DTYPES = ("float16", "float32")


@dataclass(frozen=True)
class CastTiling(Tiling):
    """TilingData of Cast: elements over the cores, then UB tiles of in + out slots."""
    total: int
    src_dtype: str
    dst_dtype: str
    block_factor: int
    block_dim: int
    tile: int
    buffer_num: int


def check_cast(src_dtype, dst_dtype) -> tuple:
    src = check_float("Cast", "input", src_dtype)
    if str(dst_dtype) not in CAST_DTYPES:
        raise ShapeError(f"Cast: dst_type {dst_dtype!r} is not one of {CAST_DTYPES} (the simulator's "
                         f"vector unit has no bfloat16: npulab.lang holds numpy dtypes)")
    return src, np.dtype(dst_dtype)


def cast_tiling(n: int, src_dtype, dst_dtype, chip=DEFAULT_CHIP, buffer_num: int = BUFFER_NUM) -> CastTiling:
    """Blocks of whole 32-byte blocks of the wider dtype, tiles of 1/TILES_PER_BLOCK of a block."""
    chip = get_chip(chip)
    src, dst = check_cast(src_dtype, dst_dtype)
    if n < 1:
        raise ShapeError(f"Cast: need at least one element, got {n}")
    per_block = BLOCK_BYTES // min(src.itemsize, dst.itemsize)
    block_factor = round_up(ceil_div(n, chip.cores_for("aiv")), per_block)
    per_elem = buffer_num * (src.itemsize + dst.itemsize)
    fit = (chip.buffers.ub - 8 * BLOCK_BYTES) // per_elem // per_block * per_block
    tile = min(fit, round_up(ceil_div(block_factor, TILES_PER_BLOCK), per_block))
    return CastTiling(n, src.name, dst.name, block_factor, ceil_div(n, block_factor), tile, buffer_num)


class KernelCast:
    """One block of y = cast(x): CopyIn -> Cast (round to nearest even) -> CopyOut."""

    def __init__(self, x, y, t: CastTiling):
        self.t = t
        start = get_block_idx() * t.block_factor
        self.length = min(t.block_factor, t.total - start)
        self.x_gm, self.y_gm = x[start: start + self.length], y[start: start + self.length]
        self.src, self.dst = np.dtype(t.src_dtype), np.dtype(t.dst_dtype)
        self.pipe = TPipe()
        self.in_x, self.out_y = Queue(VECIN, "in_x"), Queue(VECOUT, "out_y")
        self.pipe.init_buffer(self.in_x, t.buffer_num, t.tile * self.src.itemsize)
        self.pipe.init_buffer(self.out_y, t.buffer_num, t.tile * self.dst.itemsize)

    def process(self):
        start = 0
        for n in ramp_tiles(self.length, self.t.tile, BLOCK_BYTES // min(self.src.itemsize, self.dst.itemsize)):
            x = self.in_x.alloc_tensor(self.src)
            copy_elements(x, self.x_gm[start:], n)
            self.in_x.enque(x)
            x = self.in_x.deque()
            y = self.out_y.alloc_tensor(self.dst)
            lang.cast(y, x, "rint", n)
            self.in_x.free_tensor(x)
            self.out_y.enque(y)
            y = self.out_y.deque()
            copy_elements(self.y_gm[start:], y, n)
            self.out_y.free_tensor(y)
            start += n


def cast_kernel(x, y, t: CastTiling) -> None:
    KernelCast(x, y, t).process()


def launch_cast(x: np.ndarray, t: CastTiling, chip=DEFAULT_CHIP, mode="functional"):
    """Run Cast with a tiling from :func:`cast_tiling`. Returns (y, trace)."""
    return launch_vector(cast_kernel, [x], x.shape, t.dst_dtype, t, chip=chip, mode=mode)


__all__ = ["UNARY", "UnaryMath", "pow_plan", "ERF_P", "ERF_Q", "ERF_CLIP", "POW_INT_MAX", "CastTiling",
           "cast_tiling", "launch_cast", "CAST_DTYPES"]
