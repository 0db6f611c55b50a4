"""Convolution on the cube by img2col, as a catlass-style template (lab 06 walks through it).

What you learn here:

* a convolution **is a matmul**: C (batch x output pixels, Cout) = A (img2col) x B (weights),
  K = C1 x taps x C0; who computes which block tile is the schedule's
  (:func:`~npulab.kernels.conv.schedule.block_work`): the matmul templates' **block scheduler**
  dealing uniform tiles round-robin, or **teams** of cores per tile column;
* with ``w_resident`` a core keeps its tile column's weights in L1 across its tiles, loaded one
  L1 step at a time during the first tile (its first mmad waits for one step, not all);
* with ``map_resident`` (teams, 2-D) a core keeps the input rows of its whole run of output
  rows in L1: each tile copies only the rows it adds, so the halo rows that neighbouring tiles
  share cross GM once (the slab of a tile otherwise reloads them);
* C04 (:func:`~npulab.kernels.conv.problem.use_c04`): a map of at most 4 channels moves in
  blocks of 4 channels and K = taps x 4 is padded to 16 once (the first layer's format);
* the **block conv-mmad** walks K in L1 steps of C1_STEP channel blocks: the feature map
  moves GM -> L1 (NC1HWC0, one strided copy per image box, MTE2) once per tile, the weights
  move in FRACTAL_Z (already the NZ layout L0B wants: no conversion), then per TILE_K0 columns
  ``load_3d`` expands the slab into L0A (img2col on MTE1: the expansion costs MTE1 time, not
  GM bandwidth), ``load_data`` loads the weights into L0B and ``mmad`` accumulates in L0C;
* the **epilogue** drains L0C: + bias, x a dequant scale (int8), a per-channel scale and offset,
  ReLU, the cast; through FixPipe on a chip that has one, on the vector unit in UB on the 910 and
  310 (:mod:`npulab.kernels.epilogue`); either way a conv with its epilogue writes GM once.

Layouts in GM: :mod:`npulab.kernels.conv.layouts`. Host tiling: :mod:`npulab.kernels.conv.tiling`;
the public ops: :mod:`npulab.ops.conv`.
"""
from __future__ import annotations

import numpy as np

from ... import lang
from ...arch import DEFAULT_CHIP, FRACTAL_ROWS, round_up
from ...errors import ShapeError
from ...lang import (A1, A2, B1, B2, CO1, PIPE_FIX, PIPE_MTE2, Queue, TBuf, TPipe, data_copy_pad,
                     data_copy_strided, fixpipe, get_block_idx, load_data, output_path, running_chip, set_flag,
                     wait_flag)
from ...lang.conv_load import Fmatrix, fixpipe_channelwise, load_3d
from ..epilogue import UbEpilogue
from ..matmul.kernel import tile_mmad
from .geometry import map_copies, map_rows_to_load, slab_boxes
from .layouts import pack_input, pack_vector, pack_weight, packed_sizes, unpack_output
from .schedule import block_work, member_rows
from .tiling import EPI_SLOTS, ConvTiling, can_implement, slab_bytes, ub_plan_of, weight_bytes

VECTORS = ("bias", "scale", "offset")          # the epilogue vectors' GM arguments, in order


class BlockConvMmad:
    """One block tile's K loop: map slab and weight window into L1 (ping-pong), img2col into
    L0A and weights into L0B (ping-pong), mmad accumulating in one L0C slot.

    With ``w_resident`` the weights of the tile column (K x TILE_N, FRACTAL_Z rows) stay in one
    L1 slot for every tile of that column the core computes: the first tile loads them one L1
    step at a time, right after that step's map slab, so its first mmad waits for one step's
    weights, not for all of them; later tiles of the column read them from L1 only."""

    def __init__(self, pipe: TPipe, t: ConvTiling):
        self.t = t
        p, s = t.problem, t.tiles
        self.dtype = p.np_dtype
        item, c0 = self.dtype.itemsize, p.c0
        self.n16 = round_up(s.tile_n, FRACTAL_ROWS)
        self.a1, self.b1 = Queue(A1, "map_l1"), Queue(B1, "w_l1")
        self.a2, self.b2 = Queue(A2, "img2col_l0a"), Queue(B2, "w_l0b")
        self.c = Queue(CO1, "c_l0c")
        # one slot of the run's rows (map_resident) or of the column's weights (w_resident)
        pipe.init_buffer(self.a1, 1 if s.map_resident else s.l1_buffers, slab_bytes(t))
        pipe.init_buffer(self.b1, 1 if s.w_resident else s.l1_buffers, weight_bytes(t))
        self.run, self.map_res = None, None
        self.w_col, self.w_res, self.w_loaded = None, None, 0
        pipe.init_buffer(self.a2, s.l0_buffers, round_up(s.tile_m, FRACTAL_ROWS) * s.tile_k0 * item)
        pipe.init_buffer(self.b2, s.l0_buffers, s.tile_k0 * self.n16 * item)
        pipe.init_buffer(self.c, s.l0c_buffers, round_up(s.tile_m, FRACTAL_ROWS) * self.n16 * 4)
        g = p.x_geom                                 # the map as it lies in GM
        self.plane = g.h * g.w * c0                  # one depth plane of one channel block
        self.block = g.d * self.plane                # one channel block of one image

    def load_map(self, a1, x_gm, grp: int, c1_lo: int, cs: int, boxes, c1_elems: int):
        """GM -> L1: the slab of channel blocks c1_lo.. (cs of them), by the copies of
        :func:`~npulab.kernels.conv.geometry.map_copies`."""
        p = self.t.problem
        at = ((grp * p.c1 + c1_lo) * self.block)
        for dst, src, count, length, s_stride, d_stride in map_copies(p, boxes, cs, c1_elems):
            data_copy_strided(a1[dst:], x_gm[at + src:], count, length, s_stride, d_stride)

    def load_run_rows(self, x_gm, grp: int, boxes):
        """map_resident: GM -> L1 the rows this tile reads that the run has not loaded yet
        (whole rows, every channel block in one strided copy), then hand them to MTE1."""
        p = self.t.problem
        if self.run is None:
            p0, m = member_rows(self.t, get_block_idx())
            run_boxes, run_elems = slab_boxes(p.geom, p.batch, p0, m, p.c0)
            self.run = (run_boxes, run_elems, {})
            self.map_res = self.a1.alloc_tensor(self.dtype)
        run_boxes, run_elems, loaded = self.run
        copies = map_rows_to_load(p, run_boxes, run_elems, loaded, boxes)
        at = grp * p.c1 * self.block
        for dst, src, count, length, s_stride, d_stride in copies:
            data_copy_strided(self.map_res[dst:], x_gm[at + src:], count, length, s_stride, d_stride)
        if copies:
            self.a1.enque(self.map_res)
            self.a1.deque()
        return run_boxes, run_elems

    def _w_src(self, grp: int, n_idx: int, kb: int) -> int:
        """FRACTAL_Z offset of the K0-deep row holding column ``kb`` of K (= (c1_lo, tap 0) for
        kb = c1_lo x taps x C0), first fractal column of n tile n_idx."""
        p = self.t.problem
        return ((grp * (p.k // p.k0) + kb // p.k0) * p.n1 + n_idx * self.t.tiles.tile_n // 16) * 16 * p.k0

    def __call__(self, x_gm, w_gm, grp: int, m_off: int, n_idx: int, m: int, n: int):
        p, s = self.t.problem, self.t.tiles
        taps, c0 = p.geom.taps, p.c0
        boxes, c1_elems = slab_boxes(p.geom, p.batch, m_off, m, c0)
        n16 = round_up(n, FRACTAL_ROWS)
        c = self.c.alloc_tensor(p.acc_dtype)
        first = True
        if s.w_resident and (grp, n_idx) != self.w_col:
            self._release_weights()
            self.w_res, self.w_col, self.w_loaded = self.b1.alloc_tensor(self.dtype), (grp, n_idx), 0
        if s.map_resident:
            run_boxes, run_elems = self.load_run_rows(x_gm, grp, boxes)
        for c1_lo in range(0, p.c1, s.c1_step):
            cs = min(s.c1_step, p.c1 - c1_lo)
            if not s.map_resident:
                a1 = self.a1.alloc_tensor(self.dtype)
                self.load_map(a1, x_gm, grp, c1_lo, cs, boxes, c1_elems)
                self.a1.enque(a1)
            kc = p.step_k(cs)
            kb = c1_lo * taps * c0                   # this step's first column of K
            if s.w_resident:
                b1, w_row0 = self.w_res, kb
                if c1_lo >= self.w_loaded:           # this step's weights are not in L1 yet
                    data_copy_strided(b1[w_row0 * n16:], w_gm[self._w_src(grp, n_idx, kb):],
                                      kc // p.k0, n16 * p.k0, p.n1 * 16 * p.k0)
                    self.b1.enque(b1)
                    self.b1.deque()
                    self.w_loaded = c1_lo + cs
            else:
                b1 = self.b1.alloc_tensor(self.dtype)
                # FRACTAL_Z rows (c1_lo .. c1_lo + cs) x taps, fractal columns of this n tile
                data_copy_strided(b1, w_gm[self._w_src(grp, n_idx, kb):], kc // p.k0, n16 * p.k0,
                                  p.n1 * 16 * p.k0)
                self.b1.enque(b1)
                b1, w_row0 = self.b1.deque(), 0
            if s.map_resident:
                a1 = self.map_res[c1_lo * run_elems:]
                fm = Fmatrix(p.geom, c0, cs, run_elems, m_off, run_boxes)
            else:
                a1 = self.a1.deque()
                fm = Fmatrix(p.geom, c0, cs, c1_elems, m_off, boxes)
            for k0 in range(0, kc, s.tile_k0):
                kk = min(s.tile_k0, kc - k0)
                # img2col into L0A (load_3d), the weights' FRACTAL_Z rows into L0B
                tile_mmad(self.a2, self.b2, c, lambda a2: load_3d(a2, a1, fm, m, kk, k_start=k0),
                          lambda b2: load_data(b2, b1, kk, n, src_rows=n16, row_off=w_row0 + k0, col_off=0,
                                               transpose=True),
                          m, n, kk, self.dtype, first)
                first = False
            if not s.map_resident:
                self.a1.free_tensor(a1)
            if not s.w_resident:
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
    scale and offset, ReLU (a chip with FixPipe; on the 910 and 310 the tile goes through UB:
    :class:`npulab.kernels.epilogue.UbEpilogue`, which takes the same calls). The per-channel
    vectors of the next n tile load into L1 (EPI_SLOTS slots, MTE2 -> FIX by flags) while FixPipe
    reads this tile's; consecutive tiles of the same group and n tile reuse the vectors already in
    L1. (A FIX -> MTE2 flag is set only right before its wait, so nothing is left to drain when
    the block ends.)"""

    def __init__(self, pipe: TPipe, t: ConvTiling, queue: Queue):
        self.t, self.c = t, queue
        self.names = t.problem.vectors
        self.buf = None
        if self.names:
            self.buf = TBuf(A1, "epilogue_l1")
            self.slot = round_up(t.tiles.tile_n * 4, 32)
            pipe.init_buffer(self.buf, self.slot * EPI_SLOTS * len(self.names))
            self.count = 0
            self.read = [False] * EPI_SLOTS     # a fixpipe read the slot since it was loaded
            self.key, self.cur = None, None

    def load(self, vectors: dict, key, n: int):
        """Start the copies of an n tile's vectors (MTE2; ``vectors``: name -> GM tensor at the
        tile's first channel), before its K loop so they overlap it; tiles of the same ``key``
        reuse them. Returns (slot to wait for or None when reused, {name: tensor})."""
        if self.buf is None:
            return None
        if key == self.key:
            return None, self.cur[1]
        p = self.t.problem
        s = self.count % EPI_SLOTS
        self.count += 1
        if self.read[s]:                       # FixPipe has read this slot: wait until it is done
            set_flag(PIPE_FIX, PIPE_MTE2, s)
            wait_flag(PIPE_FIX, PIPE_MTE2, s)
            self.read[s] = False
        out = {}
        words = self.slot // 4
        for j, name in enumerate(self.names):
            dt = p.acc_dtype if name == "bias" else np.dtype(np.float32)
            v = self.buf.get(dt)[(j * EPI_SLOTS + s) * words:]
            data_copy_pad(v, vectors[name], n)
            out[name] = v
        set_flag(PIPE_MTE2, PIPE_FIX, s)
        self.key, self.cur = key, (s, out)
        return s, out

    def __call__(self, y_gm, stride: int, m: int, n: int, slot):
        p = self.t.problem
        c = self.c.deque()
        vecs = {}
        if slot is not None:
            if slot[0] is not None:
                wait_flag(PIPE_MTE2, PIPE_FIX, slot[0])
            vecs = slot[1]
        if p.scale == "channel" or p.has_offset:
            fixpipe_channelwise(y_gm, c, m, n, dst_stride=stride, bias=vecs.get("bias"),
                                scale=vecs.get("scale"), offset=vecs.get("offset"), relu=p.relu)
        else:
            fixpipe(y_gm, c, m, n, dst_stride=stride, bias=vecs.get("bias"),
                    deq_scale=p.scale_value if p.scale == "tensor" else None, relu=p.relu)
        if slot is not None:
            self.read[self.cur[0] if slot[0] is None else slot[0]] = True
        self.c.free_tensor(c)

    def finish(self):
        """Nothing to drain (see the class docstring)."""


def block_epilogue(pipe: TPipe, t: ConvTiling, queue: Queue):
    """The epilogue of the chip the kernel runs on: FixPipe where there is one, else the vector
    unit in UB (``[cube] output_path``)."""
    if output_path() == "fixpipe":
        return BlockConvEpilogue(pipe, t, queue)
    return UbEpilogue(pipe, ub_plan_of(t, running_chip()), queue)


def conv_kernel(x_gm, w_gm, y_gm, bias_gm, scale_gm, offset_gm, t: ConvTiling, sample_loops: int = 0) -> None:
    """The kernel entry: this block's block tiles (group, rows, n tile), as the schedule deals
    them (``sample_loops`` > 0: only the first that many, for estimates)."""
    pipe = TPipe()
    block_mmad = BlockConvMmad(pipe, t)
    epilogue = block_epilogue(pipe, t, block_mmad.c)
    vec_gms = dict(zip(VECTORS, (bias_gm, scale_gm, offset_gm)))
    p = t.problem
    for grp, m_off, m, n_idx, n in block_work(t, get_block_idx(), sample_loops):
        c0 = grp * p.cout_e + n_idx * t.tiles.tile_n          # the tile's first output channel
        n_out = min(n, p.cout - c0)                          # enlarged groups pad Cout
        if n_out <= 0:
            continue
        handle = epilogue.load({v: vec_gms[v][c0:] for v in p.vectors}, (grp, n_idx), n_out)
        block_mmad(x_gm, w_gm, grp, m_off, n_idx, m, n)
        epilogue(y_gm[m_off * p.cout + c0:], p.cout, m, n_out, handle)
    block_mmad.finish()
    epilogue.finish()


# -- device layer ---------------------------------------------------------------------------------
def launch_conv_packed(xp, wp, t: ConvTiling, vectors: dict, chip=DEFAULT_CHIP, mode: str = "functional",
                       check_races: bool | None = None, sample_loops: int = 0):
    """Launch on packed operands (:mod:`~npulab.kernels.conv.layouts`; shape-only GM tensors in
    timing mode). Returns (y (batch x pixels, Cout) of the output dtype, or None in timing mode;
    trace)."""
    can_implement(t, chip)
    p = t.problem
    GT = lang.GlobalTensor
    out_dt = np.dtype(p.out_dtype)
    if set(vectors) != set(p.vectors):
        raise ShapeError(f"launch_conv: the problem's epilogue takes {p.vectors}, got {tuple(vectors)}")
    if mode == "functional":
        y = np.zeros(p.m * p.cout, dtype=out_dt)
        args = [np.ascontiguousarray(xp).reshape(-1), np.ascontiguousarray(wp).reshape(-1), y]
        args += [None if vectors.get(v) is None else np.ascontiguousarray(vectors[v]).reshape(-1)
                 for v in VECTORS]
    else:
        args = [GT.empty(xp.size, p.np_dtype, "arg0"), GT.empty(wp.size, p.np_dtype, "arg1"),
                GT.empty(p.m * p.cout, out_dt, "arg2")]
        args += [None if v not in vectors else
                 GT.empty(vectors[v].size, p.acc_dtype if v == "bias" else np.float32, f"arg{3 + i}")
                 for i, v in enumerate(VECTORS)]
    # y is this function's own array, written in place; the others are only read
    res = lang.launch(conv_kernel, t.tiles.block_dim, *args, t, sample_loops, chip=chip, mode=mode,
                      check_races=check_races, donate=(2,) if mode == "functional" else (), outputs=(2,))
    y = res.outputs[2]
    return (y.reshape(p.m, p.cout) if y is not None else None), res.trace


def launch_conv(x: np.ndarray, w: np.ndarray, t: ConvTiling, bias=None, scale=None, offset=None,
                chip=DEFAULT_CHIP, mode: str = "functional", check_races: bool | None = None):
    """x (N, Cin, D, H, W), w (Cout, Cin_g, kd, kh, kw) of the problem's dtype; per-channel
    bias (acc dtype), scale and offset (float32) as the problem says. Packs them, launches.
    Returns (y (N, Cout, od, oh, ow) or None in timing mode, trace)."""
    p = t.problem
    if x.dtype != p.np_dtype or w.dtype != p.np_dtype:
        raise ShapeError(f"launch_conv: the problem is {p.dtype}, got x {x.dtype} and w {w.dtype}")
    vectors = {}
    for name, v in zip(VECTORS, (bias, scale, offset)):
        if v is not None:
            vectors[name] = pack_vector(np.asarray(v), p, p.acc_dtype if name == "bias" else np.float32)
    if mode == "functional":
        xp, wp = pack_input(x, p), pack_weight(w, p)
    else:
        xs, ws = packed_sizes(p)
        xp, wp = lang.GlobalTensor.empty(xs, p.np_dtype), lang.GlobalTensor.empty(ws, p.np_dtype)
    y, trace = launch_conv_packed(xp, wp, t, vectors, chip, mode, check_races)
    return (unpack_output(y, p) if y is not None else None), trace


def simulate(t: ConvTiling, chip=DEFAULT_CHIP, sample_loops: int = 0):
    """Timing-only run of tiling ``t`` (no operand data is allocated); returns the Trace."""
    p = t.problem
    xs, ws = packed_sizes(p)
    GT = lang.GlobalTensor
    vec = {v: GT.empty(p.groups * p.cout_e, np.float32) for v in p.vectors}
    return launch_conv_packed(GT.empty(xs, p.np_dtype), GT.empty(ws, p.np_dtype), t, vec, chip, "timing",
                              sample_loops=sample_loops)[1]


__all__ = ["BlockConvMmad", "BlockConvEpilogue", "block_epilogue", "conv_kernel", "launch_conv_packed", "launch_conv",
           "simulate"]
