"""Cube-unit instructions: the matrix data path GM -> L1 -> L0A/L0B -> cube -> L0C -> out.

==========================  =====  ==============================================================
call                        pipe   what it does (Ascend C name)
==========================  =====  ==============================================================
``data_copy_nd2nz``         MTE2   GM (ND matrix tile) -> L1 in NZ fractals (DataCopy + Nd2NzParams)
``load_data``               MTE1   L1 (NZ) -> L0A in ZZ or L0B in ZN, optionally transposed (LoadData)
``mmad``                    M      L0C = L0A x L0B, or L0C += L0A x L0B (Mmad + MmadParams)
``fixpipe``                 FIX    L0C (NZ, fp32/int32) -> GM or UB in ND, with bias, dequant scale,
                                   ReLU and the cast to the output dtype on the way (Fixpipe)
==========================  =====  ==============================================================

Two back-to-back mmads into the same L0C bytes on a tile of fewer than ten fractals
((m/16)(n/16) < 10, FACTS "Pipes") get a ``pipe_barrier M (auto)`` between them, as the
compiler inserts it: the second waits for the first's drain and pays its own fill.

FixPipe exists only on chips whose ``[cube] output_path`` is "fixpipe" (the 910B, the teaching
chip). On the 910 and 310 the result leaves L0C through the vector unit into UB and MTE3
writes it to GM: :mod:`npulab.lang.drain_ub`; ``fixpipe`` there is a DataPathError.

Formats are in :mod:`npulab.formats`. A format change costs nothing beyond the move that does
it: each instruction moves the padded fractal bytes at its pipe's rate. The cube runs one
fractal step a cycle: 16 x 16 x K0 MACs (K0 = 16 fp16: 4096 MAC/cycle; 32 int8: 8192; 8 fp32,
chosen as half the fp16 rate), so ``mmad`` costs start-up + ceil(m/16) x ceil(n/16) x
ceil(k/K0) cycles (data/FACTS.md, Compute units). L0C accumulates in fp32 (int32 for int8).

Functional numerics: every instruction really moves and re-lays bytes in the buffers (one
pass each, with the moves of the launch's side of npulab.twins, ``device.moves``:
:func:`npulab.formats.layouts.nz_window_buffers` for load_data, the fp16 -> fp32 widening read
:func:`npulab.formats.drains.unpack_f16_buffer` for mmad,
:func:`npulab.formats.drains.drain_nz_f32_to_f16` for FixPipe's usual epilogue). mmad
copies its operands out of L0A/L0B, widened, into the accumulating tile's chain; the chain is
multiplied out as one float32 product (float64 for int8, then int32: exact) when anything
reads the L0C tile, so a K loop costs one BLAS call instead of one per step
(:mod:`npulab.lang.l0c`).
"""
from __future__ import annotations

import numpy as np

from .. import formats as F
from ..arch import ACC_DTYPE, FRACTAL_ROWS, MAX_MNK, c0_of, ceil_div, round_up
from ..errors import AlignmentError, DataPathError, ShapeError
from ..sim.cost import PIPELINED_FRACTALS, copy_energy_pj, mmad_cost, mmad_energy_pj
from ..sim.isa import Kind, Op, Pipe
from .context import current
from .l0c import flush_l0c, mmad_numerics
from .sync import _barrier
from .tensor import DTYPES, GlobalTensor, LocalTensor

L0C_OUTPUT_ALIGN = 1024        # Mmad.md: an mmad output starts 1024-byte aligned in L0C


_C0 = {dt: c0_of(dt) for dt in DTYPES}          # looked up once per instruction
_MTE1, _MTE2, _M, _FIX, _WORK = int(Pipe.MTE1), int(Pipe.MTE2), int(Pipe.M), int(Pipe.FIX), int(Kind.WORK)
_OP_L0A, _OP_L0B, _OP_MMAD = int(Op.COPY_L1_TO_L0A), int(Op.COPY_L1_TO_L0B), int(Op.MMAD)
_OP_GM_L1, _OP_FIX = int(Op.COPY_GM_TO_L1), int(Op.FIXPIPE)



def _gm_view(g: GlobalTensor, rows: int, cols: int, stride: int) -> np.ndarray | None:
    """The (rows, cols) matrix with row stride ``stride`` (elements) starting at ``g``, to
    write through."""
    data = g.writable()
    if data is None:
        return None
    item = data.itemsize                   # (the callers checked that the tile fits)
    return np.ndarray((rows, cols), dtype=data.dtype, buffer=data, offset=g.offset * item,
                      strides=(stride * item, item))


def _need(t, cls, where, what):
    if not isinstance(t, cls):
        raise ShapeError(f"{what}: expected a {cls.__name__}, got {type(t).__name__}")
    if cls is LocalTensor and t.buffer.name not in where:
        raise ShapeError(f"{what}: '{t.owner}' is in {t.buffer.name}; expected a tensor in "
                         f"{' or '.join(where)}")


def _dims(what, **dims):
    for name, v in dims.items():
        if not isinstance(v, (int, np.integer)) or not 1 <= v <= MAX_MNK:
            raise ShapeError(f"{what}: {name}={v!r} must be an integer in 1..{MAX_MNK} (Mmad.md)")


# -- GM -> L1 ---------------------------------------------------------------------------------
def data_copy_nd2nz(dst: LocalTensor, src: GlobalTensor, n_value: int, d_value: int,
                    src_d_value: int | None = None) -> None:
    """Copy an ND tile of ``n_value`` rows x ``d_value`` columns (row stride ``src_d_value``
    elements, default ``d_value``) from GM into ``dst`` in L1 as NZ fractals: shape
    (ceil(d/C0), ceil16(n), C0), padding zero-filled (Ascend C ``DataCopy(dst, src,
    Nd2NzParams)``). Costs what moving the padded bytes costs; repeated reads of the same tile
    by several cores are served by L2 (:mod:`npulab.sim.gm`)."""
    what = "data_copy_nd2nz"
    _need(src, GlobalTensor, (), what)
    _need(dst, LocalTensor, ("L1",), what)
    rows, cols = int(n_value), int(d_value)
    stride = cols if src_d_value is None else int(src_d_value)
    if rows < 1 or cols < 1 or stride < cols:
        raise ShapeError(f"{what}: n_value={rows}, d_value={cols}, src_d_value={stride}: need "
                         f"positive sizes and a row stride of at least d_value")
    if src.dtype != dst.dtype:
        raise ShapeError(f"{what}: src is {src.dtype} and dst is {dst.dtype}; a copy does not convert")
    c0 = F.c0_of(dst.dtype)
    need = ceil_div(cols, c0) * round_up(rows, FRACTAL_ROWS) * c0
    if need > dst.size:
        raise ShapeError(f"{what}: {rows} x {cols} in NZ takes {need} elements "
                         f"({need * dst.itemsize} B) with padding; '{dst.owner}' holds {dst.size}")
    span = (rows - 1) * stride + cols
    if span > src.size:
        raise ShapeError(f"{what}: the tile reaches {span} elements past {src!r}, which holds {src.size}")
    ctx = current()
    dev, core = ctx.device, ctx.core
    if dev.functional and src.root._data is not None:
        # a move the worker may defer (formats.worker): the arrays themselves, no sync
        dev.moves.layouts.pack_nz_buffers(src.root._data, src.offset, rows, cols, stride, dst.buffer.array(),
                                          dst.offset, c0)
    moved = rows * (round_up(cols * dst.itemsize, 32))           # whole 32-byte blocks per row
    dur, lat = dev.cost.copy(Pipe.MTE2, moved, True)
    i = core.issue(Pipe.MTE2, Kind.WORK, Op.COPY_GM_TO_L1, dur, lat=lat,
                   name=f"{what} {rows}x{cols} GM->L1", nbytes=moved,
                   energy=copy_energy_pj(dev.chip, "GM", "L1", moved), route="GM->L1",
                   reads=[(f"GM:{src.name}", src.offset * src.itemsize, (src.offset + span) * src.itemsize)],
                   writes=[dst.byte_range(need)])
    it = src.itemsize
    dev.gm.read(core, i, moved, (f"GM:{src.name}", src.offset * it, cols * it, stride * it, rows))


# -- L1 -> L0A / L0B ---------------------------------------------------------------------------
def load_data(dst: LocalTensor, src: LocalTensor, rows: int, cols: int, *, src_rows: int,
              row_off: int = 0, col_off: int = 0, transpose: bool = False) -> None:
    """Load an operand from an NZ tile in L1 into L0A (ZZ) or L0B (ZN) (Ascend C ``LoadData``).

    ``src`` holds a matrix S in NZ with ``src_rows`` (padded) rows, as ``data_copy_nd2nz``
    left it. The operand written to ``dst`` is the (rows, cols) window
    ``op[r, c] = T[row_off + r, col_off + c]`` where T is S, or S transposed when
    ``transpose`` (a transposed input: LoadData with transpose). For L0A the operand is A
    (m, k); for L0B it is B (k, n).
    """
    ctx = current()
    dev, core = ctx.device, ctx.core
    # everything below the numerics depends only on these: worked out once per launch
    key = ("load_data", src.buffer.name, src.offset, src.size, src.dtype, dst.buffer.name, dst.offset,
           dst.size, dst.dtype, rows, cols, src_rows, row_off, col_off, transpose) \
        if isinstance(src, LocalTensor) and isinstance(dst, LocalTensor) else None
    plan = dev.memo.get(key) if key is not None else None
    if plan is None:
        plan = _load_plan(dev, dst, src, rows, cols, src_rows, row_off, col_off, transpose)
        if key is not None:
            dev.memo[key] = plan
    move, window, issue_args, issue_kw = plan
    if dev.functional:                     # one pass: NZ window -> ZZ / ZN (layouts.nz_window_buffers)
        move(src.buffer.array(), window[0], window[1], window[2], window[3], window[4], window[5],
             window[6], window[7], window[8], window[9], dst.buffer.array(), window[10], window[11],
             window[12], window[13], window[14])
    if dev.check_races:
        core.issue(*issue_args, **issue_kw)
    else:
        core.issue(*issue_args, name=issue_kw["name"], nbytes=issue_kw["nbytes"],
                   energy=issue_kw["energy"], route=issue_kw["route"], lat=issue_kw["lat"])


def _load_plan(dev, dst, src, rows, cols, src_rows, row_off, col_off, transpose) -> tuple:
    """load_data's checks, its move (the launch's side's) and the move's arguments, and its
    instruction, from the shapes alone (no data)."""
    what = "load_data"
    if not isinstance(src, LocalTensor) or src.buffer.name != "L1":
        _need(src, LocalTensor, ("L1",), what)
    dname = dst.buffer.name if isinstance(dst, LocalTensor) else None
    if dname != "L0A" and dname != "L0B":
        _need(dst, LocalTensor, ("L0A", "L0B"), what)
    dt = dst.dtype
    if src.dtype != dt:
        raise ShapeError(f"{what}: src is {src.dtype} and dst is {dt}; a load does not convert")
    if rows < 1 or cols < 1 or row_off < 0 or col_off < 0:
        raise ShapeError(f"{what}: rows={rows}, cols={cols}, row_off={row_off}, col_off={col_off} "
                         f"must be positive sizes and non-negative offsets")
    if src_rows % FRACTAL_ROWS:
        raise ShapeError(f"{what}: src_rows={src_rows} must be a multiple of {FRACTAL_ROWS} (NZ pads rows)")
    c0 = _C0[dt]
    zz = dname == "L0A"
    fr, fc = (FRACTAL_ROWS, c0) if zz else (c0, FRACTAL_ROWS)
    need = round_up(rows, fr) * round_up(cols, fc)
    if need > dst.size:
        raise ShapeError(f"{what}: a {rows} x {cols} operand in {'ZZ' if zz else 'ZN'} takes {need} "
                         f"elements ({need * dt.itemsize} B) with padding; '{dst.owner}' holds {dst.size}")
    # the window of S (rows x cols of S, before any transpose)
    s_r0, s_c0, s_rows, s_cols = (col_off, row_off, cols, rows) if transpose else (row_off, col_off, rows, cols)
    if s_r0 + s_rows > src_rows:
        raise ShapeError(f"{what}: rows {s_r0}..{s_r0 + s_rows} of the L1 tile are past its "
                         f"{src_rows} rows")
    c1a, c1b = s_c0 // c0, ceil_div(s_c0 + s_cols, c0)
    if c1b * src_rows * c0 > src.size:
        raise ShapeError(f"{what}: columns {s_c0}..{s_c0 + s_cols} of the L1 tile ({src_rows} rows) "
                         f"reach past '{src.owner}' ({src.size} elements)")
    item = dt.itemsize
    nbytes = need * item
    lo = src.offset + c1a * src_rows * c0 * item
    dur, lat = dev.cost.l1_to_l0(nbytes, not zz)
    issue_args = (_MTE1, _WORK, _OP_L0A if zz else _OP_L0B, dur)
    issue_kw = dict(name=f"{what} {rows}x{cols} L1->{dname}{' T' if transpose else ''}", lat=lat,
                    nbytes=nbytes, energy=copy_energy_pj(dev.chip, "L1", dname, nbytes), route=f"L1->{dname}",
                    reads=[(src.buffer.name, lo, src.offset + c1b * src_rows * c0 * item)],
                    writes=[(dname, dst.offset, dst.offset + nbytes)])
    # the move's arguments (layouts.nz_window_buffers) but for the two byte arrays
    window = (lo, (c1b - c1a) * src_rows * c0, item, src_rows, c0, s_r0, s_c0 - c1a * c0, rows, cols,
              transpose, dst.offset, need, fr, fc, not zz)
    return dev.moves.layouts.nz_window_buffers, window, issue_args, issue_kw


# -- the cube ----------------------------------------------------------------------------------
def mmad(dst: LocalTensor, a: LocalTensor, b: LocalTensor, m: int, n: int, k: int, *,
         init: bool = True) -> None:
    """L0C (m, n) = A (m, k) x B (k, n) when ``init`` (Ascend C ``cmatrixInitVal = true``),
    else L0C += A x B. A is ZZ in L0A, B is ZN in L0B, the result NZ (16 x 16 fractals, fp32
    for fp16/fp32 inputs, int32 for int8) in L0C with ceil16(m) rows per fractal column."""
    ctx = current()
    dev, core = ctx.device, ctx.core
    key = ("mmad", dst.buffer.name, dst.offset, dst.size, dst.dtype, a.buffer.name, a.offset, a.size,
           a.dtype, b.buffer.name, b.offset, b.size, b.dtype, m, n, k, init) \
        if isinstance(dst, LocalTensor) and isinstance(a, LocalTensor) and isinstance(b, LocalTensor) \
        else None
    plan = dev.memo.get(key) if key is not None else None
    if plan is None:
        plan = _mmad_plan(dev, dst, a, b, m, n, k, init)
        if key is not None:
            dev.memo[key] = plan
    m1, n1, k1, k0, acc, issue_args, issue_kw = plan
    # the PIPE_M rule (FACTS, Pipes): an mmad right after one into the same L0C bytes, on a tile
    # of fewer than PIPELINED_FRACTALS fractals, would read sums still in the cube; the compiler
    # puts a pipe_barrier(PIPE_M) between them, and so does this
    c_lo, c_hi = issue_kw["writes"][0][1], issue_kw["writes"][0][2]
    last = core.m_last_c
    if last is not None and m1 * n1 < PIPELINED_FRACTALS and c_lo < last[1] and last[0] < c_hi:
        _barrier(core, Pipe.M, " (auto)")
    core.m_last_c = (c_lo, c_hi)
    if dev.functional:
        mmad_numerics(dev.moves, dst, a, b, m1, n1, k1, k0, k, init, acc)
    if dev.check_races:
        core.issue(*issue_args, **issue_kw)
    else:
        core.issue(*issue_args, name=issue_kw["name"], nbytes=issue_kw["nbytes"],
                   flops=issue_kw["flops"], energy=issue_kw["energy"], lat=issue_kw["lat"])


def _mmad_plan(dev, dst, a, b, m, n, k, init) -> tuple:
    """mmad's checks and its instruction, from the shapes alone (no data)."""
    what = "mmad"
    if not (isinstance(a, LocalTensor) and a.buffer.name == "L0A"):
        _need(a, LocalTensor, ("L0A",), what + " (a)")
    if not (isinstance(b, LocalTensor) and b.buffer.name == "L0B"):
        _need(b, LocalTensor, ("L0B",), what + " (b)")
    if not (isinstance(dst, LocalTensor) and dst.buffer.name == "L0C"):
        _need(dst, LocalTensor, ("L0C",), what + " (dst)")
    if not (0 < m <= MAX_MNK and 0 < n <= MAX_MNK and 0 < k <= MAX_MNK):
        _dims(what, m=m, n=n, k=k)
    dt = a.dtype
    acc = ACC_DTYPE.get(dt)
    if b.dtype != dt or acc is None:
        raise ShapeError(f"{what}: a is {a.dtype} and b is {b.dtype}; the cube takes float16, "
                         f"int8 or float32 operands of one dtype")
    if dst.dtype != acc:
        raise ShapeError(f"{what}: {a.dtype} x {b.dtype} accumulates in {acc}; dst '{dst.owner}' is {dst.dtype}")
    if dst.offset % L0C_OUTPUT_ALIGN:
        raise AlignmentError(f"{what}: the output starts at L0C byte {dst.offset}, which is not "
                             f"{L0C_OUTPUT_ALIGN}-byte aligned (Mmad.md). Fix: start it at a multiple "
                             f"of {L0C_OUTPUT_ALIGN} B.")
    k0 = _C0[dt]
    m1, n1, k1 = ceil_div(m, FRACTAL_ROWS), ceil_div(n, FRACTAL_ROWS), ceil_div(k, k0)
    a_n, b_n, c_n = m1 * k1 * FRACTAL_ROWS * k0, k1 * n1 * FRACTAL_ROWS * k0, m1 * n1 * FRACTAL_ROWS * FRACTAL_ROWS
    if a_n > a.size or b_n > b.size or c_n > dst.size:
        for t, need, name in ((a, a_n, "a"), (b, b_n, "b"), (dst, c_n, "dst")):
            if need > t.size:
                raise ShapeError(f"{what}: m={m}, n={n}, k={k} needs {need} elements of {name} "
                                 f"({need * t.itemsize} B with padding); '{t.owner}' holds {t.size}")
    chip = dev.chip
    macs = m * n * k
    reads = [(a.buffer.name, a.offset, a.offset + a_n * a.itemsize),
             (b.buffer.name, b.offset, b.offset + b_n * b.itemsize)]
    c_range = ("L0C", dst.offset, dst.offset + c_n * 4)
    if not init:
        reads.append(c_range)
    dur, lat = mmad_cost(chip, m, n, k, dt)
    issue_args = (_M, _WORK, _OP_MMAD, dur)
    issue_kw = dict(name=f"mmad {m}x{n}x{k}{'' if init else ' +='}", nbytes=c_n * 4, flops=2 * macs,
                    energy=mmad_energy_pj(chip, m, n, k, dt, init), reads=reads, writes=[c_range], lat=lat)
    return m1, n1, k1, k0, acc, issue_args, issue_kw


# -- L0C -> out ------------------------------------------------------------------------------
def fixpipe(dst, src: LocalTensor, m: int, n: int, *, dst_stride: int | None = None,
            bias: LocalTensor | None = None, deq_scale: float | None = None,
            relu: bool = False) -> None:
    """Drain an (m, n) result from L0C (NZ, as ``mmad`` wrote it) to ``dst`` in ND (Ascend C
    ``Fixpipe``): a GM tile with row stride ``dst_stride`` elements (default n), or a UB
    tensor. On the way, in this order: + ``bias`` (n values in L1, fp32 or int32), x
    ``deq_scale`` (int32 -> float dequantisation), ReLU, cast to dst's dtype (fp32 -> fp16 rounds
    to nearest even). The per-channel form is :func:`npulab.lang.conv_load.fixpipe_channelwise`."""
    drain("fixpipe", dst, src, m, n, dst_stride=dst_stride, bias=bias, scale=deq_scale, relu=relu,
          scale_name="deq_scale")


def check_out_tile(what: str, src: LocalTensor, dst, m: int, n: int, rows: int, stride: int) -> int:
    """A ShapeError unless ``src`` holds an (m, n) NZ tile of ``rows`` rows a fractal column and the
    tile fits ``dst`` with row stride ``stride`` elements; returns the elements of dst it spans."""
    need = ceil_div(n, FRACTAL_ROWS) * rows * FRACTAL_ROWS
    if need > src.size:
        raise ShapeError(f"{what}: the {m} x {n} tile in NZ ({rows} rows a fractal column) takes {need} "
                         f"elements; '{src.owner}' in {src.buffer.name} holds {src.size}")
    span = (m - 1) * stride + n
    if span > dst.size:
        raise ShapeError(f"{what}: the {m} x {n} tile (row stride {stride}) needs {span} elements "
                         f"of dst, which holds {dst.size}")
    return span


def drain(what: str, dst, src: LocalTensor, m: int, n: int, *, dst_stride: int | None = None,
          bias: LocalTensor | None = None, scale=None, offset: LocalTensor | None = None,
          relu: bool = False, scale_name: str = "scale") -> None:
    """FixPipe, the one implementation behind ``fixpipe`` and ``fixpipe_channelwise``: L0C (NZ)
    -> ``dst`` (GM tile or UB/L1 tensor) in ND, per output column j

        y = (acc + bias[j]) * scale[j] + offset[j];  y = max(y, 0) if relu;  cast to dst dtype

    ``bias`` (acc dtype), ``scale`` and ``offset`` (float32) are LocalTensors of n values in L1;
    ``scale`` may also be one number (per tensor). ``what`` and ``scale_name`` name the caller
    and its keyword in error messages."""
    chip = current().device.chip
    if chip.cube.output_path != "fixpipe":
        raise DataPathError(
            f"{what}: chip '{chip.name}' has no FixPipe (its [cube] output_path is "
            f"{chip.cube.output_path!r}): the cube's result leaves L0C through the vector unit into "
            f"UB. Use data_copy_l0c2ub (L0C -> UB, vector pipe), the epilogue on the vector unit, "
            f"then data_copy_nz2nd (UB -> GM, MTE3; npulab.lang.drain_ub), or run on a chip with "
            f"FixPipe (910b, teach)")
    _need(src, LocalTensor, ("L0C",), what + " (src)")
    to_gm = isinstance(dst, GlobalTensor)
    if isinstance(dst, LocalTensor):
        _need(dst, LocalTensor, ("UB", "L1"), what + " (dst)")
    elif not to_gm:
        raise ShapeError(f"{what}: dst must be a GlobalTensor or a LocalTensor in UB/L1, got "
                         f"{type(dst).__name__}")
    m, n = int(m), int(n)
    _dims(what, m=m, n=n)
    acc = src.dtype
    if acc not in (np.dtype(np.float32), np.dtype(np.int32)):
        raise ShapeError(f"{what}: L0C holds float32 or int32, got '{src.owner}' of {acc}")
    if dst.dtype not in (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.int32)):
        raise ShapeError(f"{what}: dst must be float16, float32 or int32, got {dst.dtype}")
    if acc == np.int32 and dst.dtype.kind == "f" and scale is None:
        raise ShapeError(f"{what}: int32 results into {dst.dtype} need {scale_name}= (the "
                         f"dequantisation scale); pass {scale_name}=1.0 for a plain conversion")
    if dst.dtype == np.int32 and (scale is not None or offset is not None):
        raise ShapeError(f"{what}: an int32 dst takes the raw accumulator; {scale_name} and offset "
                         f"need a float dst")
    vecs = []
    for name, v, dt in (("bias", bias, acc), ("scale", scale, np.dtype(np.float32)),
                        ("offset", offset, np.dtype(np.float32))):
        if v is None or (name == "scale" and isinstance(v, (float, int, np.floating, np.integer))):
            continue
        _need(v, LocalTensor, ("L1",), f"{what} ({name})")
        if v.size < n or v.dtype != dt:
            raise ShapeError(f"{what}: {name} must hold {n} values of {dt}, got {v.size} of {v.dtype}")
        vecs.append(v)
    stride = n if dst_stride is None else int(dst_stride)
    if stride < n:
        raise ShapeError(f"{what}: dst_stride={stride} is smaller than n={n}")
    m1, n1 = ceil_div(m, FRACTAL_ROWS), ceil_div(n, FRACTAL_ROWS)
    span = check_out_tile(what, src, dst, m, n, m1 * FRACTAL_ROWS, stride)
    ctx = current()
    dev, core = ctx.device, ctx.core
    if dev.functional and (not to_gm or dst.root._data is not None):
        flush_l0c(src.buffer, src.offset, src.offset + m1 * n1 * FRACTAL_ROWS * FRACTAL_ROWS * 4)
        z = src.numpy()[:m1 * n1 * FRACTAL_ROWS * FRACTAL_ROWS]
        if to_gm:
            out = _gm_view(dst, m, n, stride)
        else:
            out = np.lib.stride_tricks.as_strided(dst.numpy(), shape=(m, n),
                                                  strides=(stride * dst.itemsize, dst.itemsize))
        # the common fp16 epilogue in one pass (formats.drains.drain_nz_f32_to_f16), else step by step
        moves = dev.moves
        if not (acc == np.float32 and dst.dtype == np.float16 and scale is None and offset is None and
                moves.drains.drain_nz_f32_to_f16(z, m, n, out, None if bias is None else bias.numpy()[:n], relu)):
            res = np.empty((m, n), dtype=acc)
            moves.layouts.unpack_into(z, res, FRACTAL_ROWS, FRACTAL_ROWS, True, False)
            if bias is not None:
                res += bias.numpy()[:n]
            if scale is not None:
                sc = scale.numpy()[:n] if isinstance(scale, LocalTensor) else np.float32(scale)
                res = res.astype(np.float32) * sc
            if offset is not None:
                res = res.astype(np.float32) + offset.numpy()[:n]
            if relu:
                np.maximum(res, 0, out=res)
            np.copyto(out, res, casting="unsafe")
    nbytes = m * n * dst.itemsize
    level = "GM" if to_gm else dst.buffer.name
    reads = [src.byte_range(m1 * n1 * FRACTAL_ROWS * FRACTAL_ROWS)] + [v.byte_range(n) for v in vecs]
    wr = (f"GM:{dst.name}", dst.offset * dst.itemsize, (dst.offset + span) * dst.itemsize) if to_gm \
        else (dst.buffer.name, dst.offset, dst.offset + span * dst.itemsize)
    tag = "".join(t for t, on in ((" bias", bias is not None), (" scale", scale is not None),
                                  (" offset", offset is not None), (" relu", relu)) if on)
    dur, lat = dev.cost.copy(Pipe.FIX, nbytes, to_gm)
    i = core.issue(Pipe.FIX, Kind.WORK, Op.FIXPIPE, dur, lat=lat,
                   name=f"fixpipe {m}x{n} L0C->{level}{tag}", nbytes=nbytes,
                   energy=copy_energy_pj(dev.chip, "L0C", level, nbytes),
                   route=f"L0C->{level}", reads=reads, writes=[wr])
    if to_gm:
        it = dst.itemsize
        dev.gm.write(core, i, Pipe.FIX, nbytes, (f"GM:{dst.name}", dst.offset * it, n * it, stride * it, m))


__all__ = ["data_copy_nd2nz", "load_data", "mmad", "fixpipe", "check_out_tile"]
