"""Every exercise checker accepts the reference solution, rejects typical mistakes with a hint
that names the concept, says "not attempted yet" for an untouched blank, and never raises.

The reference answers here are written independently of the checkers (from the chip figures
and the lab specs); the learner notebooks are executed to prove their untouched blanks read as
"not attempted", and the solution notebooks' stored check outputs must all be PASS.
"""
from __future__ import annotations

import functools
import itertools
import re
from dataclasses import replace
from pathlib import Path

import nbformat
import numpy as np
import pytest

import labcases
import npulab
from npulab import lang
from npulab.bench.model import NAIVE, OPTIMISATIONS
from npulab.chips import get_chip
from npulab.kernels.conv import ConvTiles
from npulab.kernels.elementwise import AddTiling, KernelAdd, add_tiling
from npulab.kernels.examples.row_scale import RowScaleTiling
from npulab.graph.offsets import best_fit, greedy_by_size, meets, place_in_order
from npulab.graph.offsets import peak as offsets_peak
from npulab.labs import check, lab02, lab07, lab09, lab15
from npulab.labs.check import REGISTRY, same_code
from npulab.labs.lab02 import scratch
from npulab.lang import (PIPE_ALL, PIPE_FIX, PIPE_MTE2, PIPE_MTE3, PIPE_V, VECIN, VECOUT, TPipe, Queue,
                         data_copy, fixpipe, get_block_idx, load_data, mmad, pipe_barrier, set_flag,
                         wait_flag)
from npulab.ops import golden
from npulab.sim.isa import Pipe as HwPipe

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "labs"
CHECK_CALL = re.compile(r"check\.(lab\d\d)\.(\w+)\(")

C910, TEACH = npulab.get_chip("910"), npulab.get_chip("teach")


# -- reference solutions and typical mistakes, written from the specs -------------------------
class ComputeOk(KernelAdd):
    def compute(self, count):
        x, y = self.in_x.deque(), self.in_y.deque()
        z = self.out_z.alloc_tensor(self.dtype)
        lang.add(z, x, y, count)
        self.out_z.enque(z)
        self.in_x.free_tensor(x)
        self.in_y.free_tensor(y)


class ComputeNoFree(KernelAdd):
    def compute(self, count):
        x, y = self.in_x.deque(), self.in_y.deque()
        z = self.out_z.alloc_tensor(self.dtype)
        lang.add(z, x, y, count)
        self.out_z.enque(z)


class ComputeNoEnque(KernelAdd):
    def compute(self, count):
        x, y = self.in_x.deque(), self.in_y.deque()
        z = self.out_z.alloc_tensor(self.dtype)
        lang.add(z, x, y, count)
        self.in_x.free_tensor(x)
        self.in_y.free_tensor(y)


class ComputeFreeTooEarly(KernelAdd):
    def compute(self, count):
        x, y = self.in_x.deque(), self.in_y.deque()
        z = self.out_z.alloc_tensor(self.dtype)
        self.in_x.free_tensor(x)
        self.in_y.free_tensor(y)
        lang.add(z, x, y, count)
        self.out_z.enque(z)


class ComputeSub(KernelAdd):
    def compute(self, count):
        x, y = self.in_x.deque(), self.in_y.deque()
        z = self.out_z.alloc_tensor(self.dtype)
        lang.sub(z, x, y, count)
        self.out_z.enque(z)
        self.in_x.free_tensor(x)
        self.in_y.free_tensor(y)


class ComputeBarrier(KernelAdd):
    """Right values, but a full barrier after every add serialises the pipes: too slow."""
    def compute(self, count):
        x, y = self.in_x.deque(), self.in_y.deque()
        z = self.out_z.alloc_tensor(self.dtype)
        lang.add(z, x, y, count)
        pipe_barrier(PIPE_ALL)
        self.out_z.enque(z)
        self.in_x.free_tensor(x)
        self.in_y.free_tensor(y)


class ComputeBlank(KernelAdd):
    def compute(self, count):
        ...


def _one_tile(fix: str):
    def kernel(x, y, z):
        n = x.size
        xu, yu, zu = scratch(n)
        data_copy(xu, x, n)
        data_copy(yu, y, n)
        set_flag(PIPE_MTE2, PIPE_V, 0)
        wait_flag(PIPE_MTE2, PIPE_V, 0)
        lang.add(zu, xu, yu, n)
        if fix == "flags":
            set_flag(PIPE_V, PIPE_MTE3, 0)
            wait_flag(PIPE_V, PIPE_MTE3, 0)
        elif fix == "wrong pipes":
            set_flag(PIPE_MTE2, PIPE_MTE3, 1)
            wait_flag(PIPE_MTE2, PIPE_MTE3, 1)
        elif fix == "wait only":
            wait_flag(PIPE_V, PIPE_MTE3, 0)
        data_copy(z, zu, n)
    return kernel


def _racy_copy(x, y, z):
    """lab02.add_one_tile_racy, retyped as a learner's stub would have it (plus the blank)."""
    n = x.size
    xu, yu, zu = scratch(n)                   # three tensors of n fp16 in UB
    data_copy(xu, x, n)                       # MTE2: GM -> UB
    data_copy(yu, y, n)
    set_flag(PIPE_MTE2, PIPE_V, 0)            # the copies in are done ...
    wait_flag(PIPE_MTE2, PIPE_V, 0)           # ... before the vector unit reads
    lang.add(zu, xu, yu, n)                   # V: the add
    # YOUR CODE HERE (about 2 lines)
    ...
    data_copy(z, zu, n)                       # MTE3: UB -> GM


# -- lab 03 ------------------------------------------------------------------------------------
def _add_tiling(align="up", tile="ub", buffers=True, cap="eighth"):
    """The package's Add tiling as the spec states it, or one of its typical slips: ``cap`` is
    the limit from the block ("eighth": ceil(bf / 8) rounded up to 32-byte blocks; "eighth down":
    rounded down; "block": bf itself (the old rule); "none": no limit)."""
    def fn(n, dtype, chip, buffer_num):
        pb = 32 // dtype.itemsize
        if align == "up":
            bf = -(-(-(-n // chip.ai_cores)) // pb) * pb
        elif align == "down":
            bf = max(pb, -(-n // chip.ai_cores) // pb * pb)
        else:
            bf = -(-n // chip.ai_cores)
        bn = buffer_num if buffers else 1
        top = chip.buffers.ub // (3 * bn) // 32 * 32
        limit = {"eighth": -(-(-(-bf // 8)) // pb) * pb, "eighth down": max(pb, -(-bf // 8) // pb * pb),
                 "block": bf, "none": top}[cap]
        t = {"ub": min(top // dtype.itemsize, limit), "bytes": top, "tiny": pb}[tile]
        return AddTiling(n, bf, -(-n // bf), t, buffer_num)
    return fn


def _add_tiling_tuple(n, dtype, chip, buffer_num):
    return (n, 16, 1, 16, buffer_num)


def _add_tiling_blank(n, dtype, chip, buffer_num):
    ...


def _row_tiling(mistake=None):
    def fn(rows, cols, dtype, chip):
        rb = -(-cols * dtype.itemsize // 32) * 32
        rpc = rows // chip.ai_cores if mistake == "floor" else -(-rows // chip.ai_cores)
        bd = -(-rows // rpc)
        ub = chip.buffers.ub if mistake == "no gamma" else chip.buffers.ub - rb
        per = 2 * rb if mistake == "one slot" else 4 * rb
        rpt = 1 if mistake == "one row" else ub // per if mistake == "no cap" else min(rpc, ub // per)
        return RowScaleTiling(rows, cols, rpc, bd, rpt, 2)
    return fn


def _row_tiling_blank(rows, cols, dtype, chip):
    ...


# -- lab 05 ------------------------------------------------------------------------------------
def _nz(kind="ok"):
    def fn(r, c, m, n):
        m16 = -(-m // 16) * 16
        if kind == "ok":
            return (c // 16) * m16 * 16 + r * 16 + c % 16
        if kind == "no pad":
            return (c // 16) * m * 16 + r * 16 + c % 16
        if kind == "nd":
            return r * n + c
        if kind == "zz":
            return (r // 16) * (-(-n // 16) * 256) + (c // 16) * 256 + (r % 16) * 16 + c % 16
        return (c // 16) * m16 * 16 + (r // 16) * 256 + (c % 16) * 16 + r % 16      # inner swapped
    return fn


def _nz_blank(r, c, m, n):
    ...


def _k_loop(init="first", free=True, fixed_k0=False):
    def fn(c, a1, b1, a2q, b2q, m, n, k, k0):
        for k_off in range(0, k, k0):
            kk = k0 if fixed_k0 else min(k0, k - k_off)
            a2 = a2q.alloc_tensor(np.float16)
            load_data(a2, a1, m, kk, src_rows=-(-m // 16) * 16, col_off=k_off)
            a2q.enque(a2)
            b2 = b2q.alloc_tensor(np.float16)
            load_data(b2, b1, kk, n, src_rows=-(-k // 16) * 16, row_off=k_off)
            b2q.enque(b2)
            a2, b2 = a2q.deque(), b2q.deque()
            first = {"first": k_off == 0, "always": True, "never": False}[init]
            mmad(c, a2, b2, m, n, kk, init=first)
            if free:
                a2q.free_tensor(a2)
                b2q.free_tensor(b2)
    return fn


def _k_loop_blank(c, a1, b1, a2q, b2q, m, n, k, k0):
    ...


# -- lab 06 ------------------------------------------------------------------------------------
def _img2col(kind="ok"):
    def fn(r, c, x_shape, k, stride, pad):
        n_img, chans, height, width = x_shape
        oh = (height + 2 * pad - k) // stride + 1
        ow = (width + 2 * pad - k) // stride + 1
        n, pixel = divmod(r, oh * ow)
        o_h, o_w = divmod(pixel, ow)
        if kind == "unfold":                          # torch's order: channel, then the tap
            ch, tap = divmod(c, k * k)
        else:
            c1, rest = divmod(c, k * k * 16)
            tap, c0 = divmod(rest, 16)
            ch = c1 * 16 + c0
        i, j = divmod(tap, k)
        s, p = (1 if kind == "no stride" else stride), (0 if kind == "no pad" else pad)
        h, w = o_h * s - p + i, o_w * s - p + j
        if kind != "keep pad" and (ch >= chans or not (0 <= h < height and 0 <= w < width)):
            return None
        return (n, ch, h, w)
    return fn


def _img2col_blank(r, c, x_shape, k, stride, pad):
    ...


def _nc1hwc0(kind="ok"):
    def fn(x):
        n, ch, h, w = x.shape
        c0 = 16 if kind == "c0 16" else 32 // x.dtype.itemsize
        c1 = ch // c0 if kind == "floor" else -(-ch // c0)
        padded = np.ones((n, c1 * c0, h, w), dtype=x.dtype) if kind == "ones" else \
            np.zeros((n, c1 * c0, h, w), dtype=x.dtype)
        padded[:, :ch] = x
        z = padded.reshape(n, c1, c0, h, w)
        if kind == "c0 first":
            return z
        z = z.transpose(0, 1, 3, 4, 2)
        return z.astype(np.float64) if kind == "float64" else z
    return fn


def _nc1hwc0_blank(x):
    ...


# -- lab 07 ------------------------------------------------------------------------------------
def _rms(kind="ok"):
    class Rms(lab07.RmsNormStages):
        def compute_rows(self, x32, out32, n):
            cols, rstd, sq = self.cols, self.stats[0], self.work[0]
            lang.mul(sq, x32, x32, n * cols)
            lang.reduce_sum_rows(rstd, sq, n, cols)
            if kind != "sum":
                lang.muls(rstd, rstd, 1.0 / cols, n)
            if kind != "no eps":
                lang.adds(rstd, rstd, self.eps, n)
            if kind == "tile":                       # 1 / rms computed on every element
                lang.duplicate(sq, 0.0, n * cols)
                lang.add_per_row(sq, sq, rstd, n, cols)
                lang.sqrt(sq, sq, n * cols)
                lang.div(x32, x32, sq, n * cols)
            else:
                lang.sqrt(rstd, rstd, n)
                if kind != "no reciprocal":
                    lang.reciprocal(rstd, rstd, n)
                lang.mul_per_row(out32 if kind == "no gamma" else x32, x32, rstd, n, cols)
            if kind != "no gamma":
                lang.mul_per_col(out32, x32, self.gamma, n, cols)
    return Rms


class _RmsBlank(lab07.RmsNormStages):
    def compute_rows(self, x32, out32, n):
        ...


# -- lab 08 ------------------------------------------------------------------------------------
def _epilogue(kind="ok"):
    def fn(c_gm, c, bias, slot, m, n, dst_stride):
        if kind != "no wait":
            wait_flag(PIPE_MTE2, PIPE_FIX, slot)
        if kind == "early release":             # the slot handed back before FixPipe reads it
            set_flag(PIPE_FIX, PIPE_MTE2, slot)
        fixpipe(c_gm, c, m, n, dst_stride=dst_stride, bias=None if kind == "no bias" else bias,
                relu=kind != "no relu")
        if kind not in ("no set", "early release"):
            set_flag(PIPE_FIX, PIPE_MTE2, slot)
        if kind == "barrier":
            pipe_barrier(PIPE_ALL)
    return fn


def _epilogue_blank(c_gm, c, bias, slot, m, n, dst_stride):
    ...


# -- lab 15 ------------------------------------------------------------------------------------
class Later:
    """An answer computed when a test first needs it: lab 15's come from whole-model builds."""

    def __init__(self, fn):
        self.fn = fn

    @functools.cached_property
    def value(self):
        return self.fn()


def resolved(answer):
    return answer.value if isinstance(answer, Later) else answer


def _naive_resnet_us() -> dict:
    """From the naive ResNet-50 build's trace and graph: its latency, the BatchNorm, Add and ReLU
    launches' time, and that of the ReLUs a BatchNorm feeds (us)."""
    cm, trace = lab15.run("resnet50", NAIVE)
    made_by = {v: n.op_type for n in cm.graph.nodes for v in n.outputs}
    first_input = {n.name: n.inputs[0] for n in cm.graph.nodes}
    of = {op: [r for r in trace.records if r.op_type == op] for op in ("BatchNorm", "Relu", "Add")}
    return {"latency": trace.latency_us, "bn": sum(r.dur_us for r in of["BatchNorm"]),
            "add": sum(r.dur_us for r in of["Add"]),
            "relu": sum(r.dur_us for r in of["Relu"]),
            "relu_after_bn": sum(r.dur_us for r in of["Relu"] if made_by[first_input[r.name]] == "BatchNorm")}


def _fusion_prediction(kind="ok"):
    def fn():
        t = _naive_resnet_us()
        ok = t["latency"] - t["bn"] - t["relu"]
        us = {"ok": ok, "relu after bn only": t["latency"] - t["bn"] - t["relu_after_bn"],
              "bn only": t["latency"] - t["bn"], "add gone too": ok - t["add"],
              "naive": t["latency"], "speed-up": 1000 * t["latency"] / ok}[kind]
        return us / 1000
    return Later(fn)


def _slowest_layers(n=2):
    return [r.name for r in sorted(lab15.run("resnet50", NAIVE)[1].records, key=lambda r: -r.dur_us)[:n]]


SPREAD = dict(tile_m=64, tile_n=16, c1_step=4, tile_k0=64, block_dim=32)


def _layer_fix(which=0, **tiles):
    return Later(lambda: (_slowest_layers()[which], ConvTiles(**tiles)))


OUT_BYTES = 16 * 128 * 28 * 28 * 2        # layer2.0.conv2 (stride 2: 56 -> 28) at batch 16, fp16


# -- lab 09, written from the specs: the lifetimes by hand, a first-fit planner, the fold rule, the
# batch from the plans and aclrtMalloc's rounding, a many-orders planner
LIFETIMES = {"a": (0, 4), "b": (1, 6), "c": (2, 4), "d": (3, 7), "e": (4, 6), "f": (5, 7), "y": (6, 7)}


def _planner(kind="first fit"):
    def fn(blocks):
        offsets, top = {}, 0
        for b in sorted(blocks, key=lambda b: b.start):
            if kind == "no reuse":                  # every tensor its own bytes
                offsets[b.name], top = top, top + b.size
                continue
            if kind == "zero":
                offsets[b.name] = 0
                continue
            if kind == "live bytes":                # the bytes live when it starts, ignoring holes
                offsets[b.name] = sum(o.size for o in blocks if o.name in offsets and meets(b, o))
                continue
            off = 0
            for o in sorted((o for o in blocks if o.name in offsets and meets(b, o)), key=lambda o: offsets[o.name]):
                if off + b.size <= offsets[o.name]:
                    break
                off = max(off, offsets[o.name] + o.size)
            offsets[b.name] = off + (16 if kind == "unaligned" else 0)
        return offsets
    return fn


def _planner_blank(blocks):
    ...


def _fold_rule(kind="ok"):
    def fn(d, rec, chip):
        for mul in [n for n in d.nodes if n.op_type == "Mul"]:
            conv, s = d.producer(mul.inputs[0]), d.const(mul.inputs[1])
            if conv is None or conv.op_type != "Conv2D" or s is None:
                continue
            if kind != "any reader" and not d.only_use(conv.outputs[0], mul):
                continue
            w, b = d.const(conv.inputs[1]), d.const(conv.inputs[2])
            if kind != "any shape" and s.shape != (1, w.shape[0], 1, 1):
                continue
            if kind == "none":
                continue
            sw = s.reshape(1, -1, 1, 1) if kind == "input axis" else s.reshape(-1, 1, 1, 1)
            wn = d.add_constant(f"{conv.name}.w2", w * sw)
            bn = d.add_constant(f"{conv.name}.b2", b if kind == "no bias" else b * s.reshape(-1))
            d.replace([conv, mul], [d.new_node("Conv2D", [conv.inputs[0], wn, bn], mul.outputs, conv.name, **conv.attrs)])
    return fn


def _fold_rule_blank(d, rec, chip):
    ...


def _largest_batch():
    huge = C910.device.huge_page_bytes
    one = lab09.plan_at(1)
    need = lambda b: sum(-(-(-(-n // 32) * 32 + 32) // huge) * huge for n in (one.weights_bytes, b * one.peak))
    return max(b for b in range(1, 1000) if need(b) <= lab09.FREE_BYTES)


def _many_orders(blocks):
    rng = np.random.default_rng(1)
    plans = [place_in_order([blocks[i] for i in rng.permutation(len(blocks))], False) for _ in range(400)]
    return min(plans, key=lambda p: offsets_peak(blocks, p))


def _better_blank(blocks):
    ...


BATCH = _largest_batch()
BATCH_PEAK, BATCH_LOWER, BATCH_SUM = (getattr(lab09.plan_at(1), k) for k in ("peak", "lower_bound", "total_bytes"))


BEST_TILE = TEACH.buffers.ub // 6 // 32 * 32 // 2

# lab 01, exercise 3 on the 910: ridge points 256 TFLOPS / 1.2 TB/s (cube) and 4 TFLOPS / 1.2 TB/s
# (vector); a decode matmul (16 x 4096 x 4096) lies between them, and so does a degree-15 polynomial
# (30 FLOPs per 4 bytes)
VECTOR_RIDGE = C910.peak_vector_tflops_fp16 * 1000 / C910.gm_bandwidth_gbs
CUBE_RIDGE = C910.peak_fp16_tflops * 1000 / C910.gm_bandwidth_gbs
DECODE_AI = 2 * 16 * 4096 * 4096 / (2 * (16 * 4096 + 4096 * 4096 + 16 * 4096))
assert VECTOR_RIDGE < DECODE_AI < CUBE_RIDGE and VECTOR_RIDGE < 30 / 4 < CUBE_RIDGE
BOUND_OK = {"add": "memory", "matmul": "compute-bound", "decode_matmul": "memory", "polynomial": "compute"}

#: exercise -> (reference answer, [(wrong answer, words the hint must contain), ...], blank)
CASES = {
    "01.bound": (BOUND_OK, [({op: "compute" for op in BOUND_OK}, "ridge point"),
                            ({op: "memory" for op in BOUND_OK}, "ridge point"),
                            ({**BOUND_OK, "polynomial": "memory"}, "every operator against the cube"),
                            ({**BOUND_OK, "decode_matmul": "compute"}, "every operator against the vector"),
                            ({**BOUND_OK, "matmul": "memory"}, "matmul has"),
                            ({k: v for k, v in BOUND_OK.items() if k != "polynomial"}, "dict"),
                            (["memory"], "dict")], ...),
    "02.compute_stage": (ComputeOk, [(ComputeNoFree, "free_tensor"), (ComputeNoEnque, "enque"),
                                     (ComputeFreeTooEarly, "only after the add"),
                                     (ComputeSub, "another operation"), (ComputeBarrier, "no pipe_barrier"),
                                     (3, "class")], ComputeBlank),
    "02.fix_race": (_one_tile("flags"), [(_one_tile("none"), "set_flag"), (_one_tile("wrong pipes"), "set_flag"),
                                         (_one_tile("wait only"), "set_flag with the same")], _racy_copy),
    "02.ub_tile": (BEST_TILE, [(TEACH.buffers.ub // 3 // 32 * 32 // 2, "double buffering needs two"),
                               (BEST_TILE + 16, "double buffering needs two"),
                               (4096, "does not fit"), (1000, "multiple of 16"),
                               (64, "not the largest"), (BEST_TILE - 16, "still have room"),
                               (1024, "still have room"), (float(BEST_TILE), "whole number")], ...),
    "03.add_tiling_fn": (_add_tiling(), [(_add_tiling(align="down"), "never down"),
                                         (_add_tiling(align="none"), "32-byte boundary"),
                                         (_add_tiling(buffers=False), "buffer_num=2 slots"),
                                         (_add_tiling(tile="bytes"), "in bytes"),
                                         (_add_tiling(tile="tiny"), "the two caps allow"),
                                         (_add_tiling(cap="block"), "too few for the pipes to overlap"),
                                         (_add_tiling(cap="none"), "longer than its block"),
                                         (_add_tiling(cap="eighth down"), "never down"),
                                         (_add_tiling_tuple, "not an AddTiling")], _add_tiling_blank),
    "03.row_tiling": (_row_tiling(), [(_row_tiling("no gamma"), "gamma"), (_row_tiling("floor"), "loses the remainder"),
                                      (_row_tiling("one slot"), "each hold"), (_row_tiling("one row"), "as many whole rows"),
                                      (_row_tiling("no cap"), "no more than rows_per_core")],
                      _row_tiling_blank),
    "03.overflowing_buffers": ({"L1", "L0C"}, [(set(), "buffer_num copies"), ({"L1"}, "fp32"),
                                               ({"L0C"}, "L1 overflows too"), ({"L1", "L0C", "UB"}, "UB is not used"),
                                               ("L1", "set of")], ...),
    "05.nz_offset": (_nz(), [(_nz("no pad"), "pads the rows"), (_nz("nd"), "that is ND"), (_nz("zz"), "that is ZZ"),
                             (_nz("swapped"), "row-major ('z')")], _nz_blank),
    "05.k_loop": (_k_loop(), [(_k_loop(init="always"), "only the last K0 slice"),
                              (_k_loop(init="never"), "must overwrite"), (_k_loop(free=False), "free_tensor"),
                              (_k_loop(fixed_k0=True), "m x kk")], _k_loop_blank),
    "06.img2col_source": (_img2col(), [(_img2col("unfold"), "unfold order"), (_img2col("no pad"), "subtract the padding"),
                                       (_img2col("no stride"), "multiply by the stride"),
                                       (_img2col("keep pad"), "return None")], _img2col_blank),
    "06.nc1hwc0": (_nc1hwc0(), [(_nc1hwc0("c0 16"), "32 // itemsize"), (_nc1hwc0("c0 first"), "C0 goes last"),
                                (_nc1hwc0("floor"), "pad the channels"), (_nc1hwc0("ones"), "must be 0"),
                                (_nc1hwc0("float64"), "keeps their dtype")], _nc1hwc0_blank),
    "07.rms_norm_kernel": (_rms(), [(_rms("sum"), "1 / cols"), (_rms("no eps"), "add eps"),
                                    (_rms("no reciprocal"), "reciprocal of the"), (_rms("no gamma"), "gamma scales"),
                                    (_rms("tile"), "per-row values"), (3, "your kernel class")], _RmsBlank),
    "08.fused_epilogue": (_epilogue(), [(_epilogue("no wait"), "only after MTE2's copy has landed"),
                                        (_epilogue("no set"), "someone must set it"),
                                        (_epilogue("early release"), "only once FixPipe has read it"),
                                        (_epilogue("no bias"), "bias is missing"),
                                        (_epilogue("no relu"), "ReLU is missing"),
                                        (_epilogue("barrier"), "barrier")], _epilogue_blank),
    "08.gm_bytes_saved": (4 * OUT_BYTES, [(2 * OUT_BYTES, "both round trips"), (OUT_BYTES, "written once either way"),
                                          (4 * 16 * 128 * 56 * 56 * 2, "the stride is 2"),
                                          (5 * OUT_BYTES, "passes over Y"), (str(4 * OUT_BYTES), "a number")], ...),
    "09.lifetimes": (LIFETIMES, [({v: (a, b - 1) for v, (a, b) in LIFETIMES.items()}, "half-open"),
                                 ({**LIFETIMES, "d": (3, 5)}, "graph output lives to the end"),
                                 ({**LIFETIMES, "x": (0, 1)}, "graph input"),
                                 ({k: v for k, v in LIFETIMES.items() if k != "y"}, "graph output too"),
                                 ([(0, 4)], "dict")], ...),
    "09.planner": (_planner(), [(_planner("no reuse"), "reuse the bytes"), (_planner("zero"), "live at a common step"),
                                (_planner("live bytes"), "live at a common step"),
                                (_planner("unaligned"), "multiples of 512")], _planner_blank),
    "09.fold_rule": (_fold_rule(), [(_fold_rule("any reader"), "only_use"), (_fold_rule("input axis"), "each output channel"),
                               (_fold_rule("no bias"), "the bias"), (_fold_rule("any shape"), "one value per channel"),
                               (_fold_rule("none"), "nothing was fused")], _fold_rule_blank),
    "09.largest_batch": (BATCH, [(BATCH + 1, "2 MB huge pages"), (BATCH + 2, "weights"),
                                 (lab09.FREE_BYTES // BATCH_SUM, "reuses memory"),
                                 (lab09.FREE_BYTES // BATCH_LOWER, "not the lower bound"),
                                 (str(BATCH), "batch size")], ...),
    "09.beat_best_fit": (_many_orders, [(best_fit, "one order"), (greedy_by_size, "one order"),
                                        (_planner(), "one order"), (_planner("zero"), "disjoint bytes")],
                         _better_blank),
    "15.fusion_latency": (_fusion_prediction(), [(_fusion_prediction("relu after bn only"), "AddRelu kernel"),
                                                 (_fusion_prediction("bn only"), "the ReLU after each BatchNorm"),
                                                 (_fusion_prediction("add gone too"), "the residual Adds stay"),
                                                 (_fusion_prediction("speed-up"), "that is a speed-up"),
                                                 (_fusion_prediction("naive"), "faster than the naive"),
                                                 ("1.2", "a float")], ...),
    "15.two_optimisations": ({"fusion", "tiling"}, [({"fusion", "static_memory"}, "no time at all"),
                                                    ({"tiling", "small_channel"}, "the stem"),
                                                    (("tiling", "double_buffering"), "spread a late layer"),
                                                    ({"fusion"}, "pick 2"), ({"fusion", "tilings"}, "unknown: tilings"),
                                                    ("fusion", "a set of optimisation names")], ...),
    "15.slowest_layer_fix": (_layer_fix(**SPREAD),
                             [(_layer_fix(1, **SPREAD), "trace.slowest(1)"),
                              (_layer_fix(block_dim=4), "block_dim=4 of 32"),
                              (_layer_fix(**SPREAD, l1_buffers=1, l0_buffers=1, l0c_buffers=1), "use 2 at every level"),
                              (_layer_fix(tile_m=64, tile_n=16, block_dim=32), "longer C1_STEP"),
                              (_layer_fix(tile_m=256, tile_n=256, c1_step=32, tile_k0=256, block_dim=32), "cannot run"),
                              ((ConvTiles(),), "a pair")], (..., ...)),
}
_twice = set(CASES) & set(labcases.CASES)
assert not _twice, f"cases both here and in labcases: {sorted(_twice)}"
CASES.update(labcases.CASES)        # each lab's newer cases live in tests/labcases/labNN.py


def _checker(key: str):
    lab, name = key.split(".")
    return getattr(getattr(check, f"lab{lab}"), name)


def test_enough_exercises_and_every_one_is_tested():
    assert len(REGISTRY) >= 8
    assert set(REGISTRY) == set(CASES), "every checker needs a case here (and every case a checker)"
    assert {ex.lab for ex in REGISTRY.values()} == {"00", "01", "02", "03", "04", "05", "06", "07", "08", "09", "15"}
    assert any(ex.performance for ex in REGISTRY.values())


def test_every_checker_is_tested_against_at_least_two_typical_mistakes():
    few = {k: len(v[1]) for k, v in CASES.items() if len(v[1]) < 2}
    assert not few, f"each exercise's case needs two typical mistakes or more: {few}"


@pytest.mark.parametrize("key", sorted(CASES))
def test_reference_solution_passes(key, capsys):
    answer = resolved(CASES[key][0])
    v = _checker(key).grade(answer)
    assert v.status == "pass", v.render(key)
    _checker(key)(answer)                                   # the notebook form prints, returns None
    out = capsys.readouterr().out
    assert out.startswith(f"PASS  {key.split('.')[1]}: ")


@pytest.mark.parametrize("key, i", [(k, i) for k in sorted(CASES) for i in range(len(CASES[k][1]))])
def test_typical_mistake_fails_with_a_hint(key, i, capsys):
    wrong, words = CASES[key][1][i]
    wrong = resolved(wrong)
    ex = REGISTRY[key]
    assert _checker(key)(wrong) is None
    out = capsys.readouterr().out
    assert out.startswith(f"FAIL  {ex.name}"), out
    hint = next(line for line in out.splitlines() if line.strip().startswith("hint:"))
    assert words in out, f"expected {words!r} in:\n{out}"
    assert f"(revisit: {ex.concept})" in hint
    v = _checker(key).grade(wrong)
    assert v.status == "fail" and (v.got is not None or v.lines)


@pytest.mark.parametrize("key", sorted(CASES))
def test_untouched_blank_is_not_attempted(key, capsys):
    blank = CASES[key][2]
    _checker(key)(blank)
    out = capsys.readouterr().out
    assert out.startswith(f"NOT ATTEMPTED YET  {key.split('.')[1]}: "), out


@pytest.mark.parametrize("key", sorted(CASES))
@pytest.mark.parametrize("junk", [None, "", "x", -1, float("nan"), object(), lambda *a: 1 / 0])
def test_checkers_never_raise(key, junk, capsys):
    assert _checker(key)(junk) is None
    assert capsys.readouterr().out.startswith("FAIL  ")


def test_performance_exercise_reports_cycles_and_target():
    slow = _checker("02.compute_stage").grade(ComputeBarrier)
    text = slow.render("compute_stage")
    assert slow.status == "fail" and "too slow" in slow.summary
    assert re.search(r"your kernel: [\d,]+ cycles; reference [\d,]+; target <= [\d,]+ \(150%\)", text)
    ok = _checker("02.compute_stage").grade(ComputeOk).render("compute_stage")
    assert re.search(r"in [\d,]+ simulated cycles \(target <= [\d,]+, 150% of the reference's [\d,]+\)", ok)
    # correctness comes first: a wrong kernel fails on its values, not its cycles
    assert "z is not x + y" in _checker("02.compute_stage").grade(ComputeSub).summary


def test_lab03_add_tiling_exercise_is_the_packages_add_tiling():
    # exercise 1 of lab 03 states the constraints and aims of a tiling; the best tiling they
    # allow, found by the checker's searches, is the package's add_tiling, which passes, and
    # this spec's reference agrees with both on every problem the check runs (all with tails)
    assert check.lab03.add_tiling_fn.grade(add_tiling).passed
    for n, dtype, chip, bn in check.lab03.ADD_CASES:
        c, dt = get_chip(chip), np.dtype(dtype)
        want = add_tiling(n, dtype, c, bn)
        assert want == _add_tiling()(n, dt, c, bn)
        assert want.block_factor == check.lab03.even_split(n, c.ai_cores, dt.itemsize)
        assert want.tile == min(check.lab03.ub_tile(c, dt.itemsize, bn),
                                check.lab03.block_tile(want.block_factor, dt.itemsize))
    assert any(n % (get_chip(chip).ai_cores * 32 // np.dtype(d).itemsize) for n, d, chip, _ in check.lab03.ADD_CASES)


def test_the_checkers_shared_screens():
    v = check.screen_function(3, "nz_offset")
    assert v.status == "fail" and v.hint == "pass nz_offset itself, without calling it."
    assert check.screen_function(_nz_blank, "f").status == "not attempted"
    assert check.screen_function(_nz(), "f") is None
    assert check.screen_class(ComputeOk, KernelAdd, "KernelAdd", "MyAdd") is None
    v = check.screen_class(object.__new__(ComputeOk), KernelAdd, "KernelAdd", "MyAdd")    # an instance
    assert v.status == "fail" and v.expected == "a subclass of KernelAdd" and "(MyAdd)" in v.hint
    assert check.whole_numbers((1, np.int64(2)), 2) == (1, 2)
    assert check.whole_numbers((1, True), 2) is None and check.whole_numbers([1], 2) is None
    assert check.pipe_named(" vector ") == check.pipe_named("PIPE_V") == check.pipe_named("v") == HwPipe.V
    assert check.pipe_named("ALL") is None and check.pipe_named("UB") is None

    class Late(npulab.errors.SyncError):
        pass
    v = check.stopped(Late("slot 3"), {npulab.errors.DeadlockError: "no", npulab.errors.SyncError: "free it"}, "M=1: ")
    assert (v.status, v.summary, v.got, v.hint) == ("fail", "M=1: the kernel stopped with Late", "Late: slot 3",
                                                    "free it")


def test_the_racy_stub_is_recognised_and_the_race_is_real():
    assert same_code(_racy_copy, lab02.add_one_tile_racy)
    assert not same_code(_one_tile("flags"), lab02.add_one_tile_racy)
    message = lab02.race_message()
    assert message.startswith("RaceError: race on core 0 in UB")
    # it names the hazard (the two instructions, their pipes, the bytes) but not the repair
    assert "MTE3 'data_copy UB->GM" in message and "V 'add" in message and "nothing ordering V before MTE3" in message
    assert "set_flag" not in message and "wait_flag" not in message and "Fix" not in message
    assert lab02.race_message(_one_tile("flags")) == "no race"


# -- the notebooks' check cells ------------------------------------------------------------
def _check_cells(nb):
    return [(m.group(1), m.group(2), c) for c in nb.cells if c.cell_type == "code"
            for m in [CHECK_CALL.search(c.source)] if m]


def test_every_exercise_has_a_check_cell_in_its_lab():
    found = set()
    for nb_path in sorted(LABS.glob("[0-9][0-9]_*.ipynb")):
        for lab, name, _ in _check_cells(nbformat.read(nb_path, as_version=4)):
            assert nb_path.name.startswith(lab[3:]), f"{nb_path.name} calls check.{lab}.{name}"
            found.add(f"{lab[3:]}.{name}")
    assert found == set(REGISTRY)


def test_solution_notebooks_pass_every_check():
    for nb_path in sorted((LABS / "solutions").glob("[0-9][0-9]_*.ipynb")):
        cells = _check_cells(nbformat.read(nb_path, as_version=4))
        assert cells
        for lab, name, cell in cells:
            text = "".join(o.get("text", "") for o in cell.outputs)
            assert text.startswith(f"PASS  {name}: "), f"{nb_path.name}: {text!r}"


@pytest.mark.parametrize("nb_path", sorted(LABS.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_learner_notebook_runs_and_every_check_says_not_attempted(nb_path):
    from nbclient import NotebookClient

    from npulab.labs.notebooks import kernel_env
    nb = nbformat.read(nb_path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(LABS)}}).execute(env=kernel_env())
    cells = _check_cells(nb)
    assert cells
    for lab, name, cell in cells:
        text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert text.startswith(f"NOT ATTEMPTED YET  {name}: "), f"{nb_path.name}, check.{lab}.{name}: {text!r}"


def test_lab07_vector_time_accounts_for_every_cycle_of_layer_norm():
    # lab 07's breakdown of fp16 LayerNorm's cycles on core 0 (BERT rows on the 910): the
    # repeats and the waits, sorted by what they wait for, add up to the core's cycles with
    # next to nothing left over; every automatic barrier costs one vector start-up, and the
    # vector unit waits for the first tile before anything else
    r = lab07.layer_norm_pipelining()
    chip = get_chip("910")
    for how in ("one tile at a time", "interleaved"):
        t, row = r[how]["time"], r[how]
        assert t["busy"] == row["vector_busy"] and t["cycles"] >= row["cycles"] * 0.99
        assert t["busy"] + t["barriers"] + t["copy_in"] + t["copy_out"] + t["block_start"] + t["other"] == t["cycles"]
        assert t["block_start"] > 0 and t["block_start"] % chip.launch.block_start_cycles == 0
        assert 0 <= t["other"] < 0.01 * t["cycles"]
        assert t["barriers"] == row["auto_barriers"] * chip.vector.startup_cycles
        assert 0 < t["first_tile"] <= t["copy_in"] + t["busy"]
        assert t["copy_out"] > 0
    assert r["interleaved"]["time"]["barriers"] < r["one tile at a time"]["time"]["barriers"]


def test_lab07_chunked_kernel_is_the_row_kernels_rmsnorm():
    # the challenge's reference streams rows through the UB in chunks: where a row fits the UB
    # as a whole (512 values on the teaching chip) it agrees with the package's RMSNorm row
    # kernel, chunk for chunk, and with float64 numpy, for one chunk a row and for four
    x, g = lab07.rms_inputs((40, 512))
    y_rows, _ = lab07.run_rms_norm(lab07.RmsNormStages, x, g, chip="teach")
    for chunk in (512, 128):
        class Chunked(lab07.KernelRmsNormChunked):
            CHUNK = chunk
        y, _ = lab07.run_chunked(Chunked, x, g, chip="teach")
        ulp = np.spacing(np.abs(y_rows)).astype(np.float64)              # one fp16 step at each value
        assert np.all(np.abs(y.astype(np.float64) - y_rows.astype(np.float64)) <= ulp)   # sums in another order
        assert np.allclose(y.astype(np.float64), golden.rms_norm(x, 512, g, lab07.RMS_EPS), rtol=4e-3, atol=4e-3)
    # and at the challenge's shape a whole row does not fit the 910's UB
    with pytest.raises(npulab.errors.ShapeError, match="does not fit|needs"):
        lab07.run_chunked(lab07.RmsNormStages, *lab07.chunked_inputs())


def test_lab15_reference_pair_is_the_fastest_of_the_ten():
    # exercise 2 of lab 15 grades a pair against the reference pair: it must be the fastest of all
    # ten pairs of the five optimisations (ResNet-50, batch 1, on the 910)
    pairs = {p: lab15.figures("resnet50", replace(NAIVE, **dict.fromkeys(p, True)))["latency_ms"]
             for p in itertools.combinations(OPTIMISATIONS, 2)}
    assert min(pairs, key=pairs.get) == tuple(k for k in OPTIMISATIONS if k in check.lab15.REFERENCE_PAIR)
    assert sorted(pairs.values())[1] > pairs[("fusion", "tiling")] * 1.05     # a clear winner


def test_lab15_fusion_prediction_reads_the_trace_and_the_fused_kernels_pay_their_epilogues():
    # the trace's arithmetic lands within the tolerance, on the slow side: the fused kernels carry
    # the BatchNorm and ReLU work (the conv's epilogue, AddRelu's rectify in UB), so the build is a
    # little slower than "launches gone"; the slip of keeping the ReLUs after the Adds is outside it
    t = _naive_resnet_us()
    predicted = (t["latency"] - t["bn"] - t["relu"]) / 1000
    measured = lab15.figures("resnet50", lab15.alone("fusion"))["latency_ms"]
    assert predicted < measured <= predicted * (1 + check.lab15.PREDICT_TOLERANCE)
    kept = (t["latency"] - t["bn"] - t["relu_after_bn"]) / 1000
    assert kept > measured * (1 + check.lab15.PREDICT_TOLERANCE)
    assert sum(n for n, _ in lab15.relu_time_by_producer().values()) == 49


def test_lab06_challenge_needs_more_than_one_change():
    # the challenge's target is out of reach of ConvTiles() with any one field changed (the
    # values a learner tries first), and within reach of the lab's solution
    from npulab.kernels.conv import simulate, tiled
    from npulab.labs import lab06
    p, chip = lab06.challenge_problem(), lab06.CHALLENGE_CHIP
    target = 1.5 * simulate(tiled(p, check.lab06.CHALLENGE_REFERENCE), chip).cycles
    tries = {"tile_m": (16, 32, 64, 112, 208), "tile_n": (16, 32, 64), "c1_step": (2, 4, 8, 16),
             "tile_k0": (32, 64, 128), "block_dim": (2, 4, 8, 16, 32), "schedule": ("teams",),
             "w_resident": (True,)}
    for name, values in tries.items():
        for v in values:
            tiles = replace(ConvTiles(), **{name: v})
            t = tiled(p, tiles)
            if not check.lab06.problems(t, chip):
                assert simulate(t, chip).cycles > target, f"ConvTiles({name}={v!r}) meets the challenge"
    assert check.lab06.fill_the_cores.grade(CASES["06.fill_the_cores"][0]).passed


def test_lab06_exercise4_default_tiling_misses_the_target():
    # exercise 4's premise: the default tiling function's pick for its layer on the teaching chip
    # is too slow to pass (a better search would make the exercise a transcription again)
    from npulab.kernels.conv import default_tiling
    from npulab.labs import lab06
    picked = default_tiling(lab06.tiling_problem(), lab06.TILING_CHIP)
    s = picked.tiles
    as_tuple = (s.tile_m, s.tile_n, s.c1_step, s.tile_k0, s.l1_buffers, s.l0_buffers, s.l0c_buffers)
    assert not check.lab06.conv_tiles.grade(as_tuple).passed            # streamed, as a tuple runs it
    target = 1.5 * lab06.simulate_tiles(lab06.tiling_from_tuple(CASES["06.conv_tiles"][0]))[0]
    assert lab06.simulate_tiles(picked)[0] > target                    # as the default runs it
