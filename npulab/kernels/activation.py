"""Activations on the vector unit (ops-nn's activation family): ReLU, GELU (erf and tanh forms),
SiLU (Swish with beta = 1).

What you learn here (lab 07):

* an activation is Add's kernel with one input: CopyIn -> Compute -> CopyOut over queues,
  elements split over the cores and into UB tiles;
* the vector unit has exp but no erf or tanh: GELU is built from what it has, and every
  extra instruction is a pass over the tile. The tanh form, 0.5 x (1 + tanh(z)), equals
  x * sigmoid(2z) = x / (1 + exp(-2z)), z = sqrt(2/pi) (x + 0.044715 x^3): 6 instructions,
  the polynomial's Horner step one ``FusedMulAdd``. The erf form, x * Phi(x), writes Phi as a
  sigmoid too: the logit of the normal CDF is odd, x q(x^2), and a degree-4 q fitted to it
  (``GELU_ERF_Q``) gives x / (1 + exp(-x q(x^2))) within 0.63 of the fp32 tolerance:
  9 instructions, two of them transcendental (exp, div) that cost more a repeat.
* ReLU is exact in any dtype and runs on the input dtype; GELU-erf and SiLU widen fp16 tiles
  to fp32 (cast) and round once at the end, as ops-nn's fp16 kernels do; fp16 GELU-tanh runs
  in fp16, as Ascend C's ``Gelu<half>`` does unless asked for high precision.
* tiles: three queue slots and smaller tiles at both ends of a block (``ramp_tiles``) keep
  the copies ahead of the vector unit and shorten the pipeline's fill and drain.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from .. import lang
from ..chips import get_chip
from ..errors import ShapeError
from ..lang import vector as V
from ..lang.context import current
from ..lang import VECCALC, VECIN, VECOUT, Pipe, Queue, TBuf, get_block_idx
from .norm import BLOCK_BYTES, F32, _round_up, check_float, copy, ramp_tiles

# split a block at least this finely: every tile pays the start-up of its vector instructions,
# so fewer tiles would be better, but the first tile's read and the last tile's compute and
# write-back cannot overlap anything; ~16 balances the two at BERT sizes (bench_vector)
MIN_TILES_PER_BLOCK = 16
# three slots a queue (triple buffering): a read takes its copy start-up on top of its bytes,
# so with two slots the next read often starts too late to finish before the vector unit
# wants it. In Ascend C the slot count is InitBuffer's ``num`` (uint8_t; 2 = double buffering;
# every queue's num in a kernel adds up to at most 64: CANN API reference, TPipe::InitBuffer).
BUFFER_NUM = 3
ACTIVATIONS = ("relu", "gelu_erf", "gelu_tanh", "silu")
WORK_TILES = {"relu": 0, "gelu_erf": 2, "gelu_tanh": 1, "silu": 1}    # fp32 scratch tiles
WIDENS = {"relu": False, "gelu_erf": True, "gelu_tanh": True, "silu": True}

GELU_TANH_C = math.sqrt(2.0 / math.pi)
GELU_TANH_K = 0.044715
# GELU, exact form: log(Phi(x) / (1 - Phi(x))) ~ x q(x^2), q(s) = sum q[k] s^k, a least-squares
# fit weighted by the fp32 tolerance of x Phi(x), on |x| <= 5 (lab 07 shows the fit)
GELU_ERF_Q = (1.5957448166524542, 0.0727729998005671, -0.00016934435116884513,
              -7.456314370435898e-05, 2.9169895247963726e-06)
CONSTS = {"gelu_tanh": (-2.0 * GELU_TANH_C,),          # filled once a block, see KernelActivation
          "gelu_erf": tuple(-GELU_ERF_Q[k] for k in (2, 1, 0))}


@dataclass(frozen=True)
class ActivationTiling:
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

    def to_dict(self) -> dict:
        return asdict(self)


def activation_tiling(n: int, dtype, activation: str, chip="910", buffer_num: int = BUFFER_NUM,
                      tile: int | None = None, compute_dtype=None, ramp: int = 2) -> ActivationTiling:
    """Elements over the cores, then UB tiles of in + out slots (``buffer_num`` each) and the
    activation's scratch tiles (in ``compute_dtype``).

    ``compute_dtype``: the dtype the formula runs in. Default: the input dtype, except fp16
    GELU-erf and SiLU, which widen to fp32 (as ops-nn's fp16 kernels do). fp16 GELU-tanh runs
    in fp16 by default, as Ascend C's own ``Gelu<half>`` does unless its ``highPrecision``
    template flag asks for the widened form (asc-devkit
    impl/adv_api/detail/activation/gelu/gelu_impl.h); ``compute_dtype="float32"`` is that
    high-precision form."""
    chip = get_chip(chip)
    if activation not in ACTIVATIONS:
        raise ShapeError(f"activation {activation!r} is not one of {ACTIVATIONS}")
    dt = check_float(activation, "input", dtype)
    if n < 1:
        raise ShapeError(f"{activation}: need at least one element, got {n}")
    if compute_dtype is None:
        if dt == F32 or not WIDENS[activation]:
            cdt = dt
        elif activation == "gelu_tanh":
            cdt = dt
        else:
            cdt = F32
    else:
        cdt = check_float(activation, "compute_dtype", compute_dtype)
        if cdt.itemsize < dt.itemsize:
            raise ShapeError(f"{activation}: compute_dtype {cdt} is narrower than the input {dt}")
    per_block = BLOCK_BYTES // dt.itemsize
    wide = cdt != dt
    block_factor = _round_up(-(-n // chip.cores_for("aiv")), per_block)
    block_dim = -(-n // block_factor)
    per_elem = 2 * buffer_num * dt.itemsize + (WORK_TILES[activation] + wide) * cdt.itemsize
    consts = len(CONSTS.get(activation, ())) * chip.vector.repeat_bytes     # one repeat a constant
    fit = (chip.buffers.ub - 8 * BLOCK_BYTES - consts) // per_elem // per_block * per_block
    if tile is None:
        tile = min(fit, _round_up(-(-block_factor // MIN_TILES_PER_BLOCK), per_block))
    elif tile <= 0 or tile % per_block or tile > fit:
        raise ShapeError(f"{activation}: tile={tile} must be a positive multiple of {per_block} "
                         f"elements and at most {fit} (what fits the UB)")
    return ActivationTiling(n, dt.name, activation, block_factor, block_dim, tile, buffer_num,
                            cdt.name, int(ramp))


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
        self.pipe = Pipe()
        self.in_x, self.out_y = Queue(VECIN, "in_x"), Queue(VECOUT, "out_y")
        self.pipe.init_buffer(self.in_x, t.buffer_num, t.tile * self.dtype.itemsize)
        self.pipe.init_buffer(self.out_y, t.buffer_num, t.tile * self.dtype.itemsize)
        self.work = []
        for k in range(WORK_TILES[t.activation] + self.wide):
            b = TBuf(VECCALC, f"work{k}")
            self.pipe.init_buffer(b, t.tile * self.cdt.itemsize)
            self.work.append(b.get(self.cdt))
        self.fn = getattr(self, t.activation)
        consts = CONSTS.get(t.activation, ())
        if consts:                                   # one repeat of each constant, for FusedMulAdd
            rb = current().device.chip.vector.repeat_bytes
            per = rb // self.cdt.itemsize
            b = TBuf(VECCALC, "consts")
            self.pipe.init_buffer(b, len(consts) * rb)
            c = b.get(self.cdt)
            self.consts = [c[k * per:] for k in range(len(consts))]
            for k, v in enumerate(consts):
                lang.duplicate(self.consts[k], v, per)

    def process(self):
        start = 0
        for n in ramp_tiles(self.length, self.t.tile, BLOCK_BYTES // self.dtype.itemsize, self.t.ramp):
            x = self.in_x.alloc_tensor(self.dtype)
            copy(x, self.x_gm[start:], n)
            self.in_x.enque(x)
            self.compute(n)
            y = self.out_y.deque()
            copy(self.y_gm[start:], y, n)
            self.out_y.free_tensor(y)
            start += n

    def compute(self, n):
        x = self.in_x.deque()
        y = self.out_y.alloc_tensor(self.dtype)
        if self.wide:
            x32 = self.work[-1]
            lang.cast(x32, x, "none", n)
            self.fn(x32, x32, n)
            lang.cast(y, x32, "rint", n)
        else:
            self.fn(y, x, n)
        self.out_y.enque(y)
        self.in_x.free_tensor(x)

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
        """x * Phi(x) = x / (1 + exp(-x q(x^2))): the logit of the normal CDF, log(Phi / (1 -
        Phi)), is odd, x q(x^2), and a degree-4 q fitted to it on |x| <= 5 (GELU_ERF_Q) keeps
        x Phi(x) within 0.63 of the fp32 tolerance on |x| <= 9 (and q > 0 everywhere, so the
        form saturates to x and to -0 outside). Horner on s = x^2 with FusedMulAdd: 9
        instructions, two transcendental (exp, div), the tanh form's cost plus three passes."""
        s, h = self.work[0], self.work[1]
        q = GELU_ERF_Q
        lang.mul(s, x, x, n)
        lang.muls(h, s, -q[4], n)
        lang.adds(h, h, -q[3], n)
        for k in (2, 1, 0):
            V.fused_mul_add_const(h, s, self.consts[2 - k], n)   # h = h s - q[k]
        lang.mul(h, h, x, n)                                    # -x q(x^2)
        lang.exp(h, h, n)
        lang.adds(h, h, 1.0, n)
        lang.div(dst, x, h, n)


def activation_kernel(x, y, t: ActivationTiling) -> None:
    KernelActivation(x, y, t).process()


def launch_activation(x: np.ndarray, t: ActivationTiling, chip="910", mode="functional"):
    """Run an activation with a tiling the host made. Returns (y, trace)."""
    y = np.zeros_like(x)
    outs, trace = lang.launch(activation_kernel, t.block_dim, np.ascontiguousarray(x).reshape(-1),
                              y.reshape(-1), t, chip=chip, mode=mode, core_type="aiv")
    return (outs[1].reshape(x.shape) if outs[1] is not None else None), trace
