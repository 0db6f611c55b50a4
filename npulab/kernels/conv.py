"""Convolution on the cube by img2col, as a catlass-style template (lab 06 walks through it).

What you learn here:

* a convolution **is a matmul**: C (batch x output pixels, Cout) = A (img2col) x B (weights),
  K = C1 x taps x C0; who computes which block tile is
  :func:`~npulab.kernels.conv_tiling.block_work`: either the matmul templates' **block
  scheduler** (with its swizzle) dealing uniform tiles round-robin, or **teams**: one team of
  cores per tile column, each member owning a contiguous run of output rows (balanced to a
  fractal row), cut into tiles that may start small (``ramp``: FixPipe gets work early) and end
  small (``taper``: the last write, which nothing overlaps, is short);
* with ``w_resident`` a core keeps its tile column's weights in L1 across its tiles, loaded one
  L1 step at a time during the first tile (its first mmad waits for one step, not all);
* with ``map_resident`` (teams, 2-D) a core keeps the input rows of its whole run of output
  rows in L1: each tile copies only the rows it adds, so the halo rows that neighbouring tiles
  share cross GM once (the slab of a tile otherwise reloads them);
* C04 (:func:`~npulab.kernels.conv_tiling.use_c04`): a map of at most 4 channels moves in
  blocks of 4 channels and K = taps x 4 is padded to 16 once (the first layer's format);
* the **block conv-mmad** walks K in L1 steps of C1_STEP channel blocks: the feature map
  moves GM -> L1 (NC1HWC0, one strided copy per image box, MTE2) once per tile, the weights
  move in FRACTAL_Z (already the NZ layout L0B wants: no conversion), then per TILE_K0 columns
  ``load_3d`` expands the slab into L0A (img2col on MTE1: the expansion costs MTE1 time, not
  GM bandwidth), ``load_data`` loads the weights into L0B and ``mmad`` accumulates in L0C;
* the **epilogue** drains L0C through FixPipe: + bias, x a dequant scale (int8), the
  per-channel scale/offset of a batch-norm, ReLU, the cast; so Conv+BN+ReLU writes GM once.

Layouts in GM: input N C1 D H W C0 per (enlarged) group (NC1HWC0 for 2-D: D = 1), weights
FRACTAL_Z (C1 x taps, N1, 16, C0) per group, output ND (batch x pixels, Cout) = NHWC. The host
functions below make these from NCHW (CANN's TransData, outside the kernel).
Host tiling: :mod:`npulab.kernels.conv_tiling`; the public ops: :mod:`npulab.ops.conv`.
"""
from __future__ import annotations

import numpy as np

from .. import formats as F
from .. import lang
from ..errors import ShapeError
from ..lang import (A1, A2, B1, B2, CO1, PIPE_FIX, PIPE_MTE2, TPipe, Queue, TBuf, data_copy_pad,
                    fixpipe, get_block_idx, load_data, mmad, set_flag, wait_flag)
from ..lang.conv_load import ConvGeom, Fmatrix, data_copy_strided, fixpipe_channelwise, load_3d
from .conv_tiling import (C04, EPI_SLOTS, SUPPORTED, ConvTiling, block_work, can_implement, enlarge,
                          map_copies, map_rows_to_load, run_rows, slab_boxes, strided_read,
                          use_c04)
from ..arch import DEFAULT_CHIP, ceil_div, round_up


# -- host side: the problem and the layouts --------------------------------------------------------
def conv_output_size(size: int, k: int, stride: int, dilation: int, pad0: int, pad1: int) -> int:
    return (size + pad0 + pad1 - dilation * (k - 1) - 1) // stride + 1


def make_problem(x_shape, w_shape, dtype, stride=(1, 1, 1), pads=((0, 0), (0, 0), (0, 0)),
                 dilation=(1, 1, 1), groups: int = 1, *, has_bias=False, scale="none",
                 scale_value=1.0, has_offset=False, relu=False, out_dtype=None,
                 c04: bool | None = None) -> ConvTiling:
    """The ConvTiling of a problem (tiles not chosen yet). x_shape (N, Cin, D, H, W), w_shape
    (Cout, Cin / groups, kd, kh, kw); pads ((front, back), (top, bottom), (left, right)).
    ``c04``: use the small-channel C04 formats (default: when
    :func:`~npulab.kernels.conv_tiling.use_c04` says CANN would)."""
    dt = np.dtype(dtype)
    if dt not in SUPPORTED:
        raise ShapeError(f"conv: dtype {dt} is not supported; expected float16, float32 or int8")
    n, cin, d, h, w = (int(v) for v in x_shape)
    cout, cin_g, kd, kh, kw = (int(v) for v in w_shape)
    if groups < 1 or cin % groups or cout % groups:
        raise ShapeError(f"conv: groups={groups} must divide in_channels={cin} and out_channels={cout}")
    if cin_g != cin // groups:
        raise ShapeError(f"conv: weight has {cin_g} input channels per group, the input has "
                         f"{cin} channels / {groups} groups = {cin // groups}")
    out = tuple(conv_output_size(s, k, st, dl, p0, p1) for s, k, st, dl, (p0, p1) in
                zip((d, h, w), (kd, kh, kw), stride, dilation, pads))
    if min(out) < 1:
        raise ShapeError(f"conv: the output would be {out} (input {(d, h, w)}, kernel {(kd, kh, kw)}, "
                         f"stride {stride}, dilation {dilation}, pads {pads}); the dilated kernel "
                         f"must fit the padded input")
    geom = ConvGeom(d, h, w, kd, kh, kw, tuple(stride), tuple(dilation), tuple(p[0] for p in pads), *out)
    dense = strided_read(geom)
    c0 = F.c0_of(dt)
    cout_g = cout // groups
    e = enlarge(groups, cin_g, cout_g, c0)
    if out_dtype is None:
        out_dtype = ("float16" if scale != "none" else "int32") if dt == np.int8 else dt.name
    ok = use_c04(dt, cin, groups, w) and d == kd == 1     # Conv2D's format (CANN: Conv2DV2)
    if c04 is None:
        c04 = ok
    elif c04 and not ok:
        raise ShapeError(f"conv: the C04 format needs float16, at most {C04} input channels, one "
                         f"group, a 2-D conv and a row of whole 32-byte blocks (W a multiple of 4); "
                         f"got {dt}, {cin} channels, groups={groups}, D={d}, W={w}")
    gm_geom = None
    if dense is not None and not c04:        # read only the pixels a strided 1 x 1 conv uses
        geom, gm_geom = dense, geom
    return ConvTiling(batch=n, groups=ceil_div(groups, e), cin_e=e * cin_g, cout_e=e * cout_g, cout=cout,
                      geom=geom, gm_geom=gm_geom, dtype=dt.name, out_dtype=np.dtype(out_dtype).name, has_bias=has_bias,
                      scale=scale, scale_value=float(scale_value), has_offset=has_offset, relu=relu,
                      c04=bool(c04))


def pack_input(x: np.ndarray, t: ConvTiling) -> np.ndarray:
    """(N, Cin, D, H, W) -> (N, G', C1, D, H, W, C0): per enlarged group, channels padded with
    zeros to C1 x C0 (NC1HWC0 for one group and D = 1; NC1HWC0_C04, C1 = 1, C0 = 4, with c04)."""
    n, cin, d, h, w = x.shape
    g, ce, c0, c1 = t.groups, t.cin_e, t.c0, t.c1
    xp = np.zeros((n, g * ce, d, h, w), dtype=x.dtype)
    xp[:, :cin] = x
    xg = np.zeros((n, g, c1 * c0, d, h, w), dtype=x.dtype)
    xg[:, :, :ce] = xp.reshape(n, g, ce, d, h, w)
    return np.ascontiguousarray(xg.reshape(n, g, c1, c0, d, h, w).transpose(0, 1, 2, 4, 5, 6, 3))


def pack_weight(wt: np.ndarray, t: ConvTiling, groups: int) -> np.ndarray:
    """(Cout, Cin_g, kd, kh, kw) -> FRACTAL_Z per enlarged group (G', C1 x taps, N1, 16, C0):
    the merged groups' weights block-diagonal, zeros elsewhere. For one group and kd = 1 this
    is :func:`npulab.formats.nchw_to_fractal_z`.

    C04 (FRACTAL_Z_C04): one group, K = (tap, channel) with 4 channels per tap, padded with
    zeros to K0 once: (1, K / 16, N1, 16, 16)."""
    cout, cin_g, kd, kh, kw = wt.shape
    if t.c04:
        taps, kk = kd * kh * kw, t.k
        w4 = np.zeros((t.n1 * 16, taps, C04), dtype=wt.dtype)
        w4[:cout, :, :cin_g] = wt.reshape(cout, cin_g, taps).transpose(0, 2, 1)
        wk = np.zeros((t.n1 * 16, kk), dtype=wt.dtype)
        wk[:, :taps * C04] = w4.reshape(t.n1 * 16, taps * C04)
        z = wk.reshape(t.n1, 16, kk // t.k0, t.k0).transpose(2, 0, 1, 3)
        return np.ascontiguousarray(z.reshape(1, kk // t.k0, t.n1, 16, t.k0))
    cout_g = cout // groups
    e = t.cin_e // cin_g
    g, c0, c1, n1 = t.groups, t.c0, t.c1, t.n1
    we = np.zeros((g, n1 * 16, c1 * c0, kd, kh, kw), dtype=wt.dtype)
    for gi in range(groups):
        gp, j = divmod(gi, e)
        we[gp, j * cout_g:(j + 1) * cout_g, j * cin_g:(j + 1) * cin_g] = wt[gi * cout_g:(gi + 1) * cout_g]
    z = we.reshape(g, n1, 16, c1, c0, kd, kh, kw).transpose(0, 3, 5, 6, 7, 1, 2, 4)
    return np.ascontiguousarray(z.reshape(g, c1 * kd * kh * kw, n1, 16, c0))


def pack_vector(v: np.ndarray, t: ConvTiling, dtype) -> np.ndarray:
    """A per-output-channel vector (Cout,) padded to G' x cout_e (the enlarged groups' channels)."""
    out = np.zeros(t.groups * t.cout_e, dtype=dtype)
    out[:v.shape[0]] = v
    return out


# -- the kernel ------------------------------------------------------------------------------------
class BlockConvMmad:
    """One block tile's K loop: map slab and weight window into L1 (ping-pong), img2col into
    L0A and weights into L0B (ping-pong), mmad accumulating in one L0C slot.

    With ``w_resident`` the weights of the tile column (K x TILE_N, FRACTAL_Z rows) stay in one
    L1 slot for every tile of that column the core computes: the first tile loads them one L1
    step at a time, right after that step's map slab, so its first mmad waits for one step's
    weights, not for all of them; later tiles of the column read them from L1 only."""

    def __init__(self, pipe: TPipe, t: ConvTiling):
        from .conv_tiling import slab_elems
        self.t = t
        dt = self.dtype = t.np_dtype
        item, c0 = dt.itemsize, t.c0
        self.n16 = round_up(t.tile_n, 16)
        slab = t.c1_step * slab_elems(t) * item
        wts = t.step_k(t.c1_step) * self.n16 * item
        self.a1, self.b1 = Queue(A1, "map_l1"), Queue(B1, "w_l1")
        self.a2, self.b2 = Queue(A2, "img2col_l0a"), Queue(B2, "w_l0b")
        self.c = Queue(CO1, "c_l0c")
        if t.map_resident:                           # one slot: the run's rows, all C1 blocks
            pipe.init_buffer(self.a1, 1, t.c1 * slab_elems(t) * item)
        else:
            pipe.init_buffer(self.a1, t.l1_buffers, slab)
        self.run, self.map_res = None, None
        if t.w_resident:                             # one slot: the column's FRACTAL_Z window
            pipe.init_buffer(self.b1, 1, t.k * self.n16 * item)
        else:
            pipe.init_buffer(self.b1, t.l1_buffers, wts)
        self.w_col, self.w_res, self.w_loaded = None, None, 0
        pipe.init_buffer(self.a2, t.l0_buffers, round_up(t.tile_m, 16) * t.tile_k0 * item)
        pipe.init_buffer(self.b2, t.l0_buffers, t.tile_k0 * self.n16 * item)
        pipe.init_buffer(self.c, t.l0c_buffers, round_up(t.tile_m, 16) * self.n16 * 4)
        g = t.x_geom                                 # the map as it lies in GM
        self.plane = g.h * g.w * c0                  # one depth plane of one channel block
        self.block = g.d * self.plane                # one channel block of one image

    def load_map(self, a1, x_gm, grp: int, c1_lo: int, cs: int, boxes, c1_elems: int):
        """GM -> L1: the slab of channel blocks c1_lo.. (cs of them), by the copies of
        :func:`~npulab.kernels.conv_tiling.map_copies`."""
        t = self.t
        at = ((grp * t.c1 + c1_lo) * self.block)
        for dst, src, count, length, s_stride, d_stride in map_copies(t, boxes, cs, c1_elems):
            data_copy_strided(a1[dst:], x_gm[at + src:], count, length, s_stride, d_stride)

    def load_run_rows(self, x_gm, grp: int, boxes):
        """map_resident: GM -> L1 the rows this tile reads that the run has not loaded yet
        (whole rows, every channel block in one strided copy), then hand them to MTE1."""
        t = self.t
        if self.run is None:
            p0, m = run_rows(t, get_block_idx())
            run_boxes, run_elems = slab_boxes(t.geom, t.batch, p0, m, t.c0)
            self.run = (run_boxes, run_elems, {})
            self.map_res = self.a1.alloc_tensor(self.dtype)
        run_boxes, run_elems, loaded = self.run
        copies = map_rows_to_load(t, run_boxes, run_elems, loaded, boxes)
        at = grp * t.c1 * self.block
        for dst, src, count, length, s_stride, d_stride in copies:
            data_copy_strided(self.map_res[dst:], x_gm[at + src:], count, length, s_stride, d_stride)
        if copies:
            self.a1.enque(self.map_res)
            self.a1.deque()
        return run_boxes, run_elems

    def _w_src(self, grp: int, n_idx: int, kb: int) -> int:
        """FRACTAL_Z offset of the K0-deep row holding column ``kb`` of K (= (c1_lo, tap 0) for
        kb = c1_lo x taps x C0), first fractal column of n tile n_idx."""
        t = self.t
        return ((grp * (t.k // t.k0) + kb // t.k0) * t.n1 + n_idx * t.tile_n // 16) * 16 * t.k0

    def __call__(self, x_gm, w_gm, grp: int, m_off: int, n_idx: int, m: int, n: int):
        t = self.t
        taps, c0 = t.geom.taps, t.c0
        boxes, c1_elems = slab_boxes(t.geom, t.batch, m_off, m, c0)
        n16 = round_up(n, 16)
        c = self.c.alloc_tensor(t.acc_dtype)
        first = True
        if t.w_resident and (grp, n_idx) != self.w_col:
            self._release_weights()
            self.w_res, self.w_col, self.w_loaded = self.b1.alloc_tensor(self.dtype), (grp, n_idx), 0
        if t.map_resident:
            run_boxes, run_elems = self.load_run_rows(x_gm, grp, boxes)
        for c1_lo in range(0, t.c1, t.c1_step):
            cs = min(t.c1_step, t.c1 - c1_lo)
            if not t.map_resident:
                a1 = self.a1.alloc_tensor(self.dtype)
                self.load_map(a1, x_gm, grp, c1_lo, cs, boxes, c1_elems)
                self.a1.enque(a1)
            kc = t.step_k(cs)
            kb = c1_lo * taps * c0                   # this step's first column of K
            if t.w_resident:
                b1, w_row0 = self.w_res, kb
                if c1_lo >= self.w_loaded:           # this step's weights are not in L1 yet
                    data_copy_strided(b1[w_row0 * n16:], w_gm[self._w_src(grp, n_idx, kb):],
                                      kc // t.k0, n16 * t.k0, t.n1 * 16 * t.k0)
                    self.b1.enque(b1)
                    self.b1.deque()
                    self.w_loaded = c1_lo + cs
            else:
                b1 = self.b1.alloc_tensor(self.dtype)
                # FRACTAL_Z rows (c1_lo .. c1_lo + cs) x taps, fractal columns of this n tile
                data_copy_strided(b1, w_gm[self._w_src(grp, n_idx, kb):], kc // t.k0, n16 * t.k0,
                                  t.n1 * 16 * t.k0)
                self.b1.enque(b1)
                b1, w_row0 = self.b1.deque(), 0
            if t.map_resident:
                a1 = self.map_res[c1_lo * run_elems:]
                fm = Fmatrix(t.geom, c0, cs, run_elems, m_off, run_boxes)
            else:
                a1 = self.a1.deque()
                fm = Fmatrix(t.geom, c0, cs, c1_elems, m_off, boxes)
            for k0 in range(0, kc, t.tile_k0):
                kk = min(t.tile_k0, kc - k0)
                a2 = self.a2.alloc_tensor(self.dtype)
                load_3d(a2, a1, fm, m, kk, k_start=k0)
                self.a2.enque(a2)
                b2 = self.b2.alloc_tensor(self.dtype)
                load_data(b2, b1, kk, n, src_rows=n16, row_off=w_row0 + k0, col_off=0,
                          transpose=True)
                self.b2.enque(b2)
                a2, b2 = self.a2.deque(), self.b2.deque()
                mmad(c, a2, b2, m, n, kk, init=first)
                first = False
                self.a2.free_tensor(a2)
                self.b2.free_tensor(b2)
            if not t.map_resident:
                self.a1.free_tensor(a1)
            if not t.w_resident:
                self.b1.free_tensor(b1)
        self.c.enque(c)

    def finish(self):
        """Give back the resident map and weights (MTE1 has issued every load that reads them)."""
        if self.map_res is not None:
            self.a1.free_tensor(self.map_res)
            self.map_res, self.run = None, None
        self._release_weights()

    def _release_weights(self):
        if self.w_res is not None:
            self.b1.free_tensor(self.w_res)
            self.w_res, self.w_col, self.w_loaded = None, None, 0


class BlockConvEpilogue:
    """Drain a block tile to the NHWC output through FixPipe: bias, dequant scale, per-channel
    scale/offset (batch-norm), ReLU. The per-channel vectors of the next n tile load into L1
    (EPI_SLOTS slots, MTE2 -> FIX by flags) while FixPipe reads this tile's; consecutive tiles
    of the same group and n tile reuse the vectors already in L1."""

    def __init__(self, pipe: TPipe, t: ConvTiling, queue: Queue):
        self.t, self.c = t, queue
        self.names = t.vectors
        self.buf = None
        if self.names:
            self.buf = TBuf(A1, "epilogue_l1")
            self.slot = round_up(t.tile_n * 4, 32)
            pipe.init_buffer(self.buf, self.slot * EPI_SLOTS * len(self.names))
            self.count = 0
            self.read = [False] * EPI_SLOTS     # a fixpipe read the slot since it was loaded
            self.key, self.cur = None, None

    def load(self, vec_gms: dict, grp: int, n_idx: int, n: int):
        """Start the copies of tile (grp, n_idx)'s vectors (MTE2), before its K loop so they
        overlap it; returns (slot to wait for or None when reused, {name: tensor})."""
        if self.buf is None:
            return None
        if (grp, n_idx) == self.key:
            return None, self.cur[1]
        t = self.t
        s = self.count % EPI_SLOTS
        self.count += 1
        if self.read[s]:                       # FixPipe has read this slot: wait until it is done
            set_flag(PIPE_FIX, PIPE_MTE2, s)
            wait_flag(PIPE_FIX, PIPE_MTE2, s)
            self.read[s] = False
        out = {}
        words = self.slot // 4
        for j, name in enumerate(self.names):
            dt = t.acc_dtype if name == "bias" else np.dtype(np.float32)
            v = self.buf.get(dt)[(j * EPI_SLOTS + s) * words:]
            data_copy_pad(v, vec_gms[name][grp * t.cout_e + n_idx * t.tile_n:], n)
            out[name] = v
        set_flag(PIPE_MTE2, PIPE_FIX, s)
        self.key, self.cur = (grp, n_idx), (s, out)
        return s, out

    def __call__(self, y_gm, grp: int, m_off: int, n_idx: int, m: int, n: int, slot):
        t = self.t
        c = self.c.deque()
        vecs = {}
        if slot is not None:
            if slot[0] is not None:
                wait_flag(PIPE_MTE2, PIPE_FIX, slot[0])
            vecs = slot[1]
        off = m_off * t.cout + grp * t.cout_e + n_idx * t.tile_n
        if t.scale == "channel" or t.has_offset:
            fixpipe_channelwise(y_gm[off:], c, m, n, dst_stride=t.cout, bias=vecs.get("bias"),
                                scale=vecs.get("scale"), offset=vecs.get("offset"), relu=t.relu)
        else:
            fixpipe(y_gm[off:], c, m, n, dst_stride=t.cout, bias=vecs.get("bias"),
                    deq_scale=t.scale_value if t.scale == "tensor" else None, relu=t.relu)
        if slot is not None:
            self.read[self.cur[0] if slot[0] is None else slot[0]] = True
        self.c.free_tensor(c)

    def finish(self):
        """Nothing outstanding: a FIX -> MTE2 flag is only set right before its wait."""


def conv_kernel(x_gm, w_gm, y_gm, bias_gm, scale_gm, offset_gm, t: ConvTiling) -> None:
    """The kernel entry: this block's block tiles (group, rows, n tile), as
    :func:`~npulab.kernels.conv_tiling.block_work` deals them."""
    pipe = TPipe()
    block_mmad = BlockConvMmad(pipe, t)
    epilogue = BlockConvEpilogue(pipe, t, block_mmad.c)
    vec_gms = {"bias": bias_gm, "scale": scale_gm, "offset": offset_gm}
    for grp, m_off, m, n_idx, n in block_work(t, get_block_idx()):
        n_out = min(n, t.cout - grp * t.cout_e - n_idx * t.tile_n)   # enlarged groups pad Cout
        if n_out <= 0:
            continue
        slot = epilogue.load(vec_gms, grp, n_idx, n_out)
        block_mmad(x_gm, w_gm, grp, m_off, n_idx, m, n)
        epilogue(y_gm, grp, m_off, n_idx, m, n_out, slot)
    block_mmad.finish()
    epilogue.finish()


# -- device layer ---------------------------------------------------------------------------------
class _Shape:
    """Stands in for an operand in timing-only runs: a size and a dtype, no bytes."""

    def __init__(self, size: int, dtype):
        self.size, self.dtype = int(size), np.dtype(dtype)


def launch_conv(xp, wp, t: ConvTiling, vectors: dict, chip=DEFAULT_CHIP, mode: str = "functional",
                check_races: bool | None = None):
    """Launch on packed operands (:func:`pack_input`, :func:`pack_weight`, :func:`pack_vector`).
    Returns (y (batch x pixels, Cout) of the output dtype, or None in timing mode; trace)."""
    can_implement(t, chip)
    GT = lang.GlobalTensor
    out_dt = np.dtype(t.out_dtype)
    if set(vectors) != set(t.vectors):
        raise ShapeError(f"launch_conv: the tiling's epilogue takes {t.vectors}, got {tuple(vectors)}")
    if mode == "functional":
        y = np.zeros(t.m * t.cout, dtype=out_dt)
        args = [np.ascontiguousarray(xp).reshape(-1), np.ascontiguousarray(wp).reshape(-1), y]
        args += [None if vectors.get(v) is None else np.ascontiguousarray(vectors[v]).reshape(-1)
                 for v in ("bias", "scale", "offset")]
    else:
        args = [GT.empty(xp.size, t.np_dtype, "arg0"), GT.empty(wp.size, t.np_dtype, "arg1"),
                GT.empty(t.m * t.cout, out_dt, "arg2")]
        args += [None if v not in vectors else
                 GT.empty(vectors[v].size, t.acc_dtype if v == "bias" else np.float32, f"arg{3 + i}")
                 for i, v in enumerate(("bias", "scale", "offset"))]
    # y is launch_conv's own array, written in place; the others are only read
    res = lang.launch(conv_kernel, t.block_dim, *args, t, chip=chip, mode=mode, check_races=check_races,
                      donate=(2,) if mode == "functional" else (), outputs=(2,))
    y = res.outputs[2]
    return (y.reshape(t.m, t.cout) if y is not None else None), res.trace


def unpack_output(y: np.ndarray, t: ConvTiling) -> np.ndarray:
    """(batch x pixels, Cout) NHWC -> (N, Cout, D, H, W)."""
    g = t.geom
    return np.ascontiguousarray(y.reshape(t.batch, g.od, g.oh, g.ow, t.cout).transpose(0, 4, 1, 2, 3))


def run_conv(x: np.ndarray, w: np.ndarray, t: ConvTiling, groups: int, bias=None, scale=None,
             offset=None, chip=DEFAULT_CHIP, mode: str = "functional", check_races: bool | None = None):
    """x (N, Cin, D, H, W), w (Cout, Cin_g, kd, kh, kw) of the tiling's dtype; per-channel
    bias (acc dtype), scale and offset (float32) as the tiling says. Returns
    (y (N, Cout, od, oh, ow) or None in timing mode, trace)."""
    if x.dtype != t.np_dtype or w.dtype != t.np_dtype:
        raise ShapeError(f"run_conv: the tiling is for {t.dtype}, got x {x.dtype} and w {w.dtype}")
    vectors = {}
    for name, v in (("bias", bias), ("scale", scale), ("offset", offset)):
        if v is not None:
            vectors[name] = pack_vector(np.asarray(v), t, t.acc_dtype if name == "bias" else np.float32)
    if mode == "functional":
        xp, wp = pack_input(x, t), pack_weight(w, t, groups)
    else:
        c1c0 = t.c1 * t.c0
        g = t.x_geom
        xp = _Shape(t.batch * t.groups * c1c0 * g.d * g.h * g.w, t.np_dtype)
        wp = _Shape(t.groups * t.k * t.n1 * 16, t.np_dtype)
    y, trace = launch_conv(xp, wp, t, vectors, chip, mode, check_races)
    return (unpack_output(y, t) if y is not None else None), trace


def simulate(t: ConvTiling, chip=DEFAULT_CHIP):
    """Timing-only run of tiling ``t`` (no operand data is allocated); returns the Trace."""
    g = t.x_geom
    c1c0 = t.c1 * t.c0
    xp = _Shape(t.batch * t.groups * c1c0 * g.d * g.h * g.w, t.np_dtype)
    wp = _Shape(t.groups * t.k * t.n1 * 16, t.np_dtype)
    vec = {v: _Shape(t.groups * t.cout_e, np.float32) for v in t.vectors}
    return launch_conv(xp, wp, t, vec, chip, "timing")[1]


def conv_macs(t: ConvTiling, cin_g: int) -> int:
    """The useful MACs: batch x output pixels x Cout x Cin_g x taps."""
    return t.m * t.cout * cin_g * t.geom.taps


__all__ = ["make_problem", "pack_input", "pack_weight", "pack_vector", "conv_kernel", "launch_conv",
           "run_conv", "unpack_output", "simulate", "conv_macs", "BlockConvMmad", "BlockConvEpilogue",
           "conv_output_size"]
