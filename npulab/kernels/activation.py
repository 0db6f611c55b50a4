"""Activations on the vector unit (ops-nn's activation family): ReLU, GELU (erf and tanh forms),
SiLU (Swish with beta = 1).

What you learn here (lab 07):

* an activation is Add's kernel with one input: CopyIn -> Compute -> CopyOut over queues,
  elements split over the cores and into UB tiles;
* the vector unit has exp but no erf or tanh: GELU is built from what it has, and every
  extra instruction is a pass over the tile. The tanh form, 0.5 x (1 + tanh(z)), equals
  x * sigmoid(2z) = x / (1 + exp(-2z)), z = sqrt(2/pi) (x + 0.044715 x^3): 7 instructions.
  The erf form, x * Phi(x), uses Abramowitz & Stegun 7.1.26 for erf
  (|error| <= 1.5e-7): Phi(x) = 1 - q(|x|) for x >= 0 and q(|x|) for x < 0, with
  q(a) = 0.5 P(t) exp(-a^2 / 2), t = 1 / (1 + p a / sqrt 2) and P a degree-5 polynomial
  without constant term; so gelu(x) = relu(x) - |x| q(|x|), no sign or select needed:
  20 instructions, two of them transcendental (reciprocal, exp) that cost more a repeat.
* ReLU is exact in any dtype and runs on the input dtype; GELU and SiLU widen fp16 tiles to
  fp32 (cast) and round once at the end, as ops-nn's fp16 kernels do.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from .. import lang
from ..chips import get_chip
from ..errors import ShapeError
from ..lang import VECCALC, VECIN, VECOUT, Pipe, Queue, TBuf, get_block_idx
from .norm import BLOCK_BYTES, F32, _round_up, check_float, copy

# split a block at least this finely: every GM copy pays a start-up (200 cycles on the 910),
# so fewer tiles would be better, but the last tile's compute and write-back cannot overlap
# anything; ~10 balances the two at BERT sizes on the 910 (bench_vector)
MIN_TILES_PER_BLOCK = 10
ACTIVATIONS = ("relu", "gelu_erf", "gelu_tanh", "silu")
WORK_TILES = {"relu": 0, "gelu_erf": 3, "gelu_tanh": 1, "silu": 1}    # fp32 scratch tiles
WIDENS = {"relu": False, "gelu_erf": True, "gelu_tanh": True, "silu": True}

# Abramowitz & Stegun 7.1.26: erf(z) = 1 - (a1 t + ... + a5 t^5) exp(-z^2), t = 1 / (1 + p z)
AS_P = 0.3275911
AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
GELU_TANH_C = math.sqrt(2.0 / math.pi)
GELU_TANH_K = 0.044715


@dataclass(frozen=True)
class ActivationTiling:
    """TilingData of an elementwise activation."""
    total: int
    dtype: str
    activation: str
    block_factor: int   # elements a block
    block_dim: int
    tile: int           # elements a UB tile
    buffer_num: int

    def to_dict(self) -> dict:
        return asdict(self)


def activation_tiling(n: int, dtype, activation: str, chip="910", buffer_num: int = 2,
                      tile: int | None = None) -> ActivationTiling:
    """Elements over the cores, then UB tiles of in + out slots (``buffer_num`` each) and the
    activation's fp32 scratch tiles."""
    chip = get_chip(chip)
    if activation not in ACTIVATIONS:
        raise ShapeError(f"activation {activation!r} is not one of {ACTIVATIONS}")
    dt = check_float(activation, "input", dtype)
    if n < 1:
        raise ShapeError(f"{activation}: need at least one element, got {n}")
    per_block = BLOCK_BYTES // dt.itemsize
    wide = WIDENS[activation] and dt != F32
    block_factor = _round_up(-(-n // chip.cores_for("aiv")), per_block)
    block_dim = -(-n // block_factor)
    per_elem = 2 * buffer_num * dt.itemsize + (WORK_TILES[activation] + wide) * 4
    fit = (chip.buffers.ub - 8 * BLOCK_BYTES) // per_elem // per_block * per_block
    if tile is None:
        tile = min(fit, _round_up(-(-block_factor // MIN_TILES_PER_BLOCK), per_block))
    elif tile <= 0 or tile % per_block or tile > fit:
        raise ShapeError(f"{activation}: tile={tile} must be a positive multiple of {per_block} "
                         f"elements and at most {fit} (what fits the UB)")
    return ActivationTiling(n, dt.name, activation, block_factor, block_dim, tile, buffer_num)


class KernelActivation:
    """One block of y = f(x)."""

    def __init__(self, x, y, t: ActivationTiling):
        self.t = t
        start = get_block_idx() * t.block_factor
        self.length = min(t.block_factor, t.total - start)
        self.x_gm, self.y_gm = x[start: start + self.length], y[start: start + self.length]
        self.dtype = np.dtype(t.dtype)
        self.wide = WIDENS[t.activation] and self.dtype != F32
        self.pipe = Pipe()
        self.in_x, self.out_y = Queue(VECIN, "in_x"), Queue(VECOUT, "out_y")
        self.pipe.init_buffer(self.in_x, t.buffer_num, t.tile * self.dtype.itemsize)
        self.pipe.init_buffer(self.out_y, t.buffer_num, t.tile * self.dtype.itemsize)
        self.work = []
        for k in range(WORK_TILES[t.activation] + self.wide):
            b = TBuf(VECCALC, f"work{k}")
            self.pipe.init_buffer(b, t.tile * 4)
            self.work.append(b.get(F32))
        self.fn = getattr(self, t.activation)

    def process(self):
        for start in range(0, self.length, self.t.tile):
            n = min(self.t.tile, self.length - start)
            x = self.in_x.alloc_tensor(self.dtype)
            copy(x, self.x_gm[start:], n)
            self.in_x.enque(x)
            self.compute(n)
            y = self.out_y.deque()
            copy(self.y_gm[start:], y, n)
            self.out_y.free_tensor(y)

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
        """x / (1 + exp(-2 c x (1 + k x^2)))."""
        t = self.work[0]
        lang.mul(t, x, x, n)
        lang.muls(t, t, -2.0 * GELU_TANH_C * GELU_TANH_K, n)
        lang.adds(t, t, -2.0 * GELU_TANH_C, n)
        lang.mul(t, t, x, n)
        lang.exp(t, t, n)
        lang.adds(t, t, 1.0, n)
        lang.div(dst, x, t, n)

    def gelu_erf(self, dst, x, n):
        """relu(x) - |x| * 0.5 * P(t) * exp(-x^2 / 2), t = 1 / (1 + p |x| / sqrt 2)."""
        a, t, h = self.work[0], self.work[1], self.work[2]
        lang.abs(a, x, n)
        lang.muls(t, a, AS_P / math.sqrt(2.0), n)
        lang.adds(t, t, 1.0, n)
        lang.reciprocal(t, t, n)
        lang.muls(h, t, 0.5 * AS_A[4], n)                  # Horner, with the 0.5 folded in
        for coef in reversed(AS_A[:4]):
            lang.adds(h, h, 0.5 * coef, n)
            lang.mul(h, h, t, n)
        lang.mul(t, x, x, n)
        lang.muls(t, t, -0.5, n)
        lang.exp(t, t, n)
        lang.mul(h, h, t, n)                               # q(|x|)
        lang.mul(h, h, a, n)                               # |x| q(|x|)
        lang.relu(a, x, n)
        lang.sub(dst, a, h, n)


def activation_kernel(x, y, t: ActivationTiling) -> None:
    KernelActivation(x, y, t).process()


def launch_activation(x: np.ndarray, t: ActivationTiling, chip="910", mode="functional"):
    """Run an activation with a tiling the host made. Returns (y, trace)."""
    y = np.zeros_like(x)
    outs, trace = lang.launch(activation_kernel, t.block_dim, np.ascontiguousarray(x).reshape(-1),
                              y.reshape(-1), t, chip=chip, mode=mode, core_type="aiv")
    return (outs[1].reshape(x.shape) if outs[1] is not None else None), trace
