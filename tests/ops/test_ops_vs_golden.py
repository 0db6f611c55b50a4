"""Every functional operator of npulab.ops against its numpy golden, on the teaching chip, within
the tolerance table's row for the operator's unit (npulab.ops.tolerance.OP_UNIT) and its output
dtype; on shapes with tails (sizes that are no multiple of 16 or 32) and every dtype the
operator takes. The goldens themselves are checked against PyTorch in test_golden.py."""
from __future__ import annotations

import numpy as np
import pytest

from fixtures import assert_close, bias_for, positive, rand
import npulab.ops as ops
from npulab.ops import golden
from npulab.ops.tolerance import OP_UNIT

CHIP = "teach"
CHIP_OF = {"fused_matmul": "910b"}     # a mix kernel: a split chip's AIC and AIV cores
F16, F32, I8 = np.float16, np.float32, np.int8


def _cases():
    """(op name, positional args, keyword args, id): the same arguments go to the operator and
    to its golden."""
    for dt in (F16, F32):
        n = np.dtype(dt).name
        yield "add", (rand(37, dt, "a1"), rand(37, dt, "a2")), {}, f"add-same-{n}"
        yield "add_relu", (rand((3, 77), dt, "ar1"), rand((3, 77), dt, "ar2")), {}, f"add_relu-{n}"
        yield "add", (rand((3, 50), dt, "a3"), rand(50, dt, "a4")), {}, f"add-row-{n}"
        yield "add", (rand((2, 5, 33), dt, "a5"), rand((2, 1, 33), dt, "a6")), {}, f"add-bcast-{n}"
        yield "add", (rand(45, dt, "a7"), 0.1), {}, f"add-scalar-{n}"
        yield "mul", (rand((3, 50), dt, "m1"), rand((3, 1), dt, "m2")), {}, f"mul-col-{n}"
        yield "mul", (rand((2, 5, 33), dt, "m3"), rand(33, dt, "m4")), {}, f"mul-row-{n}"
        yield "mul", (1.7, rand(19, dt, "m5")), {}, f"mul-scalar-{n}"
        for shape in [(37,), (3, 50), (2, 5, 33)]:
            x = rand(shape, dt, f"act{shape}", 3.0)
            for act in ("relu", "silu", "gelu"):
                yield act, (x,), {}, f"{act}-{shape}-{n}"
            yield "gelu", (x, "tanh"), {}, f"gelu-tanh-{shape}-{n}"
        for op in ("sub", "div", "maximum", "minimum"):
            yield op, (rand((3, 50), dt, op + "1"), positive(50, dt, op + "2")), {}, f"{op}-row-{n}"
            yield op, (positive((2, 5, 1), dt, op + "3"), rand((2, 1, 33), dt, op + "4")), {}, f"{op}-outer-{n}"
            yield op, (positive((3, 1), dt, op + "5"), rand((3, 50), dt, op + "6")), {}, f"{op}-swapped-{n}"
            yield op, (1.5, positive(19, dt, op + "7")), {}, f"{op}-scalar-{n}"
        for shape in [(37,), (2, 5, 33)]:
            x, p = rand(shape, dt, f"un{shape}", 2.0), positive(shape, dt, f"unp{shape}")
            for op in ("exp", "abs", "neg", "tanh", "sigmoid", "erf"):
                yield op, (x,), {}, f"{op}-{shape}-{n}"
            for op in ("log", "sqrt", "rsqrt", "reciprocal"):
                yield op, (p,), {}, f"{op}-{shape}-{n}"
            for e in (2, 3, -2, 0.5, 1.7):
                yield "pow", (x if e in (2, 3) else p, e), {}, f"pow-{e}-{shape}-{n}"
            yield "cast", (x, F32 if dt == F16 else F16), {}, f"cast-{shape}-{n}"
        for op in ("sum", "mean", "amax"):
            yield op, (rand((2, 3, 5, 7), dt, op + "r1"),), {"dim": (2, 3)}, f"{op}-hw-{n}"
            yield op, (rand((2, 3, 5, 7), dt, op + "r2"), (0, 2), True), {}, f"{op}-keepdim-{n}"
            yield op, (rand((37, 3), dt, op + "r3"),), {}, f"{op}-all-{n}"
        for shape, dim in [((37,), 0), ((3, 50), -1), ((2, 5, 33), 1)]:
            yield "softmax", (rand(shape, dt, f"sm{shape}", 3.0), dim), {}, f"softmax-{shape}-{dim}-{n}"
        yield "layer_norm", (rand((3, 50), dt, "ln1", 2.0), 50, rand(50, dt, "ln2"), rand(50, dt, "ln3")), {}, \
            f"layer_norm-wb-{n}"
        yield "layer_norm", (rand((2, 5, 33), dt, "ln4", 2.0), (5, 33), rand((5, 33), dt, "ln5")), {}, \
            f"layer_norm-2d-{n}"
        yield "layer_norm", (rand((4, 17), dt, "ln6", 2.0), 17), {"eps": 1e-3}, f"layer_norm-plain-{n}"
        yield "rms_norm", (rand((3, 50), dt, "rm1"), 50, rand(50, dt, "rm2")), {}, f"rms_norm-eps-none-{n}"
        yield "rms_norm", (rand((2, 5, 33), dt, "rm3"), 33), {"eps": 1e-6}, f"rms_norm-plain-{n}"
        yield "batch_norm", (rand((2, 5, 7, 3), dt, "bn1", 2.0), rand(5, dt, "bn2"), positive(5, dt, "bn3"),
                             rand(5, dt, "bn4"), rand(5, dt, "bn5")), {}, f"batch_norm-nchw-{n}"
        yield "batch_norm", (rand((3, 17), dt, "bn6"), rand(17, dt, "bn7"), positive(17, dt, "bn8")), \
            {"eps": 1e-3}, f"batch_norm-nc-{n}"
        x = rand((2, 3, 11, 9), dt, "pool", 3.0)
        yield "max_pool2d", (x, 3, 2, 1), {"ceil_mode": True}, f"max_pool2d-ceil-{n}"
        yield "max_pool2d", (rand((1, 2, 10, 12), dt, "mp"), 3, 2, 1, 2), {}, f"max_pool2d-dilated-{n}"
        yield "max_pool2d", (x, 2), {}, f"max_pool2d-k2-{n}"
        yield "avg_pool2d", (x, 3, 2, 1, True, False), {}, f"avg_pool2d-ceil-nopad-{n}"
        yield "avg_pool2d", (x, 2), {}, f"avg_pool2d-k2-{n}"
        yield "avg_pool2d_scale", (x, 3, 0.5, 2, 1), {}, f"avg_pool2d_scale-{n}"
        yield "conv2d_bn_relu", (rand((2, 4, 8, 7), dt, "cb1"), rand((6, 2, 3, 3), dt, "cb2"), rand(6, dt, "cb3"),
                                 rand(6, F32, "cb4"), positive(6, F32, "cb5"), rand(6, F32, "cb6"),
                                 rand(6, F32, "cb7"), 1e-3, 1, 1, 1, 2), {}, f"conv2d_bn_relu-{n}"
        yield "conv2d_bn_relu", (rand((1, 3, 9, 5), dt, "cb8"), rand((5, 3, 3, 3), dt, "cb9"), None,
                                 rand(5, F32, "cb10"), positive(5, F32, "cb11")), {"relu": False}, \
            f"conv2d_bn_relu-norelu-{n}"
    for dt in (F16, F32, I8):
        n = np.dtype(dt).name
        yield "matmul", (rand((13, 35), dt, "mm1"), rand((35, 19), dt, "mm2")), {}, f"matmul-{n}"
        yield "matmul", (rand((13, 35), dt, "mm3"), rand((19, 35), dt, "mm4")), \
            {"bias": bias_for(19, dt, "mm5"), "trans_b": True, "relu": True}, f"matmul-tb-bias-relu-{n}"
        yield "matmul", (rand((35, 13), dt, "mm6"), rand((35, 19), dt, "mm7")), {"trans_a": True}, f"matmul-ta-{n}"
        yield "batch_matmul", (rand((2, 9, 21), dt, "bm1"), rand((2, 21, 17), dt, "bm2")), {}, f"batch_matmul-{n}"
        yield "batch_matmul", (rand((2, 3, 9, 21), dt, "bm3"), rand((21, 17), dt, "bm4")), \
            {"bias": bias_for(17, dt, "bm5")}, f"batch_matmul-shared-b-{n}"
        yield "linear", (rand((5, 35), dt, "li1"), rand((19, 35), dt, "li2"), bias_for(19, dt, "li3")), {}, \
            f"linear-{n}"
        yield "linear", (rand((2, 3, 35), dt, "li4"), rand((19, 35), dt, "li5")), {"activation": "relu"}, \
            f"linear-relu-{n}"
        yield "conv2d", (rand((2, 6, 9, 7), dt, "c1"), rand((4, 3, 3, 2), dt, "c2"), bias_for(4, dt, "c3"),
                         1, 0, 1, 2), {}, f"conv2d-groups-{n}"
        yield "conv2d", (rand((1, 4, 8, 10), dt, "c4"), rand((6, 4, 3, 3), dt, "c5"), None, 1, "same"), \
            {"relu": True}, f"conv2d-same-relu-{n}"
        yield "conv2d", (rand((2, 3, 9, 7), dt, "c6"), rand((5, 3, 3, 3), dt, "c7"), bias_for(5, dt, "c8"), (2, 1),
                         (1, 2), (2, 1)), {}, f"conv2d-stride-dilation-{n}"
        yield "conv3d", (rand((1, 4, 5, 6, 5), dt, "c9"), rand((6, 4, 3, 2, 3), dt, "c10"),
                         bias_for(6, dt, "c11")), {}, f"conv3d-{n}"
        yield "conv_transpose2d", (rand((2, 6, 5, 4), dt, "ct1"), rand((6, 3, 3, 3), dt, "ct2"),
                                   bias_for(6, dt, "ct3"), 2, 1, 1, 2), {}, f"conv_transpose2d-{n}"
    for op_type in ("gelu_erf", "gelu_tanh"):          # split chips only: CHIP_OF
        yield "fused_matmul", (rand((45, 70), F16, "fm1" + op_type, 0.5), rand((70, 48), F16, "fm2" + op_type)), \
            {"bias": bias_for(48, F16, "fm3"), "fused_op_type": op_type}, f"fused_matmul-{op_type}-float16"
    scale = np.linspace(0.002, 0.02, 6).astype(np.float32)
    yield "conv2d", (rand((2, 4, 7, 6), I8, "q1"), rand((6, 2, 3, 3), I8, "q2"), rand(6, np.int32, "q3"), 1, 1, 1,
                     2), {"scale": scale, "relu": True}, "conv2d-int8-scale-channel-float16"
    yield "conv2d", (rand((2, 4, 7, 6), I8, "q4"), rand((6, 4, 3, 3), I8, "q5")), \
        {"scale": 0.01, "out_dtype": np.float32}, "conv2d-int8-scale-tensor-float32"
    yield "conv_transpose2d", (rand((1, 4, 5, 5), I8, "q6"), rand((4, 3, 2, 2), I8, "q7"), None, 2), \
        {"scale": 0.05}, "conv_transpose2d-int8-scale-float16"


CASES = list(_cases())


def test_the_cases_cover_every_operator():
    assert {name for name, *_ in CASES} == set(OP_UNIT)


@pytest.mark.parametrize("name, args, kwargs", [c[:3] for c in CASES], ids=[c[3] for c in CASES])
def test_operator_is_within_the_tolerance_table_of_its_golden(name, args, kwargs):
    out = getattr(ops, name)(*args, chip=CHIP_OF.get(name, CHIP), **kwargs)
    assert_close(out, getattr(golden, name)(*args, **kwargs), unit=OP_UNIT[name], err_msg=name)
