"""DataCopy and DataCopyPad: moving bytes between GM and the on-chip buffers.

Which pipe moves the bytes follows from where they come from and go to (data/FACTS.md, Pipes):
GM -> UB/L1 on MTE2, UB -> GM on MTE3, L1 -> UB on MTE1, UB -> UB on the vector pipe.
``data_copy`` moves whole 32-byte blocks only, as the hardware does; ``data_copy_pad`` takes
any element count, padding the on-chip side to the next block.
"""
from __future__ import annotations

import numpy as np

from ..arch import BLOCK_BYTES, round_up
from ..errors import AlignmentError, ShapeError
from ..sim.cost import copy_energy_pj
from ..sim.isa import Kind, Op, Pipe
from .context import current
from .sync import vector_hazard
from .tensor import GlobalTensor, LocalTensor, as_whole

_ROUTES = {  # (src level, dst level) -> (pipe, opcode)
    ("GM", "UB"): (Pipe.MTE2, Op.COPY_GM_TO_UB),
    ("GM", "L1"): (Pipe.MTE2, Op.COPY_GM_TO_L1),
    ("UB", "GM"): (Pipe.MTE3, Op.COPY_UB_TO_GM),
    ("L1", "UB"): (Pipe.MTE1, Op.COPY_L1_TO_UB),
    ("UB", "UB"): (Pipe.V, Op.COPY_UB_TO_UB),
}


def _level(t) -> str:
    return "GM" if isinstance(t, GlobalTensor) else t.buffer.name


def _copy(dst, src, count: int, what: str, padded: bool, pad_value=0) -> None:
    ctx = current()
    core, dev = ctx.core, ctx.device
    if not isinstance(dst, (GlobalTensor, LocalTensor)) or not isinstance(src, (GlobalTensor, LocalTensor)):
        raise ShapeError(f"{what}(dst, src, count): dst and src must be GlobalTensor or LocalTensor, "
                         f"got {type(dst).__name__} and {type(src).__name__}")
    route = (_level(src), _level(dst))
    if route not in _ROUTES:
        hint = " (L1 -> L0A/L0B is load_data)" if route[0] == "L1" else ""
        raise ShapeError(f"{what}: no data path from {route[0]} to {route[1]}{hint}; copies run "
                         f"{', '.join(f'{a}->{b}' for a, b in _ROUTES)}")
    if src.dtype != dst.dtype:
        raise ShapeError(f"{what}: src is {src.dtype} and dst is {dst.dtype}; a copy does not convert "
                         f"(use cast on the vector unit)")
    count = as_whole(count, what, positive=True)
    nbytes = count * src.itemsize
    if not padded and nbytes % BLOCK_BYTES:
        raise AlignmentError(
            f"{what}: {count} elements of {src.dtype} are {nbytes} bytes, not a multiple of the "
            f"{BLOCK_BYTES}-byte block a DMA moves. Fix: copy a multiple of {BLOCK_BYTES // src.itemsize} "
            f"elements, or use data_copy_pad for the tail.")
    moved = round_up(nbytes, BLOCK_BYTES)           # DMAs move whole blocks
    local = dst if isinstance(dst, LocalTensor) else src
    room = local.nbytes if padded and local is dst else local.size * local.itemsize
    if (moved if local is dst else nbytes) > room:
        raise ShapeError(f"{what}: {count} elements ({moved} B with padding) do not fit in "
                         f"'{local.owner}', which holds {local.size} elements ({local.nbytes} B)")
    for t in (src, dst):
        if isinstance(t, GlobalTensor) and count > t.size:
            raise ShapeError(f"{what}: {count} elements reach past the end of {t!r} ({t.size} elements)")
    pipe, op = _ROUTES[route]
    touches_gm = "GM" in route
    # a DMA occupies its pipe for the transfer and is in flight for its start-up latency; a
    # UB -> UB copy runs on the vector pipe, pipelined as a vector instruction (lang.vector)
    dur, lat = dev.cost.copy(pipe, moved, touches_gm) if pipe != Pipe.V else dev.cost.ub_copy(moved)
    # numerics, in program order
    if dev.functional:
        s, d = src.numpy(), dst.numpy(write=True) if route[1] == "GM" else dst.numpy()
        if s is not None and d is not None:
            d[:count] = s[:count]
            if padded and isinstance(dst, LocalTensor):
                d[count: moved // dst.itemsize] = pad_value
    wcount = moved // dst.itemsize if (padded and isinstance(dst, LocalTensor)) else count
    if pipe == Pipe.V:
        vector_hazard(core, [src.byte_range(count)], [dst.byte_range(wcount)])
    i = core.issue(pipe, Kind.WORK, op, dur, name=f"{what} {route[0]}->{route[1]} {nbytes} B",
               nbytes=nbytes, energy=copy_energy_pj(dev.chip, route[0], route[1], moved),
               route=f"{route[0]}->{route[1]}",
               reads=[src.byte_range(count)], writes=[dst.byte_range(wcount)], lat=lat)
    if route[0] == "GM":
        name, lo, hi = src.byte_range(count)
        dev.gm.read(core, i, moved, (name, lo, hi - lo, hi - lo, 1))
    elif route[1] == "GM":
        name, lo, hi = dst.byte_range(count)
        dev.gm.write(core, i, pipe, moved, (name, lo, hi - lo, hi - lo, 1))


def data_copy(dst, src, count: int | None = None) -> None:
    """Copy ``count`` elements (default: all of ``dst``); the byte count must be a multiple of 32."""
    _copy(dst, src, dst.size if count is None else count, "data_copy", padded=False)


def data_copy_pad(dst, src, count: int, pad_value=0) -> None:
    """Copy any number of elements. Into UB/L1 the last 32-byte block is filled with
    ``pad_value``; out to GM only ``count`` elements are written (Ascend C ``DataCopyPad``)."""
    _copy(dst, src, count, "data_copy_pad", padded=True, pad_value=pad_value)


# -- DataCopy with DataCopyParams: bursts and strides --------------------------------------------
_STRIDED = {r: _ROUTES[r] for r in (("GM", "L1"), ("GM", "UB"), ("UB", "GM"), ("UB", "UB"))}


def _bursts(t, cnt: int, ln: int, stride: int, write: bool):
    """The (cnt, ln) view of ``t``'s bursts (burst j from element j * stride), or None when a GM
    tensor has no data (timing mode)."""
    if isinstance(t, GlobalTensor):
        data = t.writable() if write else t.data
        if data is None:
            return None
        data = data[t.offset:]
    else:
        data = t.numpy()
    return np.lib.stride_tricks.as_strided(data, shape=(cnt, ln), strides=(stride * t.itemsize, t.itemsize))


def data_copy_strided(dst, src, block_count: int, block_len: int, src_stride: int | None = None,
                      dst_stride: int | None = None) -> None:
    """Copy ``block_count`` bursts of ``block_len`` elements (Ascend C ``DataCopy(dst, src,
    DataCopyParams{blockCount, blockLen, srcStride, dstStride})``): burst j reads
    ``src[j * src_stride:][:block_len]`` and writes ``dst[j * dst_stride:]``. Strides are in
    elements from burst start to burst start (default ``block_len``: packed). One instruction,
    one start-up. Routes, by where src and dst are:

    * GM -> L1 or UB on MTE2: how a feature-map slab (C1 blocks of rows x W x C0) or a FRACTAL_Z
      weight window reaches L1;
    * UB -> GM on MTE3: how the coupled chips write an NZ tile out as ND rows
      (:func:`npulab.lang.drain_ub.data_copy_nz2nd`). A burst whose length is not whole 32-byte
      blocks writes only its ``block_len`` elements to GM (DataCopyPad's byte-long blocks);
    * UB -> UB on the vector pipe (DataCopy VECIN -> VECOUT), pipelined as a vector instruction.

    On chip every burst starts on a 32-byte block, and into L1 / UB it is whole blocks."""
    what = "data_copy_strided"
    if not isinstance(dst, (GlobalTensor, LocalTensor)) or not isinstance(src, (GlobalTensor, LocalTensor)):
        raise ShapeError(f"{what}: dst and src must be GlobalTensor or LocalTensor, got "
                         f"{type(dst).__name__} and {type(src).__name__}")
    route = (_level(src), _level(dst))
    if route not in _STRIDED:
        raise ShapeError(f"{what}: no strided path from {route[0]} to {route[1]}; it runs "
                         f"{', '.join(f'{a}->{b}' for a, b in _STRIDED)}")
    if src.dtype != dst.dtype:
        raise ShapeError(f"{what}: src is {src.dtype} and dst is {dst.dtype}; a copy does not convert")
    cnt, ln = int(block_count), int(block_len)
    ss = ln if src_stride is None else int(src_stride)
    ds = ln if dst_stride is None else int(dst_stride)
    if cnt < 1 or ln < 1 or ss < ln or ds < ln:
        raise ShapeError(f"{what}: block_count={cnt}, block_len={ln}, src_stride={ss}, dst_stride={ds}: "
                         f"need positive counts and strides of at least block_len")
    item = dst.itemsize
    for t, stride in ((src, ss), (dst, ds)):
        if isinstance(t, LocalTensor) and ((stride * item) % BLOCK_BYTES
                                           or (t is dst and (ln * item) % BLOCK_BYTES)):
            raise ShapeError(f"{what}: a burst of {ln} x {dst.dtype} ({ln * item} B) and a stride of "
                             f"{stride * item} B in {t.buffer.name} must be whole {BLOCK_BYTES}-byte blocks")
    span_src, span_dst = (cnt - 1) * ss + ln, (cnt - 1) * ds + ln
    if span_src > src.size:
        raise ShapeError(f"{what}: the bursts reach {span_src} elements past {src!r}, which holds {src.size}")
    if span_dst > dst.size:
        raise ShapeError(f"{what}: the bursts need {span_dst} elements of {dst!r}, which holds {dst.size}")
    ctx = current()
    dev, core = ctx.device, ctx.core
    pipe = _STRIDED[route][0]
    if dev.functional:
        s = _bursts(src, cnt, ln, ss, False)
        d = _bursts(dst, cnt, ln, ds, True) if s is not None else None
        if d is not None:
            d[...] = s
    moved = cnt * (ln * item if route[1] == "GM" else round_up(ln * item, BLOCK_BYTES))
    reads, writes = [src.byte_range(span_src)], [dst.byte_range(span_dst)]
    if dev.check_races and ds > ln and cnt > 1 and isinstance(dst, LocalTensor):
        b0 = dst.offset                     # the bursts only, not the gaps between them
        writes = [(dst.buffer.name, b0 + j * ds * item, b0 + (j * ds + ln) * item) for j in range(cnt)]
    if pipe == Pipe.V:
        vector_hazard(core, reads, writes)
    gm = (f"GM:{src.name}", src.offset * item, ln * item, ss * item, cnt) if route[0] == "GM" else \
        (f"GM:{dst.name}", dst.offset * item, ln * item, ds * item, cnt) if route[1] == "GM" else None
    issue_strided(dev, core, route, moved, f"{what} {cnt}x{ln} {route[0]}->{route[1]}", reads, writes, gm)


def issue_strided(dev, core, route: tuple, moved: int, name: str, reads, writes, gm) -> None:
    """Issue one strided copy of ``moved`` bytes on ``route`` (a key of the copy routes) and
    record its GM side: ``gm`` is the rows it reads (GM -> on chip) or writes (GM name, first
    byte, bytes a row, bytes row to row, rows)."""
    pipe, op = _STRIDED[route]
    key = ("strided", route, moved)          # a tile's copies repeat a few sizes: priced once a launch
    priced = dev.memo.get(key)
    if priced is None:
        dur, lat = dev.cost.copy(pipe, moved, True) if pipe != Pipe.V else dev.cost.ub_copy(moved)
        priced = dev.memo[key] = (dur, lat, copy_energy_pj(dev.chip, route[0], route[1], moved),
                                  f"{route[0]}->{route[1]}")
    dur, lat, energy, text = priced
    i = core.issue(pipe, Kind.WORK, op, dur, lat=lat, name=name, nbytes=moved, energy=energy, route=text,
                   reads=reads, writes=writes)
    if route[0] == "GM":
        dev.gm.read(core, i, moved, gm)
    elif route[1] == "GM":
        dev.gm.write(core, i, pipe, moved, gm)
