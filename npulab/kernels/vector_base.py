"""What every vector kernel shares: the float dtypes it takes, a copy of any element count, the
tile sizes of a block's pipeline, the work-item set-up, and the launch.

* :func:`check_float`: the vector kernels' inputs are float16 or float32;
* :func:`copy_elements`: ``data_copy`` when whole 32-byte blocks move, ``data_copy_pad`` for a
  tail;
* :func:`ramp_tiles`: the tiles that cover a block, small at both ends (fill and drain);
* :func:`setup_item_kernel`: the set-up of a kernel that walks *work items* (BatchNorm,
  Softmax's RA form);
* :func:`launch_vector`: launch a vector-only kernel (``core_type="aiv"``) on numpy inputs into
  a fresh output array.

The row kernels' base (LayerNorm, RMSNorm, Softmax over the last axis) is :mod:`npulab.kernels.rows`.
"""
from __future__ import annotations

import numpy as np

from .. import lang
from ..arch import BLOCK_BYTES, F32, VECTOR_DTYPES, ceil_div, round_up
from ..errors import ShapeError
from ..lang import VECCALC, VECIN, VECOUT, Queue, TBuf, TPipe, data_copy, data_copy_pad, get_block_idx

#: split a block at least this finely so copies and compute overlap: every tile pays the
#: start-up of its vector instructions, so fewer tiles would be better, but the first tile's
#: read and the last tile's compute and write-back cannot overlap anything; 16 balances the two
#: at BERT sizes on the 910 (npulab bench kernels --family vector); the row kernels and the
#: activations use it (Add, the lab 02 kernel, keeps its own MIN_TILES_PER_BLOCK)
TILES_PER_BLOCK = 16
#: three slots a queue: a read pays its copy start-up on top of its bytes, and with two slots
#: the next read often starts too late to finish before the vector unit wants it. In Ascend C
#: the slot count is InitBuffer's ``num`` (uint8_t; 1 = single, 2 = double buffering; every
#: queue's num in a kernel adds up to at most 64: CANN API reference, TPipe::InitBuffer).
BUFFER_NUM = 3


def check_float(what: str, name: str, dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in VECTOR_DTYPES:
        raise ShapeError(f"{what}: {name} is {dt}; expected float16 or float32")
    return dt


def ramp_tiles(total: int, tile: int, unit: int = 1, ramp: int = 2) -> list[int]:
    """Sizes of the tiles that cover ``total`` items (multiples of ``unit``, at most ``tile``):
    ``ramp`` tiles of tile/2**ramp, ..., tile/2 first, then full tiles, then the same ramp in
    reverse. Nothing can overlap the first tile's copy-in or the last tile's compute and
    copy-out, so a pipeline of equal tiles pays one tile's read and one tile's write on top of
    the streaming time; small first and last tiles make that fill and drain short, while the
    tiles between stay large and amortise the start-up of every copy and vector instruction
    (an ordinary loop with a per-iteration count in Ascend C). Falls back to equal tiles when
    ``total`` is too short for a ramp."""
    total, tile, unit = int(total), int(tile), max(1, int(unit))
    if total <= 0:
        return []
    head = [max(unit, round_up(tile >> k, unit)) for k in range(ramp, 0, -1)] if ramp > 0 else []
    head = [h for h in head if h < tile]
    if sum(head) * 2 + tile > total or not head:
        n = ceil_div(total, tile)
        base = round_up(ceil_div(total, n), unit)
        sizes = [base] * (total // base)
        if total - sum(sizes):
            sizes.append(total - sum(sizes))
        return sizes
    mid = total - 2 * sum(head)
    n = ceil_div(mid, tile)
    base = min(tile, round_up(ceil_div(mid, n), unit))
    body = [base] * (mid // base)
    rest = mid - sum(body)
    if rest:
        body.append(rest)
    return head + body + head[::-1]


def copy_elements(dst, src, count: int) -> None:
    """data_copy when whole 32-byte blocks move, data_copy_pad for a tail."""
    if count * src.itemsize % BLOCK_BYTES:
        data_copy_pad(dst, src, count)
    else:
        data_copy(dst, src, count)


def setup_item_kernel(k, x, y, t, tile: int) -> None:
    """The set-up every work-item vector kernel starts with (BatchNorm here, Softmax's RA form):
    on ``k``, this block's share of ``t.work_items`` (``first``, ``count``), a TPipe, the in and
    out queues of ``tile`` elements with ``t.buffer_num`` slots, and an fp32 tile ``x32`` when
    the dtype is widened."""
    k.t, k.x_gm, k.y_gm = t, x, y
    k.dtype = np.dtype(t.dtype)
    k.wide = k.dtype != F32
    k.first = get_block_idx() * t.items_per_block
    k.count = max(0, min(t.items_per_block, t.work_items - k.first))
    k.pipe = TPipe()
    k.in_x, k.out_y = Queue(VECIN, "in_x"), Queue(VECOUT, "out_y")
    k.pipe.init_buffer(k.in_x, t.buffer_num, tile * k.dtype.itemsize)
    k.pipe.init_buffer(k.out_y, t.buffer_num, tile * k.dtype.itemsize)
    if k.wide:
        w = TBuf(VECCALC, "x32")
        k.pipe.init_buffer(w, tile * 4)
        k.x32 = w.get(F32)


def launch_vector(kernel, inputs, out_shape, out_dtype, t, *extra, chip, mode: str = "functional"):
    """Launch the vector-only kernel ``kernel(*inputs, y, t, *extra)`` on ``t.block_dim`` blocks:
    each input flattened (None passed on as None), y a fresh array of ``out_shape`` and
    ``out_dtype``, written in place. Returns (y, or None in timing mode, trace)."""
    y = np.zeros(out_shape, np.dtype(out_dtype))
    args = [None if a is None else np.ascontiguousarray(a).reshape(-1) for a in inputs]
    k = len(args)
    outs, trace = lang.launch(kernel, t.block_dim, *args, y.reshape(-1), t, *extra, chip=chip, mode=mode,
                              core_type="aiv", donate=(k,), outputs=(k,))
    return (outs[k].reshape(out_shape) if outs[k] is not None else None), trace


__all__ = ["TILES_PER_BLOCK", "BUFFER_NUM", "check_float", "ramp_tiles", "copy_elements", "setup_item_kernel",
           "launch_vector"]
