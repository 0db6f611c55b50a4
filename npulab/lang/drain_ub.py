"""The coupled chips' cube output: L0C -> UB on the vector pipe, the epilogue on the vector unit,
UB -> GM on MTE3.

==========================  =====  ==============================================================
call                        pipe   what it does (Ascend C name)
==========================  =====  ==============================================================
``data_copy_l0c2ub``        V      L0C (NZ, fp32/int32) -> UB, fractal by fractal, still NZ
                                   (DataCopy CO1 -> CO2 + DataCopyEnhancedParams, BLOCK_MODE_MATRIX)
``data_copy_nz2nd``         MTE3   UB (NZ) -> GM (ND): one strided copy per 16-column fractal
                                   column (DataCopy + Nz2NdParamsFull on the 910)
``output_path``             -      how the running chip's cube result leaves L0C
==========================  =====  ==============================================================

The 910 and 310 have no FixPipe (asc-devkit Fixpipe.md lists the A2/A3 series only, FACTS S13):
the cube's result leaves L0C through the vector unit into UB ("CO2 in UB (coupled)", FACTS,
Programming model), so whatever a FixPipe chip does on the way out (bias, BatchNorm's scale and
offset, ReLU, dequantisation, the fp32 -> fp16 cast) runs on the vector unit in UB there: what
GE calls UB fusion. Which way a chip goes is its ``[cube] output_path`` ("fixpipe", "ub",
"ub_convert"), read by :func:`output_path` as a kernel compiled for that chip would know it.

* **L0C -> UB** moves whole 16 x 16 fractals as they lie (BLOCK_MODE_MATRIX), so the tile is NZ
  in UB: fractal column j (16 output columns) is ``rows`` rows of 16 elements, one after the
  other. It runs on the vector pipe (a kernel sets M -> V before it and V -> M after, FACTS S14),
  at the vector unit's width (:meth:`npulab.sim.cost.CostModel.l0c_to_ub`). What it converts on
  the way is the chip's: on the Atlas training series (910, "ub") DataCopy's enhanced parameters
  take no effect, the accumulator arrives as it is (fp32 / int32); on the Atlas inference series
  AI Core (310, "ub_convert") it can cast fp32 -> fp16, dequantise int32 -> fp16 by one scale
  (DEQ: the scale is an fp16 value) and apply ReLU (S13). Nothing else: a bias or a per-channel
  vector is the vector unit's work.
* **UB -> GM** turns NZ into ND with strides, no vector work: fractal column j is ``m`` bursts
  of 16 elements (one 32-byte block of fp16, two of fp32), one a row, written ``dst_stride``
  apart in GM (CANN's DataCopyUB2GMNZ2NDImpl for the 910 issues exactly these, S14); at most
  4095 bursts an instruction (blockCount's 12 bits, S13). A last column narrower than 16 writes
  only its elements (DataCopyPad's byte-long bursts; a simplification on the 910, see the labs).
"""
from __future__ import annotations

import numpy as np

from ..arch import FRACTAL_ROWS, ceil_div, round_up
from ..errors import DataPathError, ShapeError
from ..sim.cost import level_energy_pj
from ..sim.isa import Kind, Op, Pipe
from .context import current, running_chip
from .copy import issue_strided
from .cube import check_out_tile
from .l0c import flush_l0c
from .sync import vector_hazard
from .tensor import GlobalTensor, LocalTensor

FRACTAL = FRACTAL_ROWS * FRACTAL_ROWS       # elements of one 16 x 16 fractal
MAX_BURSTS = 4095                           # DataCopyParams.blockCount: 12 bits (S13)
_F16, _F32, _I32 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.int32)


def output_path() -> str:
    """How the running chip's cube result leaves L0C (``[cube] output_path``): "fixpipe", "ub"
    or "ub_convert" (:data:`npulab.chips.OUTPUT_PATHS`)."""
    return running_chip().cube.output_path


def _conversion(chip, src: LocalTensor, dst: LocalTensor, relu: bool, deq_scale) -> str:
    """A ShapeError / DataPathError unless the chip's L0C -> UB move can do this; the tag the
    trace shows."""
    what = "data_copy_l0c2ub"
    path = chip.cube.output_path
    converts = dst.dtype != src.dtype or relu or deq_scale is not None
    if converts and path != "ub_convert":
        raise DataPathError(
            f"{what}: chip '{chip.name}' moves L0C -> UB without converting ([cube] output_path "
            f"{path!r}: DataCopy's enhanced parameters take no effect on the Atlas training series); "
            f"asked for {src.dtype} -> {dst.dtype}{', relu' if relu else ''}"
            f"{', deq_scale' if deq_scale is not None else ''}. Move {src.dtype} into UB and cast / "
            f"relu / scale there on the vector unit")
    if (src.dtype, dst.dtype) == (_F32, _F16) and deq_scale is None:
        return " f32->f16" + (" relu" if relu else "")
    if (src.dtype, dst.dtype) == (_I32, _F16) and deq_scale is not None:
        return " deq" + (" relu" if relu else "")
    if src.dtype == dst.dtype and deq_scale is None:
        return " relu" if relu else ""
    raise ShapeError(f"{what}: L0C {src.dtype} -> UB {dst.dtype}"
                     f"{' with deq_scale' if deq_scale is not None else ''} is no conversion the move "
                     f"makes; it keeps the dtype, casts float32 -> float16, or dequantises int32 -> "
                     f"float16 with deq_scale=")


def data_copy_l0c2ub(dst: LocalTensor, src: LocalTensor, fractals: int, *, relu: bool = False,
                     deq_scale: float | None = None) -> None:
    """Move ``fractals`` 16 x 16 fractals from L0C (``src``, fp32 or int32, as mmad wrote them) to
    UB (``dst``), contiguous on both sides and NZ in UB (Ascend C ``DataCopy(dst, src,
    DataCopyParams{1, fractals, 0, 0}, DataCopyEnhancedParams{BLOCK_MODE_MATRIX, ...})``). On a
    "ub_convert" chip it may cast float32 -> float16 (``dst`` fp16), dequantise int32 -> float16
    by ``deq_scale`` (rounded to fp16, as the DEQ mode takes it) and apply ``relu``; on a "ub"
    chip ``dst`` has ``src``'s dtype. The vector pipe runs it."""
    what = "data_copy_l0c2ub"
    for t, where, name in ((src, "L0C", "src"), (dst, "UB", "dst")):
        if not isinstance(t, LocalTensor) or t.buffer.name != where:
            got = t.buffer.name if isinstance(t, LocalTensor) else type(t).__name__
            raise ShapeError(f"{what}: {name} must be a LocalTensor in {where}, got {got}")
    ctx = current()
    dev, core = ctx.device, ctx.core
    chip = dev.chip
    if chip.cube.output_path == "fixpipe":
        raise DataPathError(f"{what}: chip '{chip.name}' drains L0C through FixPipe ([cube] output_path "
                            f"'fixpipe'); use fixpipe (to GM, L1 or UB)")
    if src.dtype not in (_F32, _I32):
        raise ShapeError(f"{what}: L0C holds float32 or int32, got '{src.owner}' of {src.dtype}")
    tag = _conversion(chip, src, dst, relu, deq_scale)
    fractals = int(fractals)
    n = fractals * FRACTAL
    if fractals < 1 or n > src.size or n > dst.size:
        raise ShapeError(f"{what}: {fractals} fractals are {n} elements; '{src.owner}' holds {src.size} "
                         f"and '{dst.owner}' {dst.size}")
    if dev.functional:
        flush_l0c(src.buffer, src.offset, src.offset + n * src.itemsize)
        x = src.numpy()[:n]
        if deq_scale is not None:
            x = x.astype(np.float32) * np.float32(np.float16(deq_scale))
        if relu:
            x = np.maximum(x, x.dtype.type(0))
        dst.numpy()[:n] = x.astype(dst.dtype)
    reads, writes = [src.byte_range(n)], [dst.byte_range(n)]
    vector_hazard(core, reads, writes)
    src_b, dst_b = n * src.itemsize, n * dst.itemsize
    dur, lat = dev.cost.l0c_to_ub(src_b)
    core.issue(Pipe.V, Kind.WORK, Op.COPY_L0C_TO_UB, dur, lat=lat, name=f"{what} {fractals} fractals{tag}",
               nbytes=src_b, energy=level_energy_pj(chip, "L0C") * src_b + level_energy_pj(chip, "UB") * dst_b,
               route="L0C->UB", reads=reads, writes=writes)


def data_copy_nz2nd(dst: GlobalTensor, src: LocalTensor, m: int, n: int, *, dst_stride: int | None = None,
                    src_rows: int | None = None) -> None:
    """Write an (m, n) tile held NZ in UB (fractal columns of ``src_rows`` rows, default m rounded
    up to 16) to GM in ND, row stride ``dst_stride`` elements (default n): per fractal column j one
    strided MTE3 copy of m bursts of min(16, n - 16 j) elements (Ascend C ``DataCopy(dst, src,
    Nz2NdParamsFull)``, which the 910 lowers to these copies)."""
    what = "data_copy_nz2nd"
    if not isinstance(dst, GlobalTensor):
        raise ShapeError(f"{what}: dst must be a GlobalTensor, got {type(dst).__name__}")
    if not isinstance(src, LocalTensor) or src.buffer.name != "UB":
        raise ShapeError(f"{what}: src must be a LocalTensor in UB (the NZ tile), got "
                         f"{src.buffer.name if isinstance(src, LocalTensor) else type(src).__name__}")
    m, n = int(m), int(n)
    rows = round_up(m, FRACTAL_ROWS) if src_rows is None else int(src_rows)
    stride = n if dst_stride is None else int(dst_stride)
    if m < 1 or n < 1 or rows < m or rows % FRACTAL_ROWS or stride < n:
        raise ShapeError(f"{what}: m={m}, n={n}, src_rows={rows}, dst_stride={stride}: need positive "
                         f"sizes, src_rows a multiple of {FRACTAL_ROWS} of at least m, dst_stride >= n")
    check_out_tile(what, src, dst, m, n, rows, stride)
    if src.dtype != dst.dtype:
        raise ShapeError(f"{what}: src is {src.dtype} and dst is {dst.dtype}; a copy does not convert")
    dev = current().device
    if dev.functional and (data := dst.writable()) is not None:      # the bytes in one pass
        n1 = ceil_div(n, FRACTAL_ROWS)
        nz = src.numpy()[:n1 * rows * FRACTAL_ROWS].reshape(n1, rows, FRACTAL_ROWS)[:, :m]
        item = data.itemsize
        out = np.ndarray((m, n), dtype=data.dtype, buffer=data, offset=dst.offset * item,
                         strides=(stride * item, item))
        out[:, :(n // FRACTAL_ROWS) * FRACTAL_ROWS] = \
            nz[:n // FRACTAL_ROWS].transpose(1, 0, 2).reshape(m, -1)
        if n % FRACTAL_ROWS:
            out[:, (n // FRACTAL_ROWS) * FRACTAL_ROWS:] = nz[-1, :, :n % FRACTAL_ROWS]
    core, item = current().core, src.itemsize
    ub, gm = src.buffer.name, f"GM:{dst.name}"
    for j in range(ceil_div(n, FRACTAL_ROWS)):          # the instructions: a column each (as data_copy_strided)
        width = min(FRACTAL_ROWS, n - j * FRACTAL_ROWS)
        for r0 in range(0, m, MAX_BURSTS):
            count = min(MAX_BURSTS, m - r0)
            lo_ub = src.offset + (j * rows + r0) * FRACTAL_ROWS * item
            lo_gm = (dst.offset + r0 * stride + j * FRACTAL_ROWS) * item
            issue_strided(dev, core, ("UB", "GM"), count * width * item, f"{what} {count}x{width} UB->GM",
                          [(ub, lo_ub, lo_ub + ((count - 1) * FRACTAL_ROWS + width) * item)],
                          [(gm, lo_gm, lo_gm + ((count - 1) * stride + width) * item)],
                          (gm, lo_gm, width * item, stride * item, count))


__all__ = ["output_path", "data_copy_l0c2ub", "data_copy_nz2nd", "FRACTAL", "MAX_BURSTS"]
