"""BatchNorm (inference) on the vector unit (ops-nn ``norm/batch_norm_v3``, simplified):
y[n, c] = x[n, c] * a[c] + b[c] with a = weight / sqrt(var + eps), b = bias - mean * a, a
work-item kernel over (image, channels, plane elements) tiles."""
from __future__ import annotations

from dataclasses import dataclass

from ... import lang
from ...arch import BLOCK_BYTES, DEFAULT_CHIP, F32, ceil_div, round_up
from ...chips import get_chip
from ...errors import ShapeError
from ...lang import VECCALC, VECIN, Queue, TBuf
from ..tiling_data import Tiling
from ..vector_base import check_float, copy_elements, launch_vector, setup_item_kernel


@dataclass(frozen=True)
class BatchNormTiling(Tiling):
    """NCHW viewed as N x C planes of H*W; a tile = one image, ``tile_c`` channels, ``tile_hw``
    elements of each plane (rows start on 32-byte blocks in UB: ``row_stride``)."""
    n: int
    c: int
    hw: int
    dtype: str
    tile_c: int          # channels a tile (a multiple of 8, or all of C)
    tile_hw: int         # plane elements a tile
    row_stride: int      # UB elements between the rows of a tile (tile_hw rounded up to a block)
    work_items: int      # N x ceil(C / tile_c) x ceil(HW / tile_hw)
    items_per_block: int
    block_dim: int
    buffer_num: int


def batch_norm_tiling(n: int, c: int, hw: int, dtype, chip=DEFAULT_CHIP, buffer_num: int = 2) -> BatchNormTiling:
    chip = get_chip(chip)
    dt = check_float("BatchNorm", "input", dtype)
    if min(n, c, hw) < 1:
        raise ShapeError(f"BatchNorm: empty input (N, C, H*W) = ({n}, {c}, {hw})")
    per_block = BLOCK_BYTES // dt.itemsize
    c_al = round_up(c, 8)
    fixed = 4 * round_up(c * dt.itemsize, BLOCK_BYTES) + 6 * c_al * 4 + 16 * BLOCK_BYTES
    free = chip.buffers.ub - fixed
    per_elem = 2 * buffer_num * dt.itemsize + (4 if dt != F32 else 0)
    if free < 8 * per_block * per_elem:
        raise ShapeError(f"BatchNorm: {c} channels need {fixed:,} B of UB for the statistics and "
                         f"chip '{chip.name}' has {chip.buffers.ub:,} B")
    elems = free // per_elem                          # tile_c x row_stride elements at most
    hw_al = round_up(hw, per_block)
    tile_c = c if c * hw_al <= elems else max(8, min(c, elems // hw_al) // 8 * 8)
    if tile_c > c:
        tile_c = c
    tile_hw = hw if tile_c * hw_al <= elems else max(per_block, (elems // tile_c) // per_block * per_block)
    row_stride = round_up(tile_hw, per_block)
    items = n * ceil_div(c, tile_c) * ceil_div(hw, tile_hw)
    ipb = ceil_div(items, chip.cores_for("aiv"))
    return BatchNormTiling(n, c, hw, dt.name, tile_c, tile_hw, row_stride, items, ipb,
                           ceil_div(items, ipb), buffer_num)


class KernelBatchNorm:
    """y[n, c] = x[n, c] * a[c] + b[c], a = weight / sqrt(var + eps), b = bias - mean * a
    (a and b computed on the vector unit once a block)."""

    def __init__(self, x, mean, var, weight, bias, y, t: BatchNormTiling, eps: float):
        self.eps = eps
        setup_item_kernel(self, x, y, t, t.tile_c * t.row_stride)
        self.params(mean, var, weight, bias)

    def params(self, mean, var, weight, bias):
        c = self.t.c
        item = self.dtype.itemsize
        span = round_up(c * item, BLOCK_BYTES) // item
        c8 = round_up(c, 8)
        q = Queue(VECIN, "in_stats")
        self.pipe.init_buffer(q, 1, 4 * span * item)
        raw = q.alloc_tensor(self.dtype)
        for k, g in enumerate((mean, var, weight, bias)):
            if g is not None:
                copy_elements(raw[k * span:], g, c)
        q.enque(raw)
        raw = q.deque()
        buf = TBuf(VECCALC, "scale_shift")
        self.pipe.init_buffer(buf, 6 * c8 * 4)
        p = buf.get(F32)
        m32, v32, a, b, w32, b32 = (p[k * c8:] for k in range(6))

        def widen(dst, k):                                       # parameter k as fp32
            if self.wide:
                lang.cast(dst, raw[k * span:], "none", c)
            else:
                lang.adds(dst, raw[k * span:], 0.0, c)
        widen(m32, 0)
        widen(v32, 1)
        lang.adds(v32, v32, self.eps, c)
        lang.sqrt(v32, v32, c)
        lang.reciprocal(a, v32, c)                                # a = 1 / sqrt(var + eps)
        if weight is not None:
            widen(w32, 2)
            lang.mul(a, a, w32, c)                                # a = weight / sqrt(var + eps)
        lang.mul(b, m32, a, c)
        lang.muls(b, b, -1.0, c)                                  # b = -mean * a
        if bias is not None:
            widen(b32, 3)
            lang.add(b, b, b32, c)                                # b = bias - mean * a
        q.free_tensor(raw)
        self.a, self.b = a, b

    def _item(self, k):
        t = self.t
        nc = ceil_div(t.c, t.tile_c)
        nh = ceil_div(t.hw, t.tile_hw)
        n, rest = divmod(k, nc * nh)
        ci, hi = divmod(rest, nh)
        c0, h0 = ci * t.tile_c, hi * t.tile_hw
        return n, c0, min(t.tile_c, t.c - c0), h0, min(t.tile_hw, t.hw - h0)

    def process(self):
        t = self.t
        for k in range(self.first, self.first + self.count):
            n, c0, nc, h0, nh = self._item(k)
            base = (n * t.c + c0) * t.hw + h0
            x = self.in_x.alloc_tensor(self.dtype)
            if nh == t.hw and t.row_stride == t.hw:
                copy_elements(x, self.x_gm[base:], nc * t.hw)               # whole planes: one copy
            else:
                for r in range(nc):
                    copy_elements(x[r * t.row_stride:], self.x_gm[base + r * t.hw:], nh)
            self.in_x.enque(x)
            x = self.in_x.deque()
            y = self.out_y.alloc_tensor(self.dtype)
            src, dst = (self.x32, self.x32) if self.wide else (x, y)
            if self.wide:
                lang.cast(self.x32, x, "none", (nc - 1) * t.row_stride + nh)
            lang.mul_per_row(dst, src, self.a[c0:], nc, nh, t.row_stride)
            lang.add_per_row(dst, dst, self.b[c0:], nc, nh, t.row_stride)
            if self.wide:
                lang.cast(y, self.x32, "rint", (nc - 1) * t.row_stride + nh)
            self.in_x.free_tensor(x)
            self.out_y.enque(y)
            y = self.out_y.deque()
            if nh == t.hw and t.row_stride == t.hw:
                copy_elements(self.y_gm[base:], y, nc * t.hw)
            else:
                for r in range(nc):
                    copy_elements(self.y_gm[base + r * t.hw:], y[r * t.row_stride:], nh)
            self.out_y.free_tensor(y)


def batch_norm_kernel(x, mean, var, weight, bias, y, t: BatchNormTiling, eps: float) -> None:
    KernelBatchNorm(x, mean, var, weight, bias, y, t, eps).process()


def launch_batch_norm(x, mean, var, weight, bias, t: BatchNormTiling, eps: float, chip=DEFAULT_CHIP,
                      mode="functional"):
    """x: (N, C, *spatial). Returns (y, trace)."""
    return launch_vector(batch_norm_kernel, [x, mean, var, weight, bias], x.shape, x.dtype, t, float(eps),
                         chip=chip, mode=mode)


__all__ = ["BatchNormTiling", "batch_norm_tiling", "KernelBatchNorm", "batch_norm_kernel", "launch_batch_norm"]
