"""The vector unit's 2-D forms: a tile of rows at once, by repeat and block strides (Ascend C's
BinaryRepeatParams, WholeReduceSum, Brcb), and the ones that broadcast a per-row or a per-column
operand. The 1-D forms and the pipelining rules every vector instruction follows are
:mod:`npulab.lang.vector`.
"""
from __future__ import annotations

import builtins

import numpy as np

from ..arch import ceil_div, round_up
from ..errors import ShapeError
from ..sim.cost import vector_energy_pj
from ..sim.isa import Kind, Op, Pipe
from .context import current
from .sync import vector_hazard
from .tensor import LocalTensor, as_whole
from .vector import _check, _fma_numpy, _functional, _issue


# -- 2-D forms: rows of a tile at once (repeat strides) --------------------------------------
# A tile of ``rows`` rows, row r starting at element r * stride, cols elements each. When a row
# starts on a 32-byte block (stride * itemsize a multiple of 32) the hardware sweeps every row
# in one instruction per column chunk of one repeat width, using a repeat stride of one row
# (Ascend C's BinaryRepeatParams / WholeReduceSum): ceil(cols / per_repeat) instructions of
# ``rows`` repeats each (split at 255), or, when that is fewer instructions, one instruction
# per row. Rows that are not block-aligned leave only the loop over rows. An operation whose
# repeats do not depend on the row (``contiguous``: a reduction's first pass) runs over
# densely packed rows of whole repeats as one long instruction. Every repeat is counted.
#
# An elementwise operation (``across_rows``) has a third form: a repeat's 8 blocks taken from 8
# different rows. BinaryRepeatParams / UnaryRepeatParams carry a block stride besides the
# repeat stride (dstBlkStride, src0BlkStride, src1BlkStride: uint8_t, in 32-byte blocks;
# asc-devkit API reference "BinaryRepeatParams", atlasascendc_api_07_0013; the strides are
# explained under dataBlockStride / repeatStride in the Ascend C guide): with the block
# stride one row (stride * itemsize / 32 <= 255 blocks) and the repeat stride one block, repeat
# k processes block k of 8 rows, so ceil(rows / 8) instructions of (blocks a row) repeats
# sweep the tile; a per-row operand spread by Brcb (one block a row) is read with block stride
# 1 and repeat stride 0, a per-column operand (one row) with block stride 0 and repeat stride
# 1. A last group of fewer than 8 rows masks the missing blocks, and a row's partial last block
# is one more instruction a group (its own mask). The form with the fewest cycles is used,
# as a kernel author would pick the strides. Reductions cannot use it: a repeat's blocks would
# mix rows.
def _issue_rows(what: str, op: Op, dst: LocalTensor, srcs, rows: int, cols: int, stride: int,
                itemsize: int, cycles_per_repeat: int = 1, flops_per_elem: int = 1,
                extra_cycles: int = 0, dst_rows: bool = True, contiguous: bool = False,
                across_rows: bool = False, src_stride: int | None = None) -> None:
    """``stride``: elements between rows of dst (and of the sources unless ``src_stride``)."""
    ctx = current()
    chip = ctx.device.chip
    vec = chip.vector
    per_repeat = vec.repeat_bytes // itemsize
    chunks = ceil_div(cols, per_repeat)
    rep, lat = ctx.device.cost.vector(1, cycles_per_repeat)
    src_stride = stride if src_stride is None else src_stride
    span = (rows - 1) * stride + cols
    src_span = (rows - 1) * src_stride + cols
    # occupancy: extra_cycles (a reduction's adder-tree fold) + the repeats; the start-up is
    # latency (see the module docstring). ``start`` is what one instruction costs alone, to
    # pick the form with the fewest cycles.
    start = lat + extra_cycles
    reads = [(s.buffer.name, s.offset, s.offset + builtins.min(s.size, src_span) * s.itemsize) for s in srcs]
    hi = dst.offset + (span if dst_rows else rows) * dst.itemsize
    writes = [(dst.buffer.name, dst.offset, builtins.min(hi, dst.offset + dst.nbytes))]
    # the instructions of one call are independent (each computes its own elements from the
    # sources, also in place): one check against what earlier calls wrote covers them all
    vector_hazard(ctx.core, reads, writes)

    def one(repeats, n):
        nbytes = n * itemsize
        ctx.core.issue(Pipe.V, Kind.WORK, op, extra_cycles + repeats * rep,
                       name=f"{what} {rows}x{cols}", nbytes=nbytes, flops=n * flops_per_elem,
                       energy=vector_energy_pj(chip, nbytes, len(srcs) + 1),
                       reads=reads, writes=writes, lat=lat)

    if stride == cols == src_stride and cols % per_repeat == 0 and contiguous:
        # whole repeats back to back: every repeat lies in one row, no stride needed
        total = rows * chunks
        for r0 in range(0, total, vec.max_repeat):
            rr = builtins.min(vec.max_repeat, total - r0)
            one(rr, rr * per_repeat)
        return
    aligned = (stride * itemsize) % 32 == 0 and (src_stride * itemsize) % 32 == 0
    by_chunk = aligned and chunks * ceil_div(rows, vec.max_repeat) <= rows
    if by_chunk:        # one instruction a column chunk, a repeat a row
        plan = [(rr, rr * builtins.min(per_repeat, cols - c * per_repeat)) for c in range(chunks)
                for rr in _split(rows, vec.max_repeat)]
    else:               # one instruction a row (or a part of one), a repeat a column chunk
        plan = [(rr, builtins.min(cols - r0 * per_repeat, rr * per_repeat)) for _ in range(rows)
                for r0, rr in zip(range(0, chunks, vec.max_repeat), _split(chunks, vec.max_repeat))]
    if across_rows and aligned and builtins.max(stride, src_stride) * itemsize // 32 <= 255:
        # a repeat = block k of 8 rows (see above): per group, the row's whole blocks, then
        # its partial last block if any
        per_block = 32 // itemsize
        full, tail = divmod(cols, per_block)
        blocks = []
        for r0 in range(0, rows, 8):
            g = builtins.min(8, rows - r0)
            blocks += [(rr, rr * g * per_block) for rr in _split(full, vec.max_repeat)]
            if tail:
                blocks.append((1, g * tail))
        if sum(start + rr * rep for rr, _ in blocks) < sum(start + rr * rep for rr, _ in plan):
            plan = blocks
    for rr, n in plan:
        one(rr, n)


def _split(n: int, most: int) -> list[int]:
    """n repeats as instructions of at most ``most`` repeats each."""
    return [builtins.min(most, n - k) for k in range(0, n, most)]


def _check_rows(what, tensors, rows, cols, stride):
    rows, cols = as_whole(rows, what, "rows"), as_whole(cols, what, "cols")
    stride = cols if stride is None else as_whole(stride, what, "stride")
    if rows <= 0 or cols <= 0:
        raise ShapeError(f"{what}: rows and cols must be positive, got rows={rows}, cols={cols}")
    if stride < cols:
        raise ShapeError(f"{what}: stride {stride} is shorter than a row ({cols} elements)")
    _check(what, tensors, (rows - 1) * stride + cols)
    return rows, cols, stride


def _view(t: LocalTensor, rows, cols, stride):
    """rows x cols numpy view of a strided tile."""
    a = t.numpy()
    return np.lib.stride_tricks.as_strided(a, (rows, cols), (stride * a.itemsize, a.itemsize))


# -- one dependent instruction at a time ----------------------------------------------------
# A call below that issues dependent instructions (a reduction's passes; a Brcb and the
# instruction that reads it) has a ``steps`` form: a generator that issues one of them per
# step, so a kernel can put independent work (another tile's) between them and let one PIPE_V
# barrier order both (see the module docstring). ``op(...)`` is ``for _ in op.steps(...): pass``.
def _with_steps(steps, name, doc):
    def op(*args, **kwargs) -> None:
        for _ in steps(*args, **kwargs):
            pass
    op.__name__, op.__doc__, op.steps = name, doc, steps
    steps.__name__ = f"{name}.steps"
    return op


def _reduce_rows(what, fn, ascend):
    def steps(dst: LocalTensor, src: LocalTensor, rows: int, cols: int, stride: int | None = None):
        rows, cols, stride = _check_rows(what, [("src", src)], rows, cols, stride)
        _check(what, [("dst", dst)], rows)
        if dst.dtype != src.dtype:
            raise ShapeError(f"{what}: dst is {dst.dtype} and src is {src.dtype}; they must match")
        if _functional():
            x = _view(src, rows, cols, stride)
            acc = x.astype(np.float32) if x.dtype == np.float16 else x
            dst.numpy()[:rows] = fn(acc, axis=1)
        # pass 1 reduces every repeat of a row to one partial; further passes reduce the
        # partials (one repeat per row) until one value a row is left; each pass drains a
        # log2(per_repeat)-deep adder tree once (chosen, as reduce_sum's fold)
        per_repeat = current().device.chip.vector.repeat_bytes // src.itemsize
        fold = int(np.log2(per_repeat))
        _issue_rows(what, Op.VEC_REDUCE, dst, [src], rows, cols, stride, src.itemsize,
                    extra_cycles=fold, dst_rows=False, contiguous=True)
        parts = ceil_div(cols, per_repeat)
        while parts > 1:
            yield
            _issue_rows(what + " partials", Op.VEC_REDUCE, dst, [dst], rows, parts, parts if parts *
                        src.itemsize % 32 == 0 else round_up(parts * src.itemsize, 32) // src.itemsize,
                        src.itemsize, extra_cycles=fold, dst_rows=False)
            parts = ceil_div(parts, per_repeat)
        yield
    return _with_steps(steps, what,
                       f"dst[r] = {fn.__name__} of src[r * stride: r * stride + cols] for r < rows (Ascend C "
                       f"``{ascend}`` over each repeat of a row, then over the partials); fp16 accumulates "
                       f"in fp32. stride defaults to cols. ``.steps``: one pass a step.")


reduce_sum_rows = _reduce_rows("reduce_sum_rows", np.sum, "WholeReduceSum")
reduce_max_rows = _reduce_rows("reduce_max_rows", np.max, "WholeReduceMax")


def _binary_bcast(what, fn, axis, slow=False):
    """dst[r, c] = fn(src[r, c], vec[r]) (axis "row": one value a row, broadcast by Brcb) or
    fn(src[r, c], vec[c]) (axis "col": one row reused, repeat stride 0)."""
    def steps(dst: LocalTensor, src: LocalTensor, vec: LocalTensor, rows: int, cols: int,
              stride: int | None = None):
        rows, cols, stride = _check_rows(what, [("dst", dst), ("src", src)], rows, cols, stride)
        _check(what, [("vec", vec)], rows if axis == "row" else cols)
        if len({dst.dtype, src.dtype, vec.dtype}) > 1:
            raise ShapeError(f"{what}: dst {dst.dtype}, src {src.dtype} and vec {vec.dtype} must have one dtype")
        if _functional():
            v = vec.numpy()[: rows if axis == "row" else cols]
            v = v[:, None] if axis == "row" else v[None, :]
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                _view(dst, rows, cols, stride)[...] = fn(_view(src, rows, cols, stride), v)
        chip = current().device.chip
        if axis == "row" and (stride * dst.itemsize) % 32 == 0:
            # Brcb: each value of vec fills one 32-byte block, 8 values a repeat
            _issue("brcb", Op.VEC_DUP, dst, [vec], rows, 32, flops_per_elem=0)
            yield
        cpr = chip.vector.transcendental_cycles_per_repeat if slow else 1
        _issue_rows(what, Op.VEC_BINARY, dst, [src, vec], rows, cols, stride, dst.itemsize, cpr,
                    across_rows=True)
        yield
    idx = "r" if axis == "row" else "c"
    return _with_steps(steps, what,
                       f"dst[r, c] = {fn.__name__}(src[r, c], vec[{idx}]) over a rows x cols tile whose rows "
                       f"start every ``stride`` elements (default cols): a per-{axis} operand broadcast "
                       f"along the other axis. ``.steps``: the Brcb, then the operation.")


add_per_row = _binary_bcast("add_per_row", np.add, "row")
sub_per_row = _binary_bcast("sub_per_row", np.subtract, "row")
mul_per_row = _binary_bcast("mul_per_row", np.multiply, "row")
div_per_row = _binary_bcast("div_per_row", np.divide, "row", slow=True)
add_per_col = _binary_bcast("add_per_col", np.add, "col")
sub_per_col = _binary_bcast("sub_per_col", np.subtract, "col")
mul_per_col = _binary_bcast("mul_per_col", np.multiply, "col")
max_per_col = _binary_bcast("max_per_col", np.maximum, "col")
# the rest of the binary set (Ascend C's Div, Max, Min take the same BinaryRepeatParams), for
# the broadcasting RealDiv, Maximum and Minimum of kernels.broadcast
div_per_col = _binary_bcast("div_per_col", np.divide, "col", slow=True)
max_per_row = _binary_bcast("max_per_row", np.maximum, "row")
min_per_row = _binary_bcast("min_per_row", np.minimum, "row")
min_per_col = _binary_bcast("min_per_col", np.minimum, "col")


def _binary_rows(what, fn):
    """dst[r, c] = fn(src0[r, c], src1[r, c]) over rows x cols tiles whose rows start every
    ``dst_stride`` (dst) and ``src_stride`` (both sources) elements: Ascend C's binary
    instruction with BinaryRepeatParams, as the per-row forms are, so it costs what they cost
    (the fewest-cycle form of _issue_rows). One use: folding each row's second half onto its
    first (cols = half a row, src1 = src0 from the middle of its first row) before a
    reduction."""
    def op(dst: LocalTensor, src0: LocalTensor, src1: LocalTensor, rows: int, cols: int,
           dst_stride: int | None = None, src_stride: int | None = None) -> None:
        rows, cols, dst_stride = _check_rows(what, [("dst", dst)], rows, cols, dst_stride)
        _, _, src_stride = _check_rows(what, [("src0", src0), ("src1", src1)], rows, cols, src_stride)
        if len({dst.dtype, src0.dtype, src1.dtype}) > 1:
            raise ShapeError(f"{what}: dst {dst.dtype}, src0 {src0.dtype} and src1 {src1.dtype} must have one dtype")
        if _functional():
            with np.errstate(over="ignore", invalid="ignore"):
                r = fn(_view(src0, rows, cols, src_stride), _view(src1, rows, cols, src_stride))
                _view(dst, rows, cols, dst_stride)[...] = r
        _issue_rows(what, Op.VEC_BINARY, dst, [src0, src1], rows, cols, dst_stride, dst.itemsize,
                    across_rows=True, src_stride=src_stride)
    op.__name__ = what
    op.__doc__ = _binary_rows.__doc__.replace("dst[r, c] = fn(", f"{what}: dst[r, c] = {fn.__name__}(", 1)
    return op


add_rows = _binary_rows("add_rows", np.add)
mul_rows = _binary_rows("mul_rows", np.multiply)
max_rows = _binary_rows("max_rows", np.maximum)     # a ReduceMax folding rows onto rows


def mul_add_dst_rows(dst: LocalTensor, src0: LocalTensor, src1: LocalTensor, rows: int, cols: int,
                     dst_stride: int | None = None, src_stride: int | None = None) -> None:
    """dst[r, c] = src0[r, c] * src1[r, c] + dst[r, c] over rows x cols tiles (row strides as
    add_rows): Ascend C ``MulAddDst`` with BinaryRepeatParams (asc-devkit API reference
    "MulAddDst", atlasascendc_api_07_0048), costed as mul_add_dst. With mul_rows before it, the
    squares of a row's two halves summed in one pass (a variance)."""
    rows, cols, dst_stride = _check_rows("mul_add_dst_rows", [("dst", dst)], rows, cols, dst_stride)
    _, _, src_stride = _check_rows("mul_add_dst_rows", [("src0", src0), ("src1", src1)], rows, cols, src_stride)
    if len({dst.dtype, src0.dtype, src1.dtype}) > 1:
        raise ShapeError(f"mul_add_dst_rows: dst {dst.dtype}, src0 {src0.dtype} and src1 {src1.dtype} "
                         f"must have one dtype")
    if _functional():
        d = _view(dst, rows, cols, dst_stride)
        d[...] = _fma_numpy(_view(src0, rows, cols, src_stride), _view(src1, rows, cols, src_stride), d)
    _issue_rows("mul_add_dst_rows", Op.VEC_BINARY, dst, [src0, src1, dst], rows, cols, dst_stride,
                dst.itemsize, flops_per_elem=2, across_rows=True, src_stride=src_stride)


def _fma_bcast(what, axis):
    """dst[r, c] = a[i] * dst[r, c] + b[i] over a rows x cols tile, i = r (axis "row": a and b
    one value a row, each spread over a 32-byte block by Brcb) or i = c (axis "col": one row
    of a and b reused by every row, repeat stride 0). Ascend C ``FusedMulAdd`` with
    BinaryRepeatParams, as add_per_row / add_per_col are ``Add``."""
    def steps(dst: LocalTensor, a: LocalTensor, b: LocalTensor, rows: int, cols: int,
              stride: int | None = None):
        rows, cols, stride = _check_rows(what, [("dst", dst)], rows, cols, stride)
        k = rows if axis == "row" else cols
        _check(what, [("a", a), ("b", b)], k)
        if len({dst.dtype, a.dtype, b.dtype}) > 1:
            raise ShapeError(f"{what}: dst {dst.dtype}, a {a.dtype} and b {b.dtype} must have one dtype")
        if _functional():
            va, vb = a.numpy()[:k], b.numpy()[:k]
            va, vb = (va[:, None], vb[:, None]) if axis == "row" else (va[None, :], vb[None, :])
            v = _view(dst, rows, cols, stride)
            with np.errstate(over="ignore", invalid="ignore"):
                v[...] = (va * v + vb).astype(dst.dtype)
        if axis == "row" and (stride * dst.itemsize) % 32 == 0:
            _issue("brcb", Op.VEC_DUP, dst, [a], rows, 32, flops_per_elem=0)
            _issue("brcb", Op.VEC_DUP, dst, [b], rows, 32, flops_per_elem=0)
            yield
        _issue_rows(what, Op.VEC_BINARY, dst, [a, b, dst], rows, cols, stride, dst.itemsize, flops_per_elem=2,
                    across_rows=True)
        yield
    return _with_steps(steps, what, _fma_bcast.__doc__.replace("dst[r, c] = ", f"{what}: dst[r, c] = ", 1))


fused_mul_add_per_row = _fma_bcast("fused_mul_add_per_row", "row")
fused_mul_add_per_col = _fma_bcast("fused_mul_add_per_col", "col")
