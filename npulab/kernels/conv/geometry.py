"""Where each M tile's input pixels lie: the slab geometry of the img2col convolution.

A block tile of C covers ``m`` output rows (image, od, oh, ow flattened); the input pixels they
read form, per image, a *box* of depth planes and flat pixel ranges (:func:`slab_boxes`), which
MTE2 copies into the L1 slab one strided ``DataCopy`` per box and channel block
(:func:`map_copies`). With a strided read (a 1 x 1 conv with a stride) a box's rows are copied
one C0 burst per pixel instead. With ``map_resident`` a core copies only the rows a tile adds
to its run (:func:`map_rows_to_load`). Everything here depends on the problem alone.
"""
from __future__ import annotations

from functools import lru_cache

from ...arch import ceil_div, round_up
from ...lang.conv_load import ConvGeom
from .problem import C04, ConvProblem


def _box(geom: ConvGeom, img: int, q0: int, q1: int, whole_rows: bool = False) -> tuple:
    """(image, d0, nd, start, length): the input pixels output pixels q0..q1 (inclusive, one
    image) read: depth planes d0..d0+nd-1, and in each the ``length`` pixels from flat index
    ``start`` (= row x W + column). Whole rows, except that the first row is only needed from
    the first output pixel's first tap and the last row up to the last pixel's last tap
    (when no padding clips them): a 1x1 conv reads exactly its pixels. ``whole_rows``: every
    row whole (C04 maps: a pixel is 8 bytes, a burst must be whole 32-byte blocks)."""
    g = geom
    hw = g.oh * g.ow
    od0, oh0, ow0 = q0 // hw, (q0 % hw) // g.ow, q0 % g.ow
    od1, oh1, ow1 = q1 // hw, (q1 % hw) // g.ow, q1 % g.ow
    (sd, sh, sw), (dd, dh, dw), (pd, ph, pw) = g.stride, g.dilation, g.pad
    d_lo, d_hi = max(0, od0 * sd - pd), min(g.d - 1, od1 * sd - pd + (g.kd - 1) * dd)
    if od0 == od1:
        r_lo, r_hi = oh0 * sh - ph, oh1 * sh - ph + (g.kh - 1) * dh
        # clamped to [0, w] and [-1, w - 1]: a first (last) row whose pixels read only padding
        # is not needed at all, the slab starts at the next (ends with the previous) row
        c_lo = min(g.w, max(0, ow0 * sw - pw)) if r_lo >= 0 else 0
        c_hi = max(-1, min(g.w - 1, ow1 * sw - pw + (g.kw - 1) * dw)) if r_hi <= g.h - 1 else g.w - 1
        r_lo, r_hi = max(0, r_lo), min(g.h - 1, r_hi)
    else:
        r_lo, r_hi, c_lo, c_hi = 0, g.h - 1, 0, g.w - 1
    if whole_rows:
        c_lo, c_hi = 0, g.w - 1
    start, end = r_lo * g.w + c_lo, r_hi * g.w + c_hi
    if d_hi < d_lo or end < start:
        return img, d_lo, 0, start, 0
    return img, d_lo, d_hi - d_lo + 1, start, end - start + 1


def tile_boxes(geom: ConvGeom, batch: int, tile_m: int, c0: int, m_idx: int) -> tuple:
    """(boxes, c1_elems) of M tile ``m_idx`` (rows m_idx x tile_m ..): see :func:`slab_boxes`."""
    p0 = m_idx * tile_m
    return slab_boxes(geom, batch, p0, min(batch * geom.out_pixels, p0 + tile_m) - p0, c0)


@lru_cache(maxsize=16384)
def slab_boxes(geom: ConvGeom, batch: int, p0: int, m: int, c0: int) -> tuple:
    """(boxes, c1_elems) of the ``m`` output rows from ``p0`` (image, od, oh, ow flattened):
    each box (image, d0, nd, start, length, base) with its start ``base`` in a slab channel
    block, and the elements of one channel block."""
    P = geom.out_pixels
    p1 = p0 + m - 1
    boxes, base = [], 0
    for img in range(p0 // P, p1 // P + 1):
        q0, q1 = max(p0, img * P) - img * P, min(p1, img * P + P - 1) - img * P
        b = _box(geom, img, q0, q1, whole_rows=c0 == C04)
        boxes.append(b + (base,))
        base += b[2] * b[4] * c0
    return tuple(boxes), max(base, c0)


@lru_cache(maxsize=1024)
def max_slab(geom: ConvGeom, batch: int, tile_m: int, c0: int) -> int:
    """The largest slab channel block (elements) any M tile of a uniform tiling needs."""
    m_loops = ceil_div(batch * geom.out_pixels, tile_m)
    return max(tile_boxes(geom, batch, tile_m, c0, i)[1] for i in range(m_loops))


def map_rows_to_load(p: ConvProblem, run_boxes, run_elems: int, loaded: dict, tile_boxes_) -> list:
    """map_resident: the copies (dst offset, src offset from the group's channel block 0 of
    image 0, block_count, block_len, src_stride, dst_stride) that bring the rows a tile reads
    and the run has not loaded yet into the run's slab, whole rows (clipped to the run's box),
    all C1 channel blocks in one strided copy per image; ``loaded`` {image: flat pixel the run
    has loaded up to} is updated."""
    g, c0 = p.geom, p.c0
    block = g.d * g.h * g.w * c0
    image = p.groups * p.c1 * block
    run = {b[0]: b for b in run_boxes}
    out = []
    for img, _d0, nd, start, length, _base in tile_boxes_:
        if nd == 0 or length == 0:
            continue
        _, d0r, ndr, start_r, length_r, base_r = run[img]
        lo = loaded.get(img, start_r)
        need = round_up(start + length, g.w)            # to the end of the tile's last row
        hi = min(start_r + length_r, need)
        if hi > lo:
            out.append((base_r + (lo - start_r) * c0, img * image + d0r * g.h * g.w * c0 + lo * c0,
                        p.c1, (hi - lo) * c0, block, run_elems))
            loaded[img] = hi
    return out


def map_copies(p: ConvProblem, boxes, cs: int, c1_elems: int) -> list:
    """The strided copies (dst offset in the slab, src offset from the group's channel block
    c1_lo of image 0, block_count, block_len, src_stride, dst_stride) that bring ``cs`` channel
    blocks of an M tile's boxes into L1: one per box (per depth plane when a box holds part of
    several planes); a run of whole images is copied per channel block instead when that takes
    fewer copies (a 7 x 7 map at batch 32)."""
    if p.gm_geom is not None:
        return _strided_copies(p, boxes, cs, c1_elems)
    g, c0 = p.geom, p.c0
    plane = g.h * g.w * c0
    block = g.d * plane
    image = p.groups * p.c1 * block
    full = [b[2] == g.d and b[4] == g.h * g.w for b in boxes]
    out, i = [], 0
    while i < len(boxes):
        j = i
        while j < len(boxes) and full[j]:
            j += 1
        if j - i >= 2 and cs < j - i:
            img, base = boxes[i][0], boxes[i][5]
            out += [(c * c1_elems + base, img * image + c * block, j - i, block, image, block)
                    for c in range(cs)]
            i = j
            continue
        img, d0, nd, start, length, base = boxes[i]
        i += 1
        if nd == 0 or length == 0:
            continue                              # every tap of these pixels is padding
        src = img * image + d0 * plane + start * c0
        if length == g.h * g.w:                   # whole planes: contiguous per channel block
            out.append((base, src, cs, nd * plane, block, c1_elems))
        else:
            out += [(base + z * length * c0, src + z * plane, cs, length * c0, block, c1_elems)
                    for z in range(nd)]
    return out


def _strided_copies(p: ConvProblem, boxes, cs: int, c1_elems: int) -> list:
    """map_copies of a strided read: the boxes are in the stride-1 map's pixels; each of
    their rows is one copy per channel block, of one C0 burst per pixel, ``stride`` pixels
    apart in GM."""
    g, x, c0 = p.geom, p.gm_geom, p.c0
    sd, sh, sw = x.stride
    plane = x.h * x.w * c0
    block = x.d * plane
    image = p.groups * p.c1 * block
    out = []
    for img, d0, nd, start, length, base in boxes:
        for z in range(nd):
            at = base + z * length * c0
            for r, c, n in _row_runs(start, length, g.w):
                src = img * image + (d0 + z) * sd * plane + (r * sh * x.w + c * sw) * c0
                dst = at + (r * g.w + c - start) * c0
                out += [(dst + k * c1_elems, src + k * block, n, c0, sw * c0, c0) for k in range(cs)]
    return out


def _row_runs(start: int, length: int, w: int) -> list:
    """(row, first column, pixels) of each row that flat pixels start .. start+length-1 touch."""
    out, p, end = [], start, start + length
    while p < end:
        r, c = divmod(p, w)
        n = min(w - c, end - p)
        out.append((r, c, n))
        p += n
    return out


__all__ = ["tile_boxes", "slab_boxes", "max_slab", "map_copies", "map_rows_to_load"]
