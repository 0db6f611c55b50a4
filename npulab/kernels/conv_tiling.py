"""Host side of the img2col convolution: the tiling struct, group enlargement, the slab
geometry of every M tile, the "can implement" check and the default tiling function.

A convolution is the matmul C (M, N) = A (M, K) x B (K, N) with M = batch x output pixels,
N = output channels of a group and K = C1 x taps x C0 (the input channels of a group in blocks
of C0, times kd x kh x kw taps). The tiling cuts it as the matmul templates do
(:mod:`npulab.kernels.matmul_tiling`):

* **block tiles** TILE_M x TILE_N of C, spread over the cores by the matmul templates' block
  scheduler (with its swizzle), one L0C tile each;
* **L1 steps** of C1_STEP channel blocks: the feature-map *slab* (the input rows, x C1_STEP
  x W x C0, that the tile's output pixels read) and the FRACTAL_Z weight window
  (C1_STEP x taps x C0 by TILE_N) sit in L1, ``l1_buffers`` of each;
* **L0 steps** of TILE_K0 columns of K: ``load_3d`` expands the slab into L0A (img2col),
  ``load_data`` brings the weights into L0B, one ``mmad`` each.

**Group enlargement** (CANN's Conv2D tiling does the same): a group with few channels wastes
most of a C0 block, so E groups are merged into one with block-diagonal weights, E =
min(lcm(Cin_g, C0) / Cin_g, lcm(Cout_g, 16) / Cout_g, groups). A depthwise fp16 conv runs as
groups of 16 channels: the map moves without padding, the cube multiplies the zeros of the
block-diagonal weights (1/16 of its MACs are useful: depthwise belongs on the vector unit on a
real chip; here it is correct, not fast).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from functools import cached_property, lru_cache

import numpy as np

from .. import formats as F
from ..chips import ChipSpec, get_chip
from ..errors import BufferOverflowError, ShapeError
from ..lang.conv_load import ConvGeom
from ..sim.cost import mmad_cost
from ..sim.memory import fmt_bytes
from .matmul_tiling import MatmulTiling, best_swizzle
from ..arch import DEFAULT_CHIP, ceil_div, round_up

SUPPORTED = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.int8))
ACC_DTYPE = {np.dtype(np.float16): np.dtype(np.float32), np.dtype(np.float32): np.dtype(np.float32),
             np.dtype(np.int8): np.dtype(np.int32)}
EPI_SLOTS = 2              # the epilogue vectors of tile t+1 load while FixPipe reads tile t's
MAX_MNK = 4095
L0C_TILE_ELEMS = 32768     # 2 x (TILE_M x TILE_N) fp32 fill the 256 KiB L0C of the 910
MMAD_STARTUP_SHARE = 0.05  # the default tiling aims for mmads long enough to hide start-up
C04 = 4                    # channels per block of the C04 formats (NC1HWC0_C04, FRACTAL_Z_C04)


def use_c04(dtype, cin: int, groups: int, w: int) -> bool:
    """Whether a conv runs in the C04 formats, as CANN's Conv2DV2 picks them: at most 4 input
    channels, one group, not int8 (ops-nn ``conv2d_v2_op_graph.cpp``, ``GetC04EnableFlag``:
    ``fmapC <= 4 && groups == 1 && weight not int8``). A first layer's 3 RGB channels then fill
    4 of a block instead of 16, and K = kh x kw x 4 is padded to 16 once (``kbMin =
    AlignB(4 * hK * wK, k0)`` there) instead of per tap: the 7 x 7 stem's K is 208, not 784.
    npulab restricts it to float16 (CANN's C04 format lists name float16) and to rows of whole
    32-byte blocks (W a multiple of 4: the slab is copied in whole rows, see :func:`_box`)."""
    item = np.dtype(dtype).itemsize
    return (np.dtype(dtype) == np.float16 and cin <= C04 and groups == 1
            and (w * C04 * item) % 32 == 0)


@dataclass(frozen=True)
class ConvTiling:
    """The TilingData struct of the conv kernel: the problem (after group enlargement), the
    epilogue and the tile sizes."""
    # problem
    batch: int
    groups: int                # groups after enlargement (G')
    cin_e: int                 # input channels of one (enlarged) group
    cout_e: int                # output channels of one (enlarged) group
    cout: int                  # real output channels in all (the output's row length)
    geom: ConvGeom
    dtype: str
    out_dtype: str
    # epilogue
    has_bias: bool = False
    scale: str = "none"        # "none", "tensor" (scale_value) or "channel" (a vector)
    scale_value: float = 1.0
    has_offset: bool = False
    relu: bool = False
    c04: bool = False          # the small-channel first-layer format (see :func:`use_c04`): the
                               # map in C0 = 4 blocks, K = taps x 4 channels padded to 16 once
    gm_geom: ConvGeom | None = None  # strided read (see :func:`strided_read`): the input map as
                               # it lies in GM; ``geom`` is then the stride-1 map the kernel reads
    # tiles
    tile_m: int = 128
    tile_n: int = 128
    c1_step: int = 1           # C1_STEP: channel blocks per L1 step
    tile_k0: int = 16          # TILE_K0: columns of K per mmad
    l1_buffers: int = 2
    l0_buffers: int = 2
    l0c_buffers: int = 2
    w_resident: bool = False   # the tile column's weights (K x TILE_N) stay in L1, loaded one
                               # L1 step at a time while the first tile computes
    map_resident: bool = False # teams, 2-D: the input rows of a core's whole run stay in L1;
                               # each tile loads only the rows it adds (no halo read twice)
    block_dim: int = 1
    schedule: str = "cyclic"   # "cyclic": the matmul block scheduler deals block tiles round-
                               # robin; "teams": each core owns one tile column and a contiguous
                               # run of output rows (see :func:`block_work`)
    ramp: int = 0              # teams: > 0 starts each core's run with tiles of ramp, 2 x ramp,
                               # ... fractal rows (the first output reaches FixPipe early)
    taper: int = 0             # teams: > 0 ends each core's run with tiles of ..., 2 x taper,
                               # taper fractal rows (a small last tile drains fast)
    swizzle_offset: int = 1
    swizzle_direction: int = 0
    name: str = "custom"
    sample_loops: int = 0      # > 0: each block runs only its first N block tiles (estimates)

    # -- derived (the hot ones cached on the instance: the tiling search asks them millions of
    # times; a frozen dataclass compares and hashes by its fields only) -----------------------
    @cached_property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def acc_dtype(self) -> np.dtype:
        return ACC_DTYPE[self.np_dtype]

    @property
    def x_geom(self) -> ConvGeom:
        """The input map as it lies in GM (``geom`` unless the tiling reads it strided)."""
        return self.gm_geom or self.geom

    @cached_property
    def c0(self) -> int:
        """The feature map's channel block: 32 bytes (F.c0_of), or 4 channels with ``c04``."""
        return C04 if self.c04 else F.c0_of(self.np_dtype)

    @cached_property
    def k0(self) -> int:
        """The cube's K block (one fractal's depth, the weights' C0): 32 bytes of the dtype."""
        return F.c0_of(self.np_dtype)

    @cached_property
    def c1(self) -> int:
        return ceil_div(self.cin_e, self.c0)

    def step_k(self, cs: int) -> int:
        """K columns of an L1 step of ``cs`` channel blocks (C04: all of K, padded once)."""
        if self.c04:
            return self.k
        return cs * self.geom.taps * self.c0

    @property
    def m(self) -> int:
        return self.batch * self.geom.out_pixels

    @property
    def k(self) -> int:
        if self.c04:                          # FRACTAL_Z_C04: (tap, c) rows, padded to K0 once
            return round_up(self.geom.taps * C04, self.k0)
        return self.c1 * self.geom.taps * self.c0

    @property
    def n1(self) -> int:
        """16-channel fractal columns of one group's weights (FRACTAL_Z's N1)."""
        return ceil_div(self.cout_e, 16)

    @property
    def m_loops(self) -> int:
        return ceil_div(self.m, self.tile_m)

    @property
    def n_loops(self) -> int:
        return ceil_div(self.cout_e, self.tile_n)

    @property
    def core_loops(self) -> int:
        return self.groups * self.m_loops * self.n_loops

    @property
    def gemm(self) -> MatmulTiling:
        """The matmul the conv is, as the matmul templates' block scheduler sees it."""
        return MatmulTiling(batch=self.groups, m=self.m, n=self.cout_e, k=self.k, dtype=self.dtype,
                            tile_m=self.tile_m, tile_n=self.tile_n,
                            tile_k=self.step_k(self.c1_step), tile_k0=self.tile_k0,
                            l1_buffers=self.l1_buffers, l0_buffers=self.l0_buffers,
                            l0c_buffers=self.l0c_buffers, block_dim=self.block_dim,
                            swizzle_offset=self.swizzle_offset,
                            swizzle_direction=self.swizzle_direction, name=self.name)

    @property
    def vectors(self) -> tuple:
        """The per-channel epilogue vectors, in GM argument order."""
        return tuple(v for v, on in (("bias", self.has_bias), ("scale", self.scale == "channel"),
                                     ("offset", self.has_offset)) if on)

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def columns(self) -> int:
        """Tile columns of the whole problem: (enlarged) groups x N tiles."""
        return self.groups * self.n_loops

    def recipe(self) -> str:
        how = (f"teams={self.block_dim // max(1, self.columns)}"
               + (f" ramp={self.ramp}" if self.ramp else "") + (f" taper={self.taper}" if self.taper else "")
               if self.schedule == "teams" else
               f"swz={self.swizzle_offset}{'Zn' if self.swizzle_direction == 0 else 'Nz'}")
        return (f"{self.tile_m}x{self.tile_n} c1_step={self.c1_step} k0={self.tile_k0}"
                f"{' w_resident' if self.w_resident else ''}{' map_resident' if self.map_resident else ''}"
                f"{' c04' if self.c04 else ''}{' strided_read' if self.gm_geom else ''} "
                f"buf={self.l1_buffers}/{self.l0_buffers}/{self.l0c_buffers} "
                f"{how} blocks={self.block_dim}")


def strided_read(geom: ConvGeom) -> ConvGeom | None:
    """The map a 1 x 1 convolution with a stride reads, when it reads only the pixels it uses.

    A 1 x 1 kernel with stride s and no padding uses every s-th pixel of every s-th row (a
    ResNet downsample reads a quarter of its input). Copied in with strided bursts (one
    ``DataCopy`` per row and channel block: blockLen = C0, srcStride = s x C0) those pixels
    form a dense map of the output's size, over which the conv is a 1 x 1 stride-1 one: the
    returned geometry. None for any other conv. (``_box`` would otherwise copy whole rows,
    skipped pixels and all; CANN's graph engine gets the same saving by fusing a strided read
    into Conv2D.)"""
    g = geom
    if (g.kd, g.kh, g.kw) != (1, 1, 1) or any(g.pad) or tuple(g.stride) == (1, 1, 1):
        return None
    return ConvGeom(g.od, g.oh, g.ow, 1, 1, 1, (1, 1, 1), (1, 1, 1), (0, 0, 0), g.od, g.oh, g.ow)


# -- group enlargement --------------------------------------------------------------------------
def enlarge(groups: int, cin_g: int, cout_g: int, c0: int) -> int:
    """How many groups to merge into one (CANN's Conv2D ``enlarge``)."""
    if groups == 1:
        return 1
    e_in = math.lcm(cin_g, c0) // cin_g
    e_out = math.lcm(cout_g, 16) // cout_g
    return max(1, min(e_in, e_out, groups))


# -- the slab each M tile reads -----------------------------------------------------------------
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


def slab_elems(t: "ConvTiling") -> int:
    """The largest slab channel block (elements) any block tile of tiling ``t`` needs (with
    ``map_resident``: that any core's whole run of rows needs)."""
    if t.map_resident:
        return _run_slab(t.geom, t.batch, t.c0, t.m, t.tile_m, t.block_dim, t.columns, t.ramp, t.taper)
    if t.schedule != "teams":
        return max_slab(t.geom, t.batch, t.tile_m, t.c0)
    return _teams_slab(t.geom, t.batch, t.c0, t.m, t.tile_m, t.block_dim, t.columns, t.ramp, t.taper)


def run_rows(t: "ConvTiling", block: int) -> tuple:
    """(first row, rows) of the run of output rows team member ``block`` computes (teams)."""
    team = max(1, t.block_dim // t.columns)
    tiles = _team_rows(t.m, t.tile_m, team, block % team, t.ramp, t.taper)
    if not tiles:
        return 0, 0
    return tiles[0][0], tiles[-1][0] + tiles[-1][1] - tiles[0][0]


@lru_cache(maxsize=1024)
def _run_slab(geom, batch, c0, m_total, tile_m, block_dim, columns, ramp, taper) -> int:
    team = max(1, block_dim // columns)
    out = c0
    for r in range(team):
        tiles = _team_rows(m_total, tile_m, team, r, ramp, taper)
        if tiles:
            p0 = tiles[0][0]
            out = max(out, slab_boxes(geom, batch, p0, tiles[-1][0] + tiles[-1][1] - p0, c0)[1])
    return out


def map_rows_to_load(t: "ConvTiling", run_boxes, run_elems: int, loaded: dict, tile_boxes_) -> list:
    """map_resident: the copies (dst offset, src offset from the group's channel block 0 of
    image 0, block_count, block_len, src_stride, dst_stride) that bring the rows a tile reads
    and the run has not loaded yet into the run's slab, whole rows (clipped to the run's box),
    all C1 channel blocks in one strided copy per image; ``loaded`` {image: flat pixel the run
    has loaded up to} is updated."""
    g, c0 = t.geom, t.c0
    block = g.d * g.h * g.w * c0
    image = t.groups * t.c1 * block
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
                        t.c1, (hi - lo) * c0, block, run_elems))
            loaded[img] = hi
    return out


@lru_cache(maxsize=1024)
def _teams_slab(geom, batch, c0, m_total, tile_m, block_dim, columns, ramp, taper) -> int:
    team = max(1, block_dim // columns)
    return max(slab_boxes(geom, batch, p0, m, c0)[1] for r in range(team)
               for p0, m in _team_rows(m_total, tile_m, team, r, ramp, taper))


# -- who computes what ------------------------------------------------------------------------
@lru_cache(maxsize=4096)
def _team_rows(m_total: int, tile_m: int, team: int, r: int, ramp: int = 0, taper: int = 0) -> tuple:
    """(p0, m) of the M tiles of member ``r`` of a team of ``team`` cores: the team's output
    rows split into ``team`` contiguous runs, as equal as 16-row fractals allow, each run cut
    into the fewest tiles of at most ``tile_m`` rows, again as equal as fractals allow.

    ``ramp`` > 0 starts the run with tiles of ramp, 2 x ramp, 4 x ramp ... fractal rows (up to
    tile_m), so the first result is ready, and FixPipe busy, early; ``taper`` > 0 ends it the
    same way in reverse, so the last tile's FixPipe write, which nothing overlaps, is short.
    The tiles between stay large (long mmads)."""
    frac = ceil_div(m_total, 16)
    r0, r1 = r * frac // team, (r + 1) * frac // team
    rows = r1 - r0
    if rows <= 0:
        return ()
    cap = tile_m // 16
    left = rows
    ends = []
    for first in (ramp, taper):
        part, size = [], first
        while first > 0 and size < cap and left > 0:
            part.append(min(size, left))
            left -= part[-1]
            size *= 2
        ends.append(part)
    nt = ceil_div(left, cap)
    middle = [(j + 1) * left // nt - j * left // nt for j in range(nt)]
    bounds = [r0]
    for v in ends[0] + middle + ends[1][::-1]:
        bounds.append(bounds[-1] + v)
    out = []
    for a, b in zip(bounds, bounds[1:]):
        p0, p1 = a * 16, min(m_total, b * 16)
        if p1 > p0:
            out.append((p0, p1 - p0))
    return tuple(out)


def block_work(t: "ConvTiling", block: int) -> list:
    """The block tiles block ``block`` computes, in order: (group, first row, rows, n tile,
    columns).

    * ``cyclic``: the matmul templates' block scheduler (with its swizzle) numbers the uniform
      TILE_M x TILE_N tiles and deals them round-robin, tile i to block i mod block_dim;
    * ``teams``: the blocks form one team per tile column (block_dim is a multiple of the
      columns); a team splits the output rows into one contiguous run per member, so every
      core keeps one column's weights resident and the runs differ by at most one fractal
      row (a balance the uniform tiles of ``cyclic`` only reach when their count divides).

    ``sample_loops`` > 0 keeps only the first that many tiles (estimates)."""
    out = []
    if t.schedule == "teams":
        team = t.block_dim // t.columns
        col, r = divmod(block, team)
        grp, n_idx = divmod(col, t.n_loops)
        n = min(t.tile_n, t.cout_e - n_idx * t.tile_n)
        out = [(grp, p0, m, n_idx, n) for p0, m in _team_rows(t.m, t.tile_m, team, r, t.ramp, t.taper)]
    else:
        from .matmul_tiling import swizzle_coord
        gm = t.gemm
        for i in range(block, t.core_loops, t.block_dim):
            grp, m_idx, n_idx = swizzle_coord(gm, i)
            out.append((grp, m_idx * t.tile_m, min(t.tile_m, t.m - m_idx * t.tile_m), n_idx,
                        min(t.tile_n, t.cout_e - n_idx * t.tile_n)))
    return out[: t.sample_loops] if t.sample_loops else out


def map_copies(t: "ConvTiling", boxes, cs: int, c1_elems: int) -> list:
    """The strided copies (dst offset in the slab, src offset from the group's channel block
    c1_lo of image 0, block_count, block_len, src_stride, dst_stride) that bring ``cs`` channel
    blocks of an M tile's boxes into L1: one per box (per depth plane when a box holds part of
    several planes); a run of whole images is copied per channel block instead when that takes
    fewer copies (a 7 x 7 map at batch 32)."""
    if t.gm_geom is not None:
        return _strided_copies(t, boxes, cs, c1_elems)
    g, c0 = t.geom, t.c0
    plane = g.h * g.w * c0
    block = g.d * plane
    image = t.groups * t.c1 * block
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


def _strided_copies(t: "ConvTiling", boxes, cs: int, c1_elems: int) -> list:
    """map_copies of a strided read: the boxes are in the stride-1 map's pixels; each of
    their rows is one copy per channel block, of one C0 burst per pixel, ``stride`` pixels
    apart in GM."""
    g, x, c0 = t.geom, t.gm_geom, t.c0
    sd, sh, sw = x.stride
    plane = x.h * x.w * c0
    block = x.d * plane
    image = t.groups * t.c1 * block
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


# -- buffer demand -------------------------------------------------------------------------------
def buffer_demand(t: ConvTiling) -> dict[str, tuple[int, str]]:
    dt = t.np_dtype
    item, c0 = dt.itemsize, t.c0
    slab = t.c1_step * slab_elems(t) * item
    wts = t.step_k(t.c1_step) * round_up(t.tile_n, 16) * item
    epi = EPI_SLOTS * len(t.vectors) * round_up(t.tile_n * 4, 32)
    if t.map_resident:
        slab = t.c1 * slab_elems(t) * item
        if t.w_resident:
            wts = t.k * round_up(t.tile_n, 16) * item
            return _demand(t, slab, wts, epi, f"the run's map {fmt_bytes(slab)} + resident weights "
                                              f"{fmt_bytes(wts)}", slab + wts + epi)
        return _demand(t, slab, wts, epi, f"the run's map {fmt_bytes(slab)} + {t.l1_buffers} x weights "
                                          f"{fmt_bytes(wts)}", slab + t.l1_buffers * wts + epi)
    if t.w_resident:
        wts = t.k * round_up(t.tile_n, 16) * item
        return _demand(t, slab, wts, epi, f"{t.l1_buffers} x map slab {fmt_bytes(slab)} + resident "
                                          f"weights {fmt_bytes(wts)}", t.l1_buffers * slab + wts + epi)
    return _demand(t, slab, wts, epi, f"{t.l1_buffers} x (map slab {fmt_bytes(slab)} + weights "
                                      f"{fmt_bytes(wts)})", t.l1_buffers * (slab + wts) + epi)


def _demand(t, slab, wts, epi, how, l1):
    dt = t.np_dtype
    item = dt.itemsize
    l0a = t.l0_buffers * round_up(t.tile_m, 16) * t.tile_k0 * item
    l0b = t.l0_buffers * t.tile_k0 * round_up(t.tile_n, 16) * item
    l0c = t.l0c_buffers * round_up(t.tile_m, 16) * round_up(t.tile_n, 16) * 4
    return {
        "L1": (l1, how + (f" + {EPI_SLOTS} x {len(t.vectors)} epilogue vectors" if t.vectors else "")),
        "L0A": (l0a, f"{t.l0_buffers} x img2col {t.tile_m}x{t.tile_k0} {dt.name}"),
        "L0B": (l0b, f"{t.l0_buffers} x weights {t.tile_k0}x{t.tile_n} {dt.name}"),
        "L0C": (l0c, f"{t.l0c_buffers} x C {t.tile_m}x{t.tile_n} {t.acc_dtype.name}"),
    }


def problems(t: ConvTiling, chip: "ChipSpec | str" = DEFAULT_CHIP) -> list[str]:
    chip = get_chip(chip)
    out = []
    c0 = t.k0
    for name, v in (("tile_m", t.tile_m), ("tile_n", t.tile_n)):
        if v < 16 or v % 16 or v > MAX_MNK:
            out.append(f"{name}={v} must be a multiple of 16 in 16..{MAX_MNK // 16 * 16}")
    if t.tile_k0 < c0 or t.tile_k0 % c0 or t.tile_k0 > MAX_MNK:
        out.append(f"tile_k0={t.tile_k0} must be a multiple of C0={c0} ({t.dtype}) up to {MAX_MNK}")
    if not 1 <= t.c1_step <= t.c1:
        out.append(f"c1_step={t.c1_step} must be in 1..C1={t.c1}")
    for name in ("l1_buffers", "l0_buffers", "l0c_buffers"):
        if getattr(t, name) not in (1, 2):
            out.append(f"{name}={getattr(t, name)} must be 1 or 2")
    if t.block_dim < 1:
        out.append(f"block_dim={t.block_dim} must be at least 1")
    for name in ("ramp", "taper"):
        if getattr(t, name) < 0:
            out.append(f"{name}={getattr(t, name)} must be 0 (even tiles) or a number of fractal rows")
    if t.schedule not in ("cyclic", "teams"):
        out.append(f"schedule={t.schedule!r} must be 'cyclic' or 'teams'")
    elif t.map_resident and (t.schedule != "teams" or t.geom.d != 1):
        out.append("map_resident is for schedule='teams' (a core's tiles are one run of rows) and a "
                   "2-D convolution (D = 1)")
    elif t.schedule == "teams" and t.block_dim % t.columns:
        out.append(f"schedule='teams' requires block_dim ({t.block_dim}) to be a multiple of the "
                   f"{t.columns} tile columns (groups x N tiles); change block_dim or TILE_N, or "
                   f"use schedule='cyclic'")
    if out:
        return out
    for buf, (need, how) in buffer_demand(t).items():
        cap = chip.buffer_bytes(buf)
        if need > cap:
            out.append(f"{buf} needs {fmt_bytes(need)} ({need} B: {how}) but holds "
                       f"{fmt_bytes(cap)} ({cap} B) on chip '{chip.name}'")
    return out


def can_implement(t: ConvTiling, chip: "ChipSpec | str" = DEFAULT_CHIP) -> bool:
    """Raise BufferOverflowError / ShapeError naming what does not fit; else True."""
    found = problems(t, chip)
    if not found:
        return True
    cls = BufferOverflowError if any(" needs " in p for p in found) else ShapeError
    raise cls(f"conv tiling {t.recipe()} cannot run: " + "; ".join(found) +
              ". Fix: lower TILE_M / TILE_N / C1_STEP / TILE_K0 or use fewer buffers.")


# -- the default tiling ------------------------------------------------------------------------
BLOCK_TILES = ((128, 256), (256, 128), (512, 64), (256, 64), (128, 128), (64, 256), (128, 64),
               (64, 128), (64, 64), (32, 64), (64, 32), (32, 32), (16, 64), (16, 32), (16, 16))


def busiest_block(t: ConvTiling) -> int:
    """The block with the most fractal steps (ties: the lowest index)."""
    if t.schedule != "teams":
        return 0                                               # block 0 runs the most tiles
    team = t.block_dim // t.columns
    load = [sum(ceil_div(m, 16) for _, _, m, _, _ in block_work(replace(t, sample_loops=0), r))
            for r in range(team)]
    return max(range(team), key=lambda r: (load[r], -r))


def estimate_cycles(t: ConvTiling, chip) -> float:
    """A quick analytic estimate of the kernel's cycles (ranks tilings before the search).

    A copy occupies its pipe for bytes / rate and is then in flight for the pipe's start-up
    latency (:mod:`npulab.sim.gm`, :mod:`npulab.sim.timeline`): back-to-back copies overlap
    their start-ups, so no occupancy below has a start-up term (as in
    :func:`npulab.kernels.autotune.estimate_cycles`). On the busiest core:

    * per L1 step the slowest of the cube (its mmads' fractal steps; their start-up overlaps), MTE1 (img2col and
      weight loads), MTE2 (that step's bytes at the MTE2 rate, or its HBM part at the core's
      read share: the reads of a range by several cores share one fetch, a core's reads and
      writes split its share of HBM; map and weight copies each the longer of their L2 and HBM
      times) and the round trip of an L1 slot (copy, latency, until MTE1 has expanded it,
      over ``l1_buffers``);
    * FixPipe: the core's writes at its write share;
    * filling the pipeline (the first step's copy and its latency) and draining it (the last
      tile's FixPipe write and its latency)."""
    chip = get_chip(chip)
    c0, item = t.c0, t.np_dtype.itemsize
    p = chip.pipes
    out_item = np.dtype(t.out_dtype).itemsize
    busiest = busiest_block(t)
    work = block_work(replace(t, sample_loops=0), busiest)
    if not work:
        return 0.0
    active = min(t.block_dim, chip.ai_cores)
    share = chip.gm_share_bytes_per_cycle(active)
    if t.schedule == "teams":
        map_readers, team = t.columns, t.block_dim // t.columns
    else:
        map_readers, team = max(1, min(t.n_loops, active)), max(1, active // max(1, t.columns))
    steps, tiles = [], []                          # (cube, mte1, map bytes, weight bytes)
    cols_seen = set()
    if t.map_resident:
        run_boxes, run_elems = slab_boxes(t.geom, t.batch, *run_rows(t, busiest), c0)
        loaded: dict = {}
    for grp, m_off, m, n_idx, n in work:
        boxes, c1_elems = slab_boxes(t.geom, t.batch, m_off, m, c0)
        if t.map_resident:                         # only the rows the run has not loaded yet
            new_rows = item * sum(c[2] * c[3] for c in map_rows_to_load(t, run_boxes, run_elems,
                                                                        loaded, boxes))
        m1, n16 = ceil_div(m, 16), round_up(n, 16)
        new_col = (grp, n_idx) not in cols_seen
        cols_seen.add((grp, n_idx))
        first_step = len(steps)
        for c1_lo in range(0, t.c1, t.c1_step):
            cs = min(t.c1_step, t.c1 - c1_lo)
            kc = t.step_k(cs)
            ks = [min(t.tile_k0, kc - k) for k in range(0, kc, t.tile_k0)]
            costs = [mmad_cost(chip, m, n16, kk, t.np_dtype) for kk in ks]
            cu = sum(c[0] for c in costs)          # pipelined mmads: their latency overlaps
            mte1 = (m1 * 16 + n16) * kc * item / p.mte1_bytes_per_cycle
            l0_trip = (mte1 + len(ks) * p.mte1_startup_cycles + cu) / t.l0_buffers
            wload = (not t.w_resident) or new_col
            # an L1 slot is free once MTE1 has expanded its last K0 slice: MTE1 runs ahead of
            # the cube by the L0 buffers, so the slot waits for all but that many mmads
            hold = max(mte1 + len(ks) * p.mte1_startup_cycles,
                       cu * max(0, len(ks) - t.l0_buffers) / len(ks))
            map_b = (new_rows if c1_lo == 0 else 0) if t.map_resident else cs * c1_elems * item
            steps.append((max(cu, l0_trip), mte1, map_b, kc * n16 * item if wload else 0,
                          hold))
        tiles.append((first_step, len(steps), m * n * out_item))
    w_bytes = sum(s[3] for s in steps)
    writes = sum(x[2] for x in tiles)
    # HBM: a map range is fetched once for its readers; a column's weights once for the
    # cores of its team (L2 serves a core's and its team's repeats of the same window)
    w_col = t.k * round_up(t.tile_n, 16) * item
    w_hbm = min(w_bytes, len(cols_seen) * w_col / team)
    w_frac = w_hbm / max(1, w_bytes)
    f0, f1, _ = tiles[0]
    l0, l1, last_w = tiles[-1]

    def hbm_of(s):
        return s[2] / map_readers + s[3] * w_frac

    # the first tile's reads fill the pipeline and the last tile's write drains it, each
    # with the core's whole share; between them reads and writes split it (:mod:`npulab.sim.gm`)
    mid_reads = sum(hbm_of(s) for s in steps[f1:])
    mid_writes = writes - last_w
    read_share = share * mid_reads / max(1.0, mid_reads + mid_writes) if mid_reads else share
    write_share = share * mid_writes / max(1.0, mid_reads + mid_writes) if mid_writes else share

    l2_rate = min(p.mte2_bytes_per_cycle, max(share, chip.memory.l2_bytes_per_cycle / active))

    def m2(s, rs):
        # each copy takes the longer of its L2 time and its HBM part at its share: map and
        # weight copies separately, then summed
        rs = max(1e-9, rs)
        return (max(s[2] / l2_rate, s[2] / map_readers / rs)
                + max(s[3] / l2_rate, s[3] * w_frac / rs))

    m2s = [m2(st, share if i < f1 else read_share) for i, st in enumerate(steps)]
    lat2 = p.mte2_startup_cycles
    compute = sum(max(st[0], st[1], m, (m + lat2 + st[4]) / t.l1_buffers) for st, m in zip(steps, m2s))
    first = m2s[0] + lat2
    wrate = min(p.fix_bytes_per_cycle, write_share)
    fix = mid_writes / wrate + last_w / min(p.fix_bytes_per_cycle, share)
    first_tile = sum(st[0] for st in steps[f0:f1])
    last_tile = sum(st[0] for st in steps[l0:l1])
    drain = p.fix_startup_cycles + last_w / min(p.fix_bytes_per_cycle, share)
    mte2 = sum(m2s)
    # each bound with the part of the pipeline it cannot overlap: the cube and MTE2 wait for
    # the last write; FixPipe starts when the first tile is done
    return max(first + compute + drain, lat2 + mte2 + last_tile + drain, first + first_tile + fix)


def _steps(c1: int) -> list[int]:
    out, s = [], c1
    while True:
        out.append(s)
        if s == 1:
            return out
        s = ceil_div(s, 2)


def _k0(t: ConvTiling, chip, tm: int, tn: int) -> int:
    """The largest TILE_K0 (up to 256) that double-buffers in L0A and L0B for a tm x tn tile."""
    item = t.np_dtype.itemsize
    kmax = min(chip.buffer_bytes("L0A") // 2 // (round_up(tm, 16) * item),
               chip.buffer_bytes("L0B") // 2 // (round_up(tn, 16) * item))
    return min(kmax // t.k0 * t.k0, 256)


def _finish(cand: ConvTiling, c1_step: int, resident: bool, k0: int) -> ConvTiling:
    return replace(cand, c1_step=c1_step, w_resident=resident,
                   tile_k0=min(k0, round_up(cand.step_k(c1_step), cand.k0)))


def candidates(t: ConvTiling, chip):
    """Every tiling the default tiling function considers for problem ``t``: uniform block
    tiles dealt round-robin (``cyclic``) and, where the tile columns divide the cores, one
    team of cores per column (``teams``) with 1 to 8 tiles per core; for each the largest
    TILE_K0 that fits L0A/L0B, C1_STEP halving from C1, weights resident in L1 or streamed."""
    chip = get_chip(chip)
    c0 = t.k0
    seen = set()
    m1 = ceil_div(t.m, 16)
    balanced = []                  # block tiles whose count is close to a multiple of the cores
    for tn in (256, 128, 64):
        n_loops = t.groups * ceil_div(t.cout_e, tn)
        for rounds in range(1, 9):
            m_loops = ceil_div(rounds * chip.ai_cores, n_loops)
            tm = 16 * ceil_div(m1, m_loops)
            if 16 <= tm <= L0C_TILE_ELEMS // tn:
                balanced.append((tm, tn))
    shapes = []
    for tm, tn in BLOCK_TILES + tuple(balanced):
        tm = max(16, min(tm, round_up(t.m, 16)))
        tn = max(16, min(tn, round_up(t.cout_e, 16)))
        if (tm, tn) not in seen:
            seen.add((tm, tn))
            base = replace(t, tile_m=tm, tile_n=tn, schedule="cyclic")
            shapes.append(replace(base, block_dim=min(chip.ai_cores, base.core_loops)))
    # teams: one column per TILE_N choice whose column count divides into the cores
    for tn in sorted({min(v, round_up(t.cout_e, 16)) for v in (256, 192, 128, 96, 64, 48, 32, 16)},
                     reverse=True):
        cols = t.groups * ceil_div(t.cout_e, tn)
        if cols > chip.ai_cores:
            continue
        team = chip.ai_cores // cols
        rows = ceil_div(m1, team)                     # fractal rows of the busiest member
        # the tallest tile whose L0A still double-buffers one channel block's taps x C0
        # (TILE_K0 = a whole step of C1_STEP = 1: the fewest mmads, so the fewest start-ups)
        tk = t.step_k(1)
        tm_k = chip.buffer_bytes("L0A") // 2 // (tk * t.np_dtype.itemsize) // 16 * 16
        tms = []
        for per_core in range(1, 9):               # 1 to 8 tiles a core, the first that fit
            tm = 16 * ceil_div(rows, per_core)
            if tm * tn <= L0C_TILE_ELEMS:
                tms.append(tm)
                if per_core * 16 >= rows:
                    break
        if tk > c0 and 16 <= tm_k < rows * 16:
            tms.append(tm_k)
        for tm in tms:
            if tm * tn > L0C_TILE_ELEMS or (tm, tn, "teams") in seen:
                continue
            seen.add((tm, tn, "teams"))
            for ramp, taper in TAPERS:
                if max(ramp, taper) < tm // 16:
                    shapes.append(replace(t, tile_m=tm, tile_n=tn, schedule="teams", block_dim=team * cols,
                                          ramp=ramp, taper=taper))
    for base in shapes:
        k0 = _k0(base, chip, base.tile_m, base.tile_n)
        if k0 < c0:
            continue
        # teams with a kernel wider than 1 x 1: also keep each core's input rows in L1
        maps = (False, True) if base.schedule == "teams" and t.geom.taps > 1 and t.geom.d == 1 else (False,)
        for resident in (True, False):
            for c1_step in _steps(t.c1):
                for map_res in maps if resident else (False,):      # map resident: weights too
                    cand = replace(_finish(base, c1_step, resident, k0), map_resident=map_res)
                    if not problems(cand, chip):
                        yield cand


#: (ramp, taper) pairs the teams candidates try
TAPERS = ((0, 0), (0, 2), (1, 0), (1, 2), (2, 4))
#: tilings simulated per search (the best estimates, and the best of each schedule)
SEARCH_LIMIT = 12
#: the search simulates only the best estimates within this factor of the best one, and the best
#: of each kind (schedule, weights and map resident or not) within KIND_SLACK: the estimate is
#: within a few per cent for the winners, so the far ones are not worth a simulation
SEARCH_SLACK = 1.10
KIND_SLACK = 1.25
#: below this estimate (cycles) the default tiling trusts the estimate and simulates nothing
SEARCH_MIN_CYCLES = 2000
_SEARCHED: dict = {}


def _swizzled(t: ConvTiling, chip) -> ConvTiling:
    if t.schedule == "teams":
        return t
    sw = best_swizzle(t.gemm, chip)
    return replace(t, swizzle_offset=sw["swizzle_offset"], swizzle_direction=sw["swizzle_direction"])


def default_tiling(t: ConvTiling, chip: "ChipSpec | str" = DEFAULT_CHIP, *, search: bool | None = None) -> ConvTiling:
    """The tiling used when none is given.

    Every candidate of :func:`candidates` is ranked by :func:`estimate_cycles`. When
    ``search`` (default: when the best estimate passes ``SEARCH_MIN_CYCLES``, i.e. a layer
    worth tuning) the ``SEARCH_LIMIT`` best, plus the best of each schedule with weights resident
    and streamed and the map resident or not, are simulated in
    timing mode (no operand data) and the fewest simulated cycles win: the estimate ranks,
    the simulator decides. Results are kept in memory per (chip, problem). Cyclic tilings
    take the swizzle of the matmul templates' :func:`~npulab.kernels.matmul_tiling.best_swizzle`."""
    chip = get_chip(chip)
    key = (chip, replace(t, name="", sample_loops=0), search)
    hit = _SEARCHED.get(key)
    if hit is not None:
        return hit
    scored = []
    for cand in candidates(t, chip):
        cand = _swizzled(cand, chip)
        scored.append((estimate_cycles(cand, chip), len(scored), cand))
    if not scored:
        raise BufferOverflowError(f"no conv tiling fits chip '{chip.name}' for a {t.geom.kd}x"
                                  f"{t.geom.kh}x{t.geom.kw} kernel over a {t.geom.w}-wide map "
                                  f"(even a 16 x 16 tile with one channel block overflows L1)")
    scored.sort(key=lambda s: (s[0], s[1]))
    best = scored[0][2]
    if search or (search is None and scored[0][0] > SEARCH_MIN_CYCLES):
        from .conv import simulate
        best_est = scored[0][0]
        pick = [s for s in scored[:SEARCH_LIMIT] if s[0] <= best_est * SEARCH_SLACK]
        kinds = [(sch, res, mres) for sch in ("cyclic", "teams") for res in (True, False)
                 for mres in (False, True)]
        for kind in kinds:
            top = next((s for s in scored if (s[2].schedule, s[2].w_resident, s[2].map_resident) == kind),
                       None)
            if top is not None and top not in pick and top[0] <= best_est * KIND_SLACK:
                pick.append(top)
        sims = [(simulate(c, chip).cycles, i, c) for _, i, c in pick]
        best = min(sims, key=lambda s: (s[0], s[1]))[2]
    out = replace(best, name="default")
    _SEARCHED[key] = out
    return out


__all__ = ["ConvTiling", "enlarge", "tile_boxes", "slab_boxes", "max_slab", "slab_elems", "block_work",
           "busiest_block", "buffer_demand", "problems", "can_implement", "estimate_cycles",
           "default_tiling", "candidates", "map_copies", "SUPPORTED", "ACC_DTYPE", "EPI_SLOTS",
           "SEARCH_LIMIT", "SEARCH_MIN_CYCLES", "C04", "use_c04", "run_rows", "map_rows_to_load",
           "strided_read"]
