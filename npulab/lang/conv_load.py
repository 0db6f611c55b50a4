"""Convolution instructions: strided GM -> L1 copies, img2col on the L1 -> L0A load, and a
FixPipe with per-channel parameters.

==========================  =====  ==============================================================
call                        pipe   what it does (Ascend C name)
==========================  =====  ==============================================================
``data_copy_strided``       MTE2   GM -> L1 (or UB): ``block_count`` bursts of ``block_len``
                                   elements, source and destination strides between bursts
                                   (DataCopy + DataCopyParams; :mod:`npulab.lang.copy`)
``load_3d``                 MTE1   L1 feature map (NC1HWC0 slab) -> L0A in ZZ, expanding img2col
                                   on the way (LoadData + LoadData3DParamsV2, SetFmatrix)
``fixpipe_channelwise``     FIX    L0C -> GM / UB in ND with per-channel ``scale`` / ``offset``
                                   vectors (Fixpipe with a VDEQ / quant-parameter tensor), ReLU
==========================  =====  ==============================================================

**img2col is a load, not a copy from GM.** A convolution is a matmul of the img2col matrix A
(one row per output pixel, one column per (c1, kd, kh, kw, c0) tap) by the weights. A holds
every input pixel up to kd*kh*kw times, so it is never built in GM: the feature map moves
GM -> L1 once per tile (NC1HWC0: channels in blocks of C0 = 32 bytes), and ``load_3d`` reads
the L1 slab through the *fmatrix* (the slab's geometry) and writes the expanded rows into L0A.
The expansion costs MTE1 time for the expanded bytes, and no GM bandwidth (data/FACTS.md, Data
formats: "img2col into L0A by Load3D (with SetFmatrix)"). Zero padding of the convolution is
made by the load too: a tap that falls outside the map reads 0, no padded map exists.

The fmatrix here (:class:`Fmatrix`) is a small host-side description passed with each load;
on the hardware SetFmatrix writes it to a register once per L1 tile (a scalar instruction,
not charged here). Chosen simplifications: the slab may hold *boxes* of several images (so
that a 7 x 7 map at batch 32 fills a 256-row tile instead of 49 of 64 rows; the real Load3Dv2
walks one image, and CANN loops over images), and 3-D convolutions use the same load with a
depth axis (N C1 D H W C0 in GM; CANN's Conv3D uses NDC1HWC0 and one Load3D per depth tap).

Functional numerics: ``load_3d`` gathers the window with numpy index arithmetic (the plain
loop it computes is in its docstring), ``fixpipe_channelwise`` applies its stages in float32.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import formats as F
from ..arch import FRACTAL_ROWS, round_up
from ..errors import ShapeError
from ..sim.cost import copy_energy_pj
from ..sim.isa import Kind, Op, Pipe
from .context import current
from .copy import data_copy_strided  # noqa: F401 (the slab's copy, re-exported)
from .cube import drain
from .tensor import LocalTensor

_MTE1, _WORK = int(Pipe.MTE1), int(Kind.WORK)


def _need_local(t, where, what):
    if not isinstance(t, LocalTensor):
        raise ShapeError(f"{what}: expected a LocalTensor in {' or '.join(where)}, got {type(t).__name__}")
    if t.buffer.name not in where:
        raise ShapeError(f"{what}: '{t.owner}' is in {t.buffer.name}; expected a tensor in {' or '.join(where)}")


# -- the fmatrix ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConvGeom:
    """A convolution's geometry, 3-D (a 2-D conv has d = kd = od = 1): input (d, h, w), kernel
    (kd, kh, kw), stride, dilation, leading pads (front, top, left) and output (od, oh, ow)."""
    d: int
    h: int
    w: int
    kd: int
    kh: int
    kw: int
    stride: tuple
    dilation: tuple
    pad: tuple                 # (front, top, left); the trailing pads follow from od, oh, ow
    od: int
    oh: int
    ow: int

    @property
    def taps(self) -> int:
        return self.kd * self.kh * self.kw

    @property
    def out_pixels(self) -> int:
        return self.od * self.oh * self.ow


@dataclass(frozen=True)
class Fmatrix:
    """What SetFmatrix tells Load3D about the feature-map slab in L1.

    The slab holds ``c1`` channel blocks, each ``c1_elems`` elements: one after another the
    *boxes* ``(image, d0, nd, start, length, base)``: in input depths d0..d0+nd-1 of
    ``image``, the ``length`` pixels from flat index ``start`` (row x w + column), C0 channels
    innermost, starting ``base`` elements into the block. ``p0`` is the global output position (image, od, oh, ow flattened) of L0A row 0."""
    geom: ConvGeom
    c0: int
    c1: int
    c1_elems: int
    p0: int
    boxes: tuple


def _read_span(fm: Fmatrix, m_start: int, m: int):
    """(lo, hi): the elements of each slab channel block that rows m_start.. m_start + m - 1
    read, as whole input rows clipped to the boxes (2-D; every box whole for 3-D), or None."""
    g = fm.geom
    P, hw = g.out_pixels, g.oh * g.ow
    q0, q1 = fm.p0 + m_start, fm.p0 + m_start + m - 1
    (_, sh, _), (_, dh, _), (_, ph, _) = g.stride, g.dilation, g.pad
    lo_all = hi_all = None
    for img, _d0, nd, start, length, base in fm.boxes:
        a, b = max(q0, img * P), min(q1, img * P + P - 1)
        if a > b or nd == 0 or length == 0:
            continue
        if g.d != 1:
            lo, hi = base, base + nd * length * fm.c0
        else:
            oh0, oh1 = ((a - img * P) % hw) // g.ow, ((b - img * P) % hw) // g.ow
            r_lo, r_hi = max(0, oh0 * sh - ph), min(g.h - 1, oh1 * sh - ph + (g.kh - 1) * dh)
            p_lo, p_hi = max(start, r_lo * g.w), min(start + length, (r_hi + 1) * g.w)
            if p_hi <= p_lo:
                continue
            lo, hi = base + (p_lo - start) * fm.c0, base + (p_hi - start) * fm.c0
        lo_all = lo if lo_all is None else min(lo_all, lo)
        hi_all = hi if hi_all is None else max(hi_all, hi)
    return None if lo_all is None else (lo_all, hi_all)


def _img2col_index(fm: Fmatrix, m_start: int, m: int, k_start: int, k: int):
    """Slab element index and validity of every (row, column) of the (m, k) img2col window."""
    g = fm.geom
    c0, taps = fm.c0, g.taps
    p = fm.p0 + m_start + np.arange(m)
    img, rem = np.divmod(p, g.out_pixels)
    o_d, rem = np.divmod(rem, g.oh * g.ow)
    o_h, o_w = np.divmod(rem, g.ow)
    kk = k_start + np.arange(k)
    c1, rem = np.divmod(kk, taps * c0)
    t, c = np.divmod(rem, c0)
    t_d, rem = np.divmod(t, g.kh * g.kw)
    t_h, t_w = np.divmod(rem, g.kw)
    (sd, sh, sw), (dd, dh, dw), (pd, ph, pw) = g.stride, g.dilation, g.pad
    i_d = (o_d * sd - pd)[:, None] + (t_d * dd)[None, :]
    i_h = (o_h * sh - ph)[:, None] + (t_h * dh)[None, :]
    i_w = (o_w * sw - pw)[:, None] + (t_w * dw)[None, :]
    valid = (i_d >= 0) & (i_d < g.d) & (i_h >= 0) & (i_h < g.h) & (i_w >= 0) & (i_w < g.w)
    # the box of each row's image
    lut = {b[0]: b for b in fm.boxes}
    try:
        bx = np.array([lut[int(b)] for b in img], dtype=np.int64).reshape(m, 6)
    except KeyError as exc:
        raise ShapeError(f"load_3d: output row of image {exc.args[0]} has no box in the fmatrix "
                         f"(boxes hold images {sorted(lut)})") from None
    dz = i_d - bx[:, 1:2]
    pix = i_h * g.w + i_w - bx[:, 3:4]
    inside = (dz >= 0) & (dz < bx[:, 2:3]) & (pix >= 0) & (pix < bx[:, 4:5])
    if np.any(valid & ~inside):
        raise ShapeError("load_3d: a tap reads a map pixel outside the slab the fmatrix describes "
                         "(the host loaded too few rows for this tile)")
    valid &= (c1 < fm.c1)[None, :]        # C04: the columns that pad taps x 4 up to K0 read 0
    flat = c1[None, :] * fm.c1_elems + bx[:, 5:6] + (dz * bx[:, 4:5] + pix) * c0 + c[None, :]
    return np.where(valid, flat, 0), valid


def load_3d(dst: LocalTensor, src: LocalTensor, fm: Fmatrix, m: int, k: int, *, m_start: int = 0,
            k_start: int = 0) -> None:
    """img2col from the feature-map slab in L1 into L0A as ZZ (Ascend C ``LoadData`` with
    ``LoadData3DParamsV2``): the (m, k) window of rows m_start.. and columns k_start.. of

        A[r, ((c1 * kd + i) * kh + j) * kw + l) * C0 + c]
            = x[image, c1, od*sd - pd + i*dd, oh*sh - ph + j*dh, ow*sw - pw + l*dw, c]
              (0 where that falls outside the map: the conv's zero padding)

    with (image, od, oh, ow) = output position ``fm.p0 + r``. ``k_start`` is a multiple of C0.
    Costs MTE1 time for the expanded (padded) bytes written to L0A.

    A C04 slab (``fm.c0 == 4``, the small-channel first-layer format NC1HWC0_C04, one channel
    block) is expanded with columns ``tap * 4 + c``, padded with zeros to the cube's K0 once
    for all taps, not per tap (Load3Dv2 in C04 mode: CANN's Conv2DV2 pairs it with a
    FRACTAL_Z_C04 filter of K = AlignB(4 x kh x kw, 16), ops-nn conv2d_v2_op_graph.cpp)."""
    what = "load_3d"
    _need_local(src, ("L1",), what + " (src)")
    _need_local(dst, ("L0A",), what + " (dst)")
    dt = dst.dtype
    if src.dtype != dt:
        raise ShapeError(f"{what}: src is {src.dtype} and dst is {dt}; a load does not convert")
    c0 = F.c0_of(dt)                   # the cube's K block; the slab's C0 is fm.c0
    c04 = fm.c0 == 4 and c0 != 4
    if fm.c0 != c0 and not (c04 and fm.c1 == 1):
        raise ShapeError(f"{what}: the fmatrix has C0={fm.c0}, {dt} needs C0={c0} (or C0=4 with "
                         f"one channel block: the C04 format)")
    m, k, m_start, k_start = int(m), int(k), int(m_start), int(k_start)
    if m < 1 or k < 1 or m_start < 0 or k_start < 0 or k_start % c0:
        raise ShapeError(f"{what}: m={m}, k={k}, m_start={m_start}, k_start={k_start}: need positive "
                         f"sizes and k_start a multiple of C0={c0}")
    k_all = round_up(fm.geom.taps * fm.c0, c0) if c04 else fm.c1 * fm.geom.taps * c0
    if k_start + k > k_all:
        raise ShapeError(f"{what}: columns {k_start}..{k_start + k} pass the slab's "
                         f"{fm.c1} x {fm.geom.taps} x {fm.c0} taps ({k_all} columns)")
    need = round_up(m, FRACTAL_ROWS) * round_up(k, c0)
    if need > dst.size:
        raise ShapeError(f"{what}: an {m} x {k} img2col window takes {need} elements "
                         f"({need * dt.itemsize} B) in ZZ; '{dst.owner}' holds {dst.size}")
    if fm.c1 * fm.c1_elems > src.size:
        raise ShapeError(f"{what}: the fmatrix describes {fm.c1} x {fm.c1_elems} elements; "
                         f"'{src.owner}' holds {src.size}")
    ctx = current()
    dev, core = ctx.device, ctx.core
    item = dt.itemsize
    if dev.functional:
        flat, valid = _img2col_index(fm, m_start, m, k_start, k)
        slab = src.numpy()
        vals = np.where(valid, slab[flat], np.zeros((), dt))
        dev.moves.layouts.pack_into(vals, dst.numpy()[:need], FRACTAL_ROWS, c0, False, False)
    c1a = min(fm.c1 - 1, k_start // (fm.geom.taps * fm.c0))
    c1b = min(fm.c1, (k_start + k - 1) // (fm.geom.taps * fm.c0) + 1)
    nbytes = need * item
    dur, lat = dev.cost.copy(Pipe.MTE1, nbytes, False)
    reads = [("L1", src.offset + c1a * fm.c1_elems * item, src.offset + c1b * fm.c1_elems * item)]
    if dev.check_races:                    # the rows this window reads in each channel block
        span = _read_span(fm, m_start, m)
        if span is not None:
            reads = [("L1", src.offset + (c * fm.c1_elems + span[0]) * item,
                      src.offset + (c * fm.c1_elems + span[1]) * item) for c in range(c1a, c1b)]
    core.issue(_MTE1, _WORK, int(Op.COPY_L1_TO_L0A), dur, lat=lat,
               name=f"{what} {m}x{k} L1->L0A", nbytes=nbytes,
               energy=copy_energy_pj(dev.chip, "L1", "L0A", nbytes), route="L1->L0A",
               reads=reads, writes=[("L0A", dst.offset, dst.offset + nbytes)])


# -- L0C -> out with per-channel parameters -------------------------------------------------------
def fixpipe_channelwise(dst, src: LocalTensor, m: int, n: int, *, dst_stride: int | None = None,
                        bias: LocalTensor | None = None, scale=None, offset: LocalTensor | None = None,
                        relu: bool = False) -> None:
    """Drain an (m, n) result from L0C to ``dst`` (GM tile with row stride ``dst_stride``, or UB)
    in ND, applying per output column j, in this order (Ascend C ``Fixpipe`` with a quant-
    parameter tensor, the per-channel VDEQ mode):

        y = (acc + bias[j]) * scale[j] + offset[j];  y = max(y, 0) if relu;  cast to dst dtype

    ``bias`` (acc dtype), ``scale`` and ``offset`` (float32) are LocalTensors of n values in L1;
    ``scale`` may also be one float (per-tensor). An int32 accumulator into a float dst needs a
    scale (the dequantisation). Batch-norm in inference is ``scale = gamma / sqrt(var + eps)``,
    ``offset = beta - mean * scale``: that is how Conv+BN+ReLU runs in one kernel."""
    drain("fixpipe_channelwise", dst, src, m, n, dst_stride=dst_stride, bias=bias, scale=scale,
          offset=offset, relu=relu)


__all__ = ["ConvGeom", "Fmatrix", "data_copy_strided", "load_3d", "fixpipe_channelwise"]
