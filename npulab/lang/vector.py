"""Vector-unit instructions (Ascend C's ``Add``, ``Exp``, ``Cast``, ``ReduceSum``, ...).

The vector unit works in *repeats*: one repeat processes 256 bytes (8 blocks of 32 B, i.e. 128
fp16 or 64 fp32 elements), one repeat a cycle, and one instruction carries at most 255 repeats.
A call with ``count`` elements therefore becomes ceil(repeats / 255) instructions, each
occupying the vector pipe for repeats x cycles-per-repeat (more for exp, ln, sqrt, div,
reciprocal).

The vector pipe is pipelined. An instruction's start-up (the chip's ``vector.startup_cycles``)
is *latency*, not occupancy: the pipe takes the next instruction as soon as this one's repeats
have gone in, and this one's result is there start-up cycles later (``lat``, as for copies and
mmads; :mod:`npulab.sim.timeline`). An independent instruction therefore overlaps the previous
one's start-up; a dependent one must wait for it. Ascend C's ``PipeBarrier`` documentation (CANN
API reference "PipeBarrier(ISASI)", atlasascendc_api_07_0271) says so: two instructions of one
pipe with a data dependency need ``PipeBarrier<PIPE_V>()`` between them (its example: ``Add(dst0,
...); PipeBarrier<PIPE_V>(); Mul(dst1, dst0, ...)``), and with automatic synchronisation on (the
default for kernel projects) the compiler inserts it. The simulator does what the compiler does (:func:`npulab.lang.sync.vector_hazard`):
before a vector instruction that reads or overwrites UB bytes an instruction since the last
barrier wrote, it issues ``pipe_barrier V (auto)``. A set_flag on the vector pipe (a queue's
enque or free) fires once every earlier vector instruction has completed, start-up included.

Operands that meet in one UB bank group (two sources) or one bank (a source and dst) cost a
cycle more a repeat each (:mod:`npulab.sim.banks`, the trace's ``bank_conflict_ratio``).

Every call takes ``dst`` first, then sources, then ``count``, as Ascend C does. Numerics follow
numpy on the tensors' dtypes; exp/ln/sqrt of fp16 are computed in fp32 and rounded once.
"""
from __future__ import annotations

import builtins

import numpy as np

from ..arch import ceil_div
from ..errors import ShapeError
from ..sim.banks import conflict_cycles
from ..sim.cost import vector_energy_pj
from ..sim.isa import Kind, Op, Pipe
from .context import current
from .sync import vector_hazard
from .tensor import LocalTensor, as_whole

_UB = "UB"


def _check(what: str, tensors, count: int, same_dtype: bool = True) -> int:
    count = as_whole(count, what, positive=True)
    for name, t in tensors:
        if not isinstance(t, LocalTensor):
            raise ShapeError(f"{what}: {name} must be a LocalTensor in UB, got {type(t).__name__}")
        if t.buffer.name != _UB:
            raise ShapeError(f"{what}: {name} '{t.owner}' is in {t.buffer.name}; the vector unit "
                             f"reads and writes UB only")
        if count > t.size:
            raise ShapeError(f"{what}: count {count} is larger than {name} '{t.owner}' "
                             f"({t.size} elements of {t.dtype})")
    if same_dtype:
        dts = {t.dtype for _, t in tensors}
        if len(dts) > 1:
            raise ShapeError(f"{what}: operands have dtypes {', '.join(f'{n}={t.dtype}' for n, t in tensors)}; "
                             f"they must match (cast first)")
    return count


def _issue(what: str, op: Op, dst: LocalTensor, srcs, count: int, itemsize: int,
           cycles_per_repeat: int = 1, flops_per_elem: int = 1, partials: bool = False) -> None:
    """Issue ceil(repeats/255) vector instructions over ``count`` elements (``partials``: each
    repeat writes one value of dst, as WholeReduceSum does, instead of its elements)."""
    ctx = current()
    chip = ctx.device.chip
    vec = chip.vector
    per_repeat = vec.repeat_bytes // itemsize
    per_instr = per_repeat * vec.max_repeat
    for lo in range(0, count, per_instr):
        n = builtins.min(per_instr, count - lo)
        repeats = ceil_div(n, per_repeat)
        dur, lat = ctx.device.cost.vector(repeats, cycles_per_repeat)
        # UB bank conflicts between the operands (sim.banks): a cycle more a repeat for each
        clash = conflict_cycles(vec.ub_bank_bytes, vec.ub_bank_groups, vec.repeat_bytes, repeats,
                                tuple(sorted({s.offset + lo * s.itemsize for s in srcs})),
                                -1 if partials else dst.offset + lo * dst.itemsize)
        if clash:
            dur += clash
            ctx.core.bank_conflict_cycles += clash
        nbytes = n * itemsize
        reads = [(s.buffer.name, s.offset + lo * s.itemsize, s.offset + (lo + n) * s.itemsize) for s in srcs]
        if partials:
            first = lo // per_repeat
            writes = [(dst.buffer.name, dst.offset + first * dst.itemsize,
                       dst.offset + (first + repeats) * dst.itemsize)]
        else:
            writes = [(dst.buffer.name, dst.offset + lo * dst.itemsize, dst.offset + (lo + n) * dst.itemsize)]
        vector_hazard(ctx.core, reads, writes)
        ctx.core.issue(Pipe.V, Kind.WORK, op, dur, name=f"{what} {n}",
                       nbytes=nbytes, flops=n * flops_per_elem,
                       energy=vector_energy_pj(chip, nbytes, len(srcs) + 1),
                       reads=reads, writes=writes, lat=lat)


def _functional() -> bool:
    return current().device.functional


# -- binary: dst = f(src0, src1) ------------------------------------------------------------
def _binary(what, fn, slow=False):
    def op(dst: LocalTensor, src0: LocalTensor, src1: LocalTensor, count: int) -> None:
        n = _check(what, [("dst", dst), ("src0", src0), ("src1", src1)], count)
        if _functional():
            a, b, d = src0.numpy()[:n], src1.numpy()[:n], dst.numpy()
            d[:n] = fn(a, b)
        cpr = current().device.chip.vector.transcendental_cycles_per_repeat if slow else 1
        _issue(what, Op.VEC_BINARY, dst, [src0, src1], n, dst.itemsize, cpr)
    op.__name__ = what
    op.__doc__ = f"dst[i] = {what}(src0[i], src1[i]) for i < count (Ascend C ``{what.capitalize()}``)."
    return op


def _div(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(a, b) if a.dtype.kind == "f" else np.floor_divide(a, np.where(b == 0, 1, b))


add = _binary("add", np.add)
sub = _binary("sub", np.subtract)
mul = _binary("mul", np.multiply)
div = _binary("div", _div, slow=True)
max = _binary("max", np.maximum)  # noqa: A001 - Ascend C's name
min = _binary("min", np.minimum)  # noqa: A001


# -- with a scalar: dst = f(src, scalar) ----------------------------------------------------
def _scalar(what, fn):
    def op(dst: LocalTensor, src: LocalTensor, scalar, count: int) -> None:
        n = _check(what, [("dst", dst), ("src", src)], count)
        if isinstance(scalar, (bool, np.bool_)) or not isinstance(scalar, (int, float, np.integer, np.floating)):
            raise ShapeError(f"{what}: scalar must be a number, got {scalar!r} ({type(scalar).__name__})")
        if _functional():
            s = src.numpy()[:n]
            dst.numpy()[:n] = fn(s, s.dtype.type(scalar))
        _issue(what, Op.VEC_SCALAR, dst, [src], n, dst.itemsize)
    op.__name__ = what
    op.__doc__ = f"dst[i] = {what[:-1]}(src[i], scalar) for i < count (Ascend C ``{what.capitalize()}``)."
    return op


adds = _scalar("adds", np.add)
muls = _scalar("muls", np.multiply)
maxs = _scalar("maxs", np.maximum)
mins = _scalar("mins", np.minimum)


# -- unary: dst = f(src) ----------------------------------------------------------------------
def _in_fp32(fn):
    def wrapped(x):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if x.dtype == np.float16:
                return fn(x.astype(np.float32)).astype(np.float16)
            return fn(x)
    return wrapped


def _unary(what, fn, slow=False):
    def op(dst: LocalTensor, src: LocalTensor, count: int) -> None:
        n = _check(what, [("dst", dst), ("src", src)], count)
        if _functional():
            dst.numpy()[:n] = fn(src.numpy()[:n])
        cpr = current().device.chip.vector.transcendental_cycles_per_repeat if slow else 1
        _issue(what, Op.VEC_UNARY, dst, [src], n, dst.itemsize, cpr)
    op.__name__ = what
    op.__doc__ = f"dst[i] = {what}(src[i]) for i < count (Ascend C ``{what.capitalize()}``)."
    return op


abs = _unary("abs", np.abs)  # noqa: A001
relu = _unary("relu", lambda x: np.maximum(x, x.dtype.type(0)))
exp = _unary("exp", _in_fp32(np.exp), slow=True)
ln = _unary("ln", _in_fp32(np.log), slow=True)
sqrt = _unary("sqrt", _in_fp32(np.sqrt), slow=True)
reciprocal = _unary("reciprocal", _in_fp32(lambda x: 1.0 / x), slow=True)
# Ascend C ``Rsqrt`` (dst = 1 / sqrt(src), half and float; asc-devkit API reference "Rsqrt",
# atlasascendc_api_07_0030, lists the Atlas training and A2/A3 series): one transcendental
# instruction where sqrt + reciprocal are two, costed as they are (start-up + repeats x the
# transcendental cycles a repeat)
rsqrt = _unary("rsqrt", _in_fp32(lambda x: 1.0 / np.sqrt(x)), slow=True)

ROUND_MODES = ("none", "rint", "floor", "ceil", "round", "trunc")


def cast(dst: LocalTensor, src: LocalTensor, round_mode: str = "rint", count: int | None = None) -> None:
    """dst[i] = src[i] converted to dst's dtype (Ascend C ``Cast``). ``round_mode`` applies when
    a float becomes an integer: rint (to nearest even), floor, ceil, round (half away from
    zero), trunc; "none" means rint."""
    count = builtins.min(dst.size, src.size) if count is None else count
    n = _check("cast", [("dst", dst), ("src", src)], count, same_dtype=False)
    if round_mode not in ROUND_MODES:
        raise ShapeError(f"cast: round_mode must be one of {ROUND_MODES}, got {round_mode!r}")
    if _functional():
        x = src.numpy()[:n]
        if dst.dtype.kind in "iu" and x.dtype.kind == "f":
            r = {"none": np.rint, "rint": np.rint, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
                 "round": lambda v: np.sign(v) * np.floor(np.abs(v) + 0.5)}[round_mode]
            info = np.iinfo(dst.dtype)
            x = np.clip(r(x.astype(np.float64)), info.min, info.max)   # saturate, as the hardware does
        with np.errstate(over="ignore"):          # fp32 beyond the fp16 range becomes +-inf
            dst.numpy()[:n] = x.astype(dst.dtype)
    _issue("cast", Op.VEC_CAST, dst, [src], n, builtins.max(dst.itemsize, src.itemsize))


def duplicate(dst: LocalTensor, scalar, count: int) -> None:
    """dst[i] = scalar for i < count (Ascend C ``Duplicate``)."""
    n = _check("duplicate", [("dst", dst)], count)
    if _functional():
        dst.numpy()[:n] = dst.dtype.type(scalar)
    _issue("duplicate", Op.VEC_DUP, dst, [], n, dst.itemsize)


def _reduce(what, fn):
    def op(dst: LocalTensor, src: LocalTensor, count: int) -> None:
        n = _check(what, [("src", src)], count)
        _check(what, [("dst", dst)], 1)
        if dst.dtype != src.dtype:
            raise ShapeError(f"{what}: dst is {dst.dtype} and src {src.dtype}; they must match (cast first)")
        per_repeat = current().device.chip.vector.repeat_bytes // src.itemsize
        parts = ceil_div(n, per_repeat)
        if parts > dst.size:
            raise ShapeError(f"{what}: dst '{dst.owner}' holds {dst.size} elements of {dst.dtype}, and the "
                             f"first pass writes one partial a repeat there: {parts} for count {n} "
                             f"({per_repeat} elements a repeat), folded into dst[0] after. Give dst at "
                             f"least {parts} elements")
        if _functional():
            x = src.numpy()[:n]
            acc = x.astype(np.float32) if x.dtype == np.float16 else x
            dst.numpy()[0] = fn(acc)
        # the repeats over src (one partial each), then log2(elements a repeat) folding steps (chosen)
        _issue(what, Op.VEC_REDUCE, dst, [src], n, src.itemsize, partials=True)
        _issue(what + " fold", Op.VEC_REDUCE, dst, [dst], 1, src.itemsize,
               cycles_per_repeat=int(np.log2(per_repeat)), flops_per_elem=0)
    op.__name__ = what
    op.__doc__ = (f"dst[0] = {what.split('_')[1]} of src[:count] (Ascend C ``{what.title().replace('_', '')}``); "
                  f"fp16 accumulates in fp32. dst holds the per-repeat partials first (one a repeat of "
                  f"src), so it needs ceil(count / elements a repeat) elements.")
    return op


reduce_sum = _reduce("reduce_sum", np.sum)
reduce_max = _reduce("reduce_max", np.max)


def gather(dst: LocalTensor, src: LocalTensor, offsets: LocalTensor, count: int) -> None:
    """dst[i] = src[offsets[i] // itemsize] for i < count (Ascend C ``Gather``: ``offsets`` is an
    int32 tensor of byte offsets from src's start). Cost (chosen, no public figure): a gather
    fetches one 32-byte block per element, so a repeat of 256 bytes takes 256 / 32 = 8 cycles."""
    n = _check("gather", [("dst", dst), ("src", src)], count)
    _check("gather", [("offsets", offsets)], n, same_dtype=False)
    if offsets.dtype != np.int32:
        raise ShapeError(f"gather: offsets must be int32 byte offsets, got {offsets.dtype}")
    if _functional():
        off = offsets.numpy()[:n]
        if off.size and (off.min() < 0 or off.max() >= src.nbytes or np.any(off % src.itemsize)):
            raise ShapeError(f"gather: byte offsets must be multiples of {src.itemsize} inside "
                             f"'{src.owner}' ({src.nbytes} B); got range [{off.min()}, {off.max()}]")
        dst.numpy()[:n] = src.numpy()[off // src.itemsize]
    chip = current().device.chip
    _issue("gather", Op.VEC_UNARY, dst, [src, offsets], n, dst.itemsize,
           cycles_per_repeat=chip.vector.repeat_bytes // 32, flops_per_elem=0)


# -- fused multiply-add ------------------------------------------------------------------------
# Ascend C ``FusedMulAdd`` (dst = src0 * dst + src1) and ``MulAddDst`` (dst = src0 * src1 + dst),
# half and float (asc-devkit docs/api/context/FusedMulAdd.md, MulAddDst.md; the product lists
# there name the Atlas A2/A3 (910B/910C) series; the simulator gives every chip one vector ISA).
# Both take BinaryRepeatParams like Add, so they cost what Add costs: start-up + repeats x 1.
def _fma_numpy(a, b, c):
    with np.errstate(over="ignore", invalid="ignore"):
        return (a * b + c).astype(a.dtype)


def fused_mul_add(dst: LocalTensor, src0: LocalTensor, src1: LocalTensor, count: int) -> None:
    """dst[i] = src0[i] * dst[i] + src1[i] for i < count (Ascend C ``FusedMulAdd``)."""
    n = _check("fused_mul_add", [("dst", dst), ("src0", src0), ("src1", src1)], count)
    if _functional():
        d = dst.numpy()
        d[:n] = _fma_numpy(src0.numpy()[:n], d[:n], src1.numpy()[:n])
    _issue("fused_mul_add", Op.VEC_BINARY, dst, [src0, src1, dst], n, dst.itemsize, flops_per_elem=2)


def fused_mul_add_const(dst: LocalTensor, src: LocalTensor, consts: LocalTensor, count: int) -> None:
    """dst[i] = src[i] * dst[i] + c for i < count: the Horner step h = h * s + c of a polynomial
    in s as one instruction. ``consts`` holds one repeat (256 bytes) of c, filled once by
    ``duplicate``; Ascend C ``FusedMulAdd(dst, src, consts)`` with src1RepStride = 0 reuses
    that repeat for every repeat of dst."""
    per_repeat = current().device.chip.vector.repeat_bytes // dst.itemsize
    n = _check("fused_mul_add", [("dst", dst), ("src", src)], count)
    _check("fused_mul_add", [("consts", consts)], builtins.min(n, per_repeat))
    if consts.dtype != dst.dtype:
        raise ShapeError(f"fused_mul_add: consts is {consts.dtype} and dst {dst.dtype}; they must match")
    if _functional():
        d = dst.numpy()
        k = builtins.min(n, per_repeat)
        c = np.tile(consts.numpy()[:k], ceil_div(n, k))[:n]
        d[:n] = _fma_numpy(src.numpy()[:n], d[:n], c)
    _issue("fused_mul_add", Op.VEC_BINARY, dst, [src, consts, dst], n, dst.itemsize, flops_per_elem=2)


def mul_add_dst(dst: LocalTensor, src0: LocalTensor, src1: LocalTensor, count: int) -> None:
    """dst[i] = src0[i] * src1[i] + dst[i] for i < count (Ascend C ``MulAddDst``)."""
    n = _check("mul_add_dst", [("dst", dst), ("src0", src0), ("src1", src1)], count)
    if _functional():
        d = dst.numpy()
        d[:n] = _fma_numpy(src0.numpy()[:n], src1.numpy()[:n], d[:n])
    _issue("mul_add_dst", Op.VEC_BINARY, dst, [src0, src1, dst], n, dst.itemsize, flops_per_elem=2)
