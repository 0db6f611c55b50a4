"""Activations on the vector unit (ops-nn's activation family): ReLU, GELU (erf and tanh forms),
SiLU (Swish with beta = 1).

What you learn here (lab 07):

* an activation is Add's kernel with one input: CopyIn -> Compute -> CopyOut over queues,
  elements split over the cores and into UB tiles;
* the vector unit has exp but no erf or tanh: GELU is built from what it has, and every
  extra instruction is a pass over the tile. The tanh form, 0.5 x (1 + tanh(z)), equals
  x * sigmoid(2z) = x / (1 + exp(-2z)), z = sqrt(2/pi) (x + 0.044715 x^3): 6 instructions,
  the polynomial's Horner step one ``FusedMulAdd``. The erf form, x * Phi(x), is
  relu(x) - |x| (1 - Phi(|x|)), and the normal tail 1 - Phi(a) is exp of a smooth function
  of a = |x|: a degree-5 polynomial fitted to log(1 - Phi(a)) (``GELU_ERF_E``) keeps the
  result within 0.05 of the fp32 tolerance (in exact arithmetic): 10 instructions, one
  transcendental (exp), the tail added by one ``MulAddDst``; fp16 arithmetic needs only
  degree 3 (``GELU_ERF_E16``, 8 instructions).
* ReLU is exact in any dtype and runs on the input dtype; SiLU widens fp16 tiles to fp32
  (cast) and rounds once at the end, as ops-nn's fp16 kernels do; fp16 GELU-tanh runs in
  fp16, as Ascend C's ``Gelu<half>`` does unless asked for high precision, and so does fp16
  GELU-erf here, where ops-nn's GeluV2 computes fp16 input in fp32 (every fp16 input checked:
  within 0.18 of the fp16 tolerance; ``compute_dtype="float32"`` is the widened path).
* tiles: three queue slots and smaller tiles at both ends of a block (``ramp_tiles``) keep
  the copies ahead of the vector unit and shorten the pipeline's fill and drain.

The same kernel runs the unary math of :mod:`npulab.kernels.unary` (Exp, Tanh, Erf, Pows, ...):
their formulas join ``ACTIVATIONS``, and ``ActivationTiling.scalar`` carries Pows's exponent.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import lang
from ..arch import BLOCK_BYTES, DEFAULT_CHIP, F32, ceil_div, round_up
from ..chips import get_chip
from ..errors import ArgumentError, ShapeError
from ..lang import VECCALC, VECIN, VECOUT, Queue, TBuf, TPipe, get_block_idx
from ..lang import vector as V
from ..lang.context import current
from .tiling_data import Tiling
from .unary import UNARY
from .vector_base import BUFFER_NUM, TILES_PER_BLOCK, check_float, copy_elements, launch_vector, ramp_tiles

# the activations, then the unary math of kernels.unary (Exp, Tanh, Erf, Pows, ...): one kernel
ACTIVATIONS = ("relu", "gelu_erf", "gelu_tanh", "silu") + tuple(UNARY)
WORK_TILES = {"relu": 0, "gelu_erf": 2, "gelu_tanh": 1, "silu": 1,     # fp32 scratch tiles
              **{k: u.work for k, u in UNARY.items()}}
WIDENS = {"relu": False, "gelu_erf": False, "gelu_tanh": False, "silu": True,   # fp16 default
          **{k: u.widens for k, u in UNARY.items()}}

GELU_TANH_C = math.sqrt(2.0 / math.pi)
GELU_TANH_K = 0.044715
# GELU, exact form: x Phi(x) = relu(x) - |x| (1 - Phi(|x|)), and the log of the normal tail,
# log(1 - Phi(a)) for a >= 0, is smooth: ~ E(a) = sum GELU_ERF_E[k] a^k, a degree-5 fit
# weighted by the fp32 tolerance of the result (iteratively reweighted least squares on
# 0 < a <= 5; lab 07 shows its error). E(0) = -log 2, and E falls below -15 past a = 5 and
# keeps falling (leading coefficient < 0), so the tail term vanishes where it should.
GELU_ERF_E = (-0.6931734828027439, -0.797659160298483, -0.318862701286611, -0.03590159293949015,
              0.004900782677974312, -0.0003265982517276491)
# fp16 arithmetic needs only the fp16 tolerance (2e-3 / 2e-3, 200 times the fp32 one): the same
# fit at degree 3 (on 0 < a <= 3.5) stays within 0.03 of it in exact arithmetic, two Horner
# steps fewer. (An odd degree: with E's leading coefficient < 0 the polynomial is monic in u.)
GELU_ERF_E16 = (-0.6955929632574374, -0.7825405872967685, -0.3460914001746543, -0.017127440839720013)


def monic_tail_poly(e) -> tuple[float, tuple]:
    """(KAPPA, B) for the tail polynomial E (coefficients e[k] of a^k, e[-1] < 0): in
    u = -KAPPA a the polynomial is monic, and 1 / KAPPA folds into the constant:
    E(a) - log(KAPPA) = u^d + B[d-1] u^(d-1) + ... + B[0], so |x| (1 - Phi(|x|)) =
    -u exp(E(a) - log(KAPPA)). Monic: the first Horner step is one Adds."""
    d = len(e) - 1
    if d % 2 == 0 or e[d] >= 0:
        raise ArgumentError(f"the tail polynomial needs an odd degree and a negative leading coefficient, got {e}")
    kappa = (-e[d]) ** (1.0 / d)
    return kappa, tuple([e[0] - math.log(kappa)] + [e[k] * (-1.0 / kappa) ** k for k in range(1, d)])


GELU_ERF_KAPPA, GELU_ERF_B = monic_tail_poly(GELU_ERF_E)
GELU_ERF_KAPPA16, GELU_ERF_B16 = monic_tail_poly(GELU_ERF_E16)
CONSTS = {"gelu_tanh": (-2.0 * GELU_TANH_C,),          # filled once a block, see KernelActivation
          "gelu_erf": GELU_ERF_B[-2::-1],              # B[d-2], ..., B[0]: the FusedMulAdd steps
          **{k: u.consts for k, u in UNARY.items() if u.consts}}


@dataclass(frozen=True)
class ActivationTiling(Tiling):
    """TilingData of an elementwise activation."""
    total: int
    dtype: str
    activation: str
    block_factor: int   # elements a block
    block_dim: int
    tile: int           # elements of the largest UB tile
    buffer_num: int
    compute_dtype: str = "float32"  # the dtype the formula runs in (see activation_tiling)
    ramp: int = 2       # small tiles at both ends of a block (norm.ramp_tiles)
    scalar: float = 0.0  # the formula's number: Pows's exponent (kernels.unary)


def activation_tiling(n: int, dtype, activation: str, chip=DEFAULT_CHIP, buffer_num: int = BUFFER_NUM,
                      tile: int | None = None, compute_dtype=None, ramp: int = 2,
                      scalar: float = 0.0) -> ActivationTiling:
    """Elements over the cores, then UB tiles of in + out slots (``buffer_num`` each) and the
    activation's scratch tiles (in ``compute_dtype``).

    ``compute_dtype``: the dtype the formula runs in. Default: the input dtype, except fp16
    SiLU, which widens to fp32 (as ops-nn's fp16 kernels do). fp16 GELU-tanh runs in fp16 by
    default, as Ascend C's own ``Gelu<half>`` does unless its ``highPrecision`` template flag
    asks for the widened form (asc-devkit impl/adv_api/detail/activation/gelu/gelu_impl.h);
    ``compute_dtype="float32"`` is that high-precision form. fp16 GELU-erf also runs in fp16
    by default, unlike ops-nn's GeluV2, which widens fp16 to fp32 (every finite fp16 input
    stays within 0.18 of the fp16 tolerance; tests/kernels/test_activation.py checks them all);
    ``compute_dtype="float32"`` is ops-nn's widened path."""
    chip = get_chip(chip)
    if activation not in ACTIVATIONS:
        raise ShapeError(f"activation {activation!r} is not one of {ACTIVATIONS}")
    dt = check_float(activation, "input", dtype)
    if n < 1:
        raise ShapeError(f"{activation}: need at least one element, got {n}")
    if compute_dtype is None:
        cdt = F32 if WIDENS[activation] else dt
    else:
        cdt = check_float(activation, "compute_dtype", compute_dtype)
        if cdt.itemsize < dt.itemsize:
            raise ShapeError(f"{activation}: compute_dtype {cdt} is narrower than the input {dt}")
    per_block = BLOCK_BYTES // dt.itemsize
    wide = cdt != dt
    block_factor = round_up(ceil_div(n, chip.cores_for("aiv")), per_block)
    block_dim = ceil_div(n, block_factor)
    per_elem = 2 * buffer_num * dt.itemsize + (WORK_TILES[activation] + wide) * cdt.itemsize
    consts = len(CONSTS.get(activation, ())) * chip.vector.repeat_bytes     # one repeat a constant
    fit = (chip.buffers.ub - 8 * BLOCK_BYTES - consts) // per_elem // per_block * per_block
    if tile is None:
        tile = min(fit, round_up(ceil_div(block_factor, TILES_PER_BLOCK), per_block))
    elif tile <= 0 or tile % per_block or tile > fit:
        raise ShapeError(f"{activation}: tile={tile} must be a positive multiple of {per_block} "
                         f"elements and at most {fit} (what fits the UB)")
    return ActivationTiling(n, dt.name, activation, block_factor, block_dim, tile, buffer_num,
                            cdt.name, int(ramp), float(scalar))


class ActivationFormula:
    """The instructions of one activation, ``formula(dst, x, n)`` over n elements in UB (dst may
    be x), with its scratch tiles of ``tile`` elements of ``cdt`` and its constants (one repeat
    each, filled once a block) made in ``pipe``. The vector epilogue of any kernel runs it:
    :class:`KernelActivation` here, the AIVs of the fused matmul (kernels.fused_matmul).
    ``scalar``: the number a formula takes (Pows's exponent)."""

    def __init__(self, pipe: TPipe, activation: str, cdt, tile: int, scalar: float = 0.0):
        self.activation, self.cdt, self.scalar = activation, np.dtype(cdt), float(scalar)
        self.work = []
        for k in range(WORK_TILES[activation]):
            b = TBuf(VECCALC, f"work{k}")
            pipe.init_buffer(b, tile * self.cdt.itemsize)
            self.work.append(b.get(self.cdt))
        self.fn = (lambda dst, x, n: UNARY[activation].fn(self, dst, x, n)) if activation in UNARY \
            else getattr(self, activation)
        consts = CONSTS.get(activation, ())
        if activation == "gelu_erf":
            self.kappa, self.poly = ((GELU_ERF_KAPPA16, GELU_ERF_B16) if self.cdt == np.float16
                                     else (GELU_ERF_KAPPA, GELU_ERF_B))
            consts = self.poly[-2::-1]
        if consts:                                   # one repeat of each constant, for FusedMulAdd
            rb = current().device.chip.vector.repeat_bytes
            per = rb // self.cdt.itemsize
            b = TBuf(VECCALC, "consts")
            pipe.init_buffer(b, len(consts) * rb)
            c = b.get(self.cdt)
            self.consts = [c[k * per:] for k in range(len(consts))]
            for k, v in enumerate(consts):
                lang.duplicate(self.consts[k], v, per)

    @staticmethod
    def ub_bytes(activation: str, cdt, tile: int, repeat_bytes: int) -> int:
        """UB the formula takes: its scratch tiles and its constants."""
        return WORK_TILES[activation] * tile * np.dtype(cdt).itemsize + len(CONSTS.get(activation, ())) * repeat_bytes

    def __call__(self, dst, x, n):
        self.fn(dst, x, n)

    # -- the activations: dst = f(x) over n elements (dst may be x) -------------------------
    def relu(self, dst, x, n):
        lang.relu(dst, x, n)

    def silu(self, dst, x, n):
        """x / (1 + exp(-x))."""
        t = self.work[0]
        lang.muls(t, x, -1.0, n)
        lang.exp(t, t, n)
        lang.adds(t, t, 1.0, n)
        lang.div(dst, x, t, n)

    def gelu_tanh(self, dst, x, n):
        """x / (1 + exp(-2 c x (1 + k x^2))): 6 instructions, the polynomial's Horner step
        (-2ck x) * x - 2c as one FusedMulAdd with a constant."""
        t = self.work[0]
        lang.muls(t, x, -2.0 * GELU_TANH_C * GELU_TANH_K, n)
        V.fused_mul_add_const(t, x, self.consts[0], n)          # -2c k x^2 - 2c
        lang.mul(t, t, x, n)
        lang.exp(t, t, n)
        lang.adds(t, t, 1.0, n)
        lang.div(dst, x, t, n)

    def gelu_erf(self, dst, x, n):
        """x * Phi(x) = relu(x) - |x| (1 - Phi(|x|)), the normal tail 1 - Phi(a) = exp(E(a)) with
        E a polynomial evaluated by Horner in u = -KAPPA |x| (monic, see monic_tail_poly); the
        tail is added with one MulAddDst, relu(x) + u * exp(E - log KAPPA). fp32 arithmetic:
        degree 5 (GELU_ERF_E), 10 instructions, 13 passes (exp costs four), within 0.14 of the
        fp32 tolerance on the tests' grids; fp16 arithmetic: degree 3 (GELU_ERF_E16), 8
        instructions, 11 passes, within 0.18 of the fp16 tolerance on every finite fp16 input.
        One transcendental (exp). Past |x| = 5 the tail is below 1e-6 and then 0; at x = +-inf
        the form gives NaN (inf * 0), where torch gives inf and NaN."""
        u, h = self.work[0], self.work[1]
        lang.abs(u, x, n)
        lang.muls(u, u, -self.kappa, n)                         # u = -KAPPA |x| <= 0
        lang.adds(h, u, self.poly[-1], n)                       # h = u + B[d-1]
        for c in self.consts:
            V.fused_mul_add_const(h, u, c, n)                   # h = h u + B[k], k = d-2 .. 0
        lang.exp(h, h, n)                                       # (1 - Phi(|x|)) / KAPPA
        lang.relu(dst, x, n)
        V.mul_add_dst(dst, u, h, n)                             # relu(x) - |x| (1 - Phi(|x|))


class KernelActivation:
    """One block of y = f(x)."""

    def __init__(self, x, y, t: ActivationTiling):
        self.t = t
        start = get_block_idx() * t.block_factor
        self.length = min(t.block_factor, t.total - start)
        self.x_gm, self.y_gm = x[start: start + self.length], y[start: start + self.length]
        self.dtype = np.dtype(t.dtype)
        self.cdt = np.dtype(t.compute_dtype)
        self.wide = self.cdt != self.dtype
        self.pipe = TPipe()
        self.in_x, self.out_y = Queue(VECIN, "in_x"), Queue(VECOUT, "out_y")
        self.pipe.init_buffer(self.in_x, t.buffer_num, t.tile * self.dtype.itemsize)
        self.pipe.init_buffer(self.out_y, t.buffer_num, t.tile * self.dtype.itemsize)
        self.fn = ActivationFormula(self.pipe, t.activation, self.cdt, t.tile, t.scalar)
        if self.wide:
            b = TBuf(VECCALC, f"work{WORK_TILES[t.activation]}")
            self.pipe.init_buffer(b, t.tile * self.cdt.itemsize)
            self.x32 = b.get(self.cdt)

    def process(self):
        start = 0
        for n in ramp_tiles(self.length, self.t.tile, BLOCK_BYTES // self.dtype.itemsize, self.t.ramp):
            x = self.in_x.alloc_tensor(self.dtype)
            copy_elements(x, self.x_gm[start:], n)
            self.in_x.enque(x)
            self.compute(n)
            y = self.out_y.deque()
            copy_elements(self.y_gm[start:], y, n)
            self.out_y.free_tensor(y)
            start += n

    def compute(self, n):
        x = self.in_x.deque()
        y = self.out_y.alloc_tensor(self.dtype)
        if self.wide:
            x32 = self.x32
            lang.cast(x32, x, "none", n)
            self.fn(x32, x32, n)
            lang.cast(y, x32, "rint", n)
        else:
            self.fn(y, x, n)
        self.out_y.enque(y)
        self.in_x.free_tensor(x)


def activation_kernel(x, y, t: ActivationTiling) -> None:
    KernelActivation(x, y, t).process()


def launch_activation(x: np.ndarray, t: ActivationTiling, chip=DEFAULT_CHIP, mode="functional"):
    """Run an activation with a tiling the host made. Returns (y, trace)."""
    return launch_vector(activation_kernel, [x], x.shape, x.dtype, t, chip=chip, mode=mode)
