"""DataCopy and DataCopyPad: moving bytes between GM and the on-chip buffers.

Which pipe moves the bytes follows from where they come from and go to (data/FACTS.md, Pipes):
GM -> UB/L1 on MTE2, UB -> GM on MTE3, L1 -> UB on MTE1, UB -> UB on the vector pipe.
``data_copy`` moves whole 32-byte blocks only, as the hardware does; ``data_copy_pad`` takes
any element count, padding the on-chip side to the next block.
"""
from __future__ import annotations


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
        dev.gm.read(core, i, moved, src.byte_range(count))
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
