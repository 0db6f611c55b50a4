"""2-D pooling on the vector unit (ops-nn's pooling family): MaxPool, AvgPool and the fused
AvgPool + Scale, NCHW.

What you learn here (lab 08 uses Pool+Scale):

* a tile is one (n, c) plane, laid out in UB with padding around it: rows ``row_stride``
  elements apart (a 32-byte multiple, so every row copy lands on a block), ``pad_left``
  elements before the data (at least the pool's left padding, rounded to a block). Rows of
  whole 32-byte blocks come in as one strided copy. Padding cells hold -inf (max) or 0
  (average), written by the vector unit once for each buffer slot (the copies never touch
  them);
* the vector unit has no element stride: a window position (kh, kw) picks its elements with
  ``gather``, from byte offsets. The host computes the offsets of (kh, kw) = (0, 0) once (an
  assist tensor, as ops-nn's kernels take); the kernel shifts them by kh * dilation * row_stride
  + kw * dilation for each window position, gathers, and folds with ``max`` or ``add``;
* the average divides by the window size; when padding or ``ceil_mode`` make the divisor vary
  by position, the host passes a table of 1 / divisor, as it does the offsets;
* **Pool + Scale fused**: multiplying the pooled plane by ``scale`` is folded into the
  division (scale / divisor), so the pooled intermediate never goes to GM and costs no extra
  pass.

fp16: max runs in fp16 (exact); average accumulates in fp32 (cast) and rounds once.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import lang
from ..arch import BLOCK_BYTES, DEFAULT_CHIP, F32, ceil_div, round_up
from ..chips import get_chip
from ..errors import ShapeError
from ..lang import VECCALC, VECIN, VECOUT, Queue, TBuf, TPipe, get_block_idx
from .tiling_data import Tiling
from .vector_base import check_float, copy_elements, launch_vector

MODES = ("max", "avg")


def _pair(v, name, what):
    if isinstance(v, (int, np.integer)):
        return int(v), int(v)
    v = tuple(int(a) for a in v)
    if len(v) == 1:
        return v[0], v[0]
    if len(v) != 2:
        raise ShapeError(f"{what}: {name} must be an int or a pair, got {v}")
    return v


def pool_out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """torch's output size: floor or ceil of (size + 2p - d(k-1) - 1) / s, + 1; with ceil_mode
    the last window must start inside the input or its left padding."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (ceil_div(span, s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


@dataclass(frozen=True)
class PoolTiling(Tiling):
    mode: str
    n: int
    c: int
    h: int
    w: int
    kernel: tuple
    stride: tuple
    padding: tuple
    dilation: tuple
    ceil_mode: bool
    count_include_pad: bool
    scale: float
    dtype: str
    oh: int
    ow: int
    pad_left: int          # UB elements before a row's data (>= padding[1], a whole block)
    row_stride: int        # UB elements from row to row
    rows: int              # UB rows of a plane (top padding + H + bottom)
    const_div: float       # scale / divisor when every window has the same divisor, else 0 (table)
    planes_per_block: int
    block_dim: int
    buffer_num: int


def pool_tiling(mode: str, shape, dtype, kernel_size, stride=None, padding=0, dilation=1,
                ceil_mode=False, count_include_pad=True, scale=1.0, chip=DEFAULT_CHIP, buffer_num=2) -> PoolTiling:
    chip = get_chip(chip)
    what = {"max": "max_pool2d", "avg": "avg_pool2d"}[mode]
    dt = check_float(what, "input", dtype)
    if len(shape) != 4:
        raise ShapeError(f"{what}: input must be NCHW (4 dims), got shape {tuple(shape)}")
    n, c, h, w = (int(a) for a in shape)
    kh, kw = _pair(kernel_size, "kernel_size", what)
    sh, sw = _pair(kernel_size if stride is None or stride == () else stride, "stride", what)
    ph, pw = _pair(padding, "padding", what)
    dh, dw = _pair(dilation, "dilation", what)
    if min(kh, kw, sh, sw, dh, dw) < 1:
        raise ShapeError(f"{what}: kernel_size, stride and dilation must be positive, got kernel "
                         f"{(kh, kw)}, stride {(sh, sw)}, dilation {(dh, dw)}")
    if ph < 0 or pw < 0 or 2 * ph > kh or 2 * pw > kw:
        raise ShapeError(f"{what}: padding {(ph, pw)} must be between 0 and half the kernel size {(kh, kw)}")
    if min(n, c, h, w) < 1:
        raise ShapeError(f"{what}: empty input of shape {tuple(shape)}")
    oh = pool_out_size(h, kh, sh, ph, dh, ceil_mode)
    ow = pool_out_size(w, kw, sw, pw, dw, ceil_mode)
    if oh < 1 or ow < 1:
        raise ShapeError(f"{what}: the window {(kh, kw)} (dilation {(dh, dw)}, padding {(ph, pw)}) "
                         f"is larger than the input plane {(h, w)}: output would be {(oh, ow)}")
    per_block = BLOCK_BYTES // dt.itemsize
    pad_left = round_up(pw, per_block)
    need_w = pad_left - pw + (ow - 1) * sw + (kw - 1) * dw + 1
    row_stride = round_up(max(need_w, pad_left + w), per_block)
    rows = max(ph + h, (oh - 1) * sh + (kh - 1) * dh + 1)
    divs = avg_divisors(h, w, oh, ow, (kh, kw), (sh, sw), (ph, pw), count_include_pad) if mode == "avg" else None
    const_div = float(scale) / float(divs.flat[0]) if divs is not None and np.all(divs == divs.flat[0]) else 0.0
    out = oh * ow
    wide = mode == "avg"
    ub = (buffer_num * (rows * row_stride + per_block) * dt.itemsize + buffer_num * out * dt.itemsize
          + 2 * out * 4 + out * dt.itemsize + (out * 4 if wide else 0) + (out * 4 if const_div == 0 and wide else 0)
          + 16 * BLOCK_BYTES)
    if ub > chip.buffers.ub:
        raise ShapeError(f"{what}: one {h}x{w} plane (padded to {rows}x{row_stride}) with its "
                         f"{oh}x{ow} output needs {ub:,} B of UB and chip '{chip.name}' has "
                         f"{chip.buffers.ub:,} B; npulab's pooling kernel holds a whole plane. "
                         f"Use a smaller plane or a chip with a larger UB.")
    planes = n * c
    ppb = ceil_div(planes, chip.cores_for("aiv"))
    return PoolTiling(mode, n, c, h, w, (kh, kw), (sh, sw), (ph, pw), (dh, dw), bool(ceil_mode),
                      bool(count_include_pad), float(scale), dt.name, oh, ow, pad_left, row_stride,
                      rows, const_div, ppb, ceil_div(planes, ppb), buffer_num)


def avg_divisors(h, w, oh, ow, kernel, stride, padding, count_include_pad) -> np.ndarray:
    """The divisor of every output position, as torch's avg_pool2d computes it."""
    def axis(size, out, k, s, p):
        start = np.arange(out) * s - p
        end = np.minimum(start + k, size + p)
        full = end - start
        start, end = np.maximum(start, 0), np.minimum(end, size)
        return full, end - start
    fh, ch = axis(h, oh, kernel[0], stride[0], padding[0])
    fw, cw = axis(w, ow, kernel[1], stride[1], padding[1])
    return (np.outer(fh, fw) if count_include_pad else np.outer(ch, cw)).astype(np.float64)


def assist_tables(t: PoolTiling):
    """(offsets, scales): int32 byte offsets of window position (0, 0) for every output, and
    fp32 scale / divisor for every output (None when it is one constant)."""
    item = np.dtype(t.dtype).itemsize
    r = np.arange(t.oh)[:, None] * t.stride[0]
    col = np.arange(t.ow)[None, :] * t.stride[1] - t.padding[1] + t.pad_left
    offsets = ((r * t.row_stride + col) * item).astype(np.int32).reshape(-1)
    scales = None
    if t.mode == "avg" and t.const_div == 0.0:
        divs = avg_divisors(t.h, t.w, t.oh, t.ow, t.kernel, t.stride, t.padding, t.count_include_pad)
        scales = (t.scale / divs).astype(np.float32).reshape(-1)
    return offsets, scales


class KernelPool:
    """One block: planes_per_block planes, one plane a tile."""

    def __init__(self, x, offsets, scales, y, t: PoolTiling):
        self.t, self.x_gm, self.y_gm = t, x, y
        self.dtype = np.dtype(t.dtype)
        self.first = get_block_idx() * t.planes_per_block
        self.count = max(0, min(t.planes_per_block, t.n * t.c - self.first))
        self.out = t.oh * t.ow
        self.pad_value = -np.inf if t.mode == "max" else 0.0
        per_block = BLOCK_BYTES // self.dtype.itemsize
        self.plane = t.rows * t.row_stride
        self.padded: set = set()                  # the in_x slots (by UB offset) whose padding is written
        self.pipe = TPipe()
        self.in_x, self.out_y = Queue(VECIN, "in_x"), Queue(VECOUT, "out_y")
        self.pipe.init_buffer(self.in_x, t.buffer_num, (self.plane + per_block) * self.dtype.itemsize)
        self.pipe.init_buffer(self.out_y, t.buffer_num, self.out * self.dtype.itemsize)
        bufs = {"off0": (self.out, np.int32), "off": (self.out, np.int32), "gath": (self.out, self.dtype)}
        if t.mode == "avg":
            bufs["acc"] = (self.out, F32)
        got = {}
        for name, (n, dt) in bufs.items():
            b = TBuf(VECCALC, name)
            self.pipe.init_buffer(b, n * np.dtype(dt).itemsize)
            got[name] = b.get(dt)
        self.off0, self.off, self.gath = got["off0"], got["off"], got["gath"]
        self.acc = got.get("acc")
        # assist tensors, loaded once a block
        self.assist = Queue(VECIN, "in_assist")
        self.pipe.init_buffer(self.assist, 1, self.out * 4 * (2 if scales is not None else 1) + BLOCK_BYTES)
        a = self.assist.alloc_tensor(np.int32)
        copy_elements(a, offsets, self.out)
        if scales is not None:
            s_at = round_up(self.out, 8)
            copy_elements(a[s_at:].reinterpret_cast(np.float32), scales, self.out)
        self.assist.enque(a)
        a = self.assist.deque()
        lang.adds(self.off0, a, 0, self.out)
        self.scales = a[round_up(self.out, 8):].reinterpret_cast(np.float32) if scales is not None else None
        self.assist_t = a

    def process(self):
        for p in range(self.first, self.first + self.count):
            self.copy_in(p)
            self.compute()
            self.copy_out(p)
        self.assist.free_tensor(self.assist_t)

    def copy_in(self, p):
        t = self.t
        x = self.in_x.alloc_tensor(self.dtype)
        base = p * t.h * t.w
        top = t.padding[0]
        if t.row_stride == t.w and t.pad_left == 0:
            copy_elements(x[top * t.row_stride:], self.x_gm[base:], t.h * t.w)       # the whole plane at once
        elif (t.w * self.dtype.itemsize) % BLOCK_BYTES == 0:
            # rows of whole blocks: one strided copy (DataCopyParams: H bursts of W, landing
            # row_stride apart), not one copy a row
            lang.data_copy_strided(x[top * t.row_stride + t.pad_left:], self.x_gm[base:], t.h, t.w,
                                   src_stride=t.w, dst_stride=t.row_stride)
        else:
            for r in range(t.h):
                lang.data_copy_pad(x[(top + r) * t.row_stride + t.pad_left:], self.x_gm[base + r * t.w:],
                                   t.w, pad_value=self.pad_value)
        self.in_x.enque(x)

    def _fill_padding(self, x):
        """Write pad_value into every cell outside the data (top and bottom rows, the left
        margin and the blocks right of the data; data_copy_pad filled the data's last block)."""
        t, rs = self.t, self.t.row_stride
        per_block = BLOCK_BYTES // self.dtype.itemsize
        top = t.padding[0]
        if top:
            lang.duplicate(x, self.pad_value, top * rs)
        bottom = t.rows - top - t.h
        if bottom > 0:
            lang.duplicate(x[(top + t.h) * rs:], self.pad_value, bottom * rs)
        right = round_up(t.pad_left + t.w, per_block)
        for r in range(top, top + t.h):
            if t.pad_left:
                lang.duplicate(x[r * rs:], self.pad_value, t.pad_left)
            if right < rs:
                lang.duplicate(x[r * rs + right:], self.pad_value, rs - right)

    def compute(self):
        t = self.t
        x = self.in_x.deque()
        if x.offset not in self.padded:
            # the padding cells of a queue slot are written once: the copies in write data
            # cells only, so they hold pad_value for every later plane in that slot
            self._fill_padding(x)
            self.padded.add(x.offset)
        item = self.dtype.itemsize
        kh, kw = t.kernel
        dh, dw = t.dilation
        first = True
        for i in range(kh):
            for j in range(kw):
                lang.adds(self.off, self.off0, (i * dh * t.row_stride + j * dw) * item, self.out)
                if t.mode == "max":
                    dst = self.gath if not first else None
                    y_acc = self.acc_max if not first else None
                    if first:
                        self.acc_max = self.out_y.alloc_tensor(self.dtype)
                        lang.gather(self.acc_max, x, self.off, self.out)
                    else:
                        lang.gather(dst, x, self.off, self.out)
                        lang.max(y_acc, y_acc, dst, self.out)
                else:
                    lang.gather(self.gath, x, self.off, self.out)
                    if first:
                        lang.cast(self.acc, self.gath, "none", self.out)
                    else:
                        if self.dtype != F32:
                            lang.cast(self.off.reinterpret_cast(np.float32), self.gath, "none", self.out)
                            lang.add(self.acc, self.acc, self.off.reinterpret_cast(np.float32), self.out)
                        else:
                            lang.add(self.acc, self.acc, self.gath, self.out)
                first = False
        self.in_x.free_tensor(x)
        if t.mode == "max":
            y = self.acc_max
        else:
            y = self.out_y.alloc_tensor(self.dtype)
            if t.const_div:
                lang.muls(self.acc, self.acc, t.const_div, self.out)
            else:
                lang.mul(self.acc, self.acc, self.scales, self.out)
            lang.cast(y, self.acc, "rint", self.out)
        self.out_y.enque(y)

    def copy_out(self, p):
        y = self.out_y.deque()
        copy_elements(self.y_gm[p * self.out:], y, self.out)
        self.out_y.free_tensor(y)


def pool_kernel(x, offsets, scales, y, t: PoolTiling) -> None:
    KernelPool(x, offsets, scales, y, t).process()


def launch_pool(x: np.ndarray, t: PoolTiling, chip=DEFAULT_CHIP, mode="functional"):
    """Run a pool with a tiling from :func:`pool_tiling`. Returns (y (N, C, OH, OW), trace)."""
    offsets, scales = assist_tables(t)
    return launch_vector(pool_kernel, [x, offsets, scales], (t.n, t.c, t.oh, t.ow), x.dtype, t, chip=chip,
                         mode=mode)
