"""The cube kernels' epilogue on the chips with no FixPipe (npulab.kernels.epilogue): the output's
path in the trace, numerics against the goldens and PyTorch on every chip, the overlap with the
next tile's mmads, and the UB the tilings count."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from fixtures import assert_close

import npulab.ops as ops
from npulab import BufferOverflowError, get_chip
from npulab.kernels import conv as K
from npulab.kernels.epilogue import Epilogue, ub_plan
from npulab.kernels.matmul import (MatmulProblem, buffer_demand, can_implement, default_tiling, launch_matmul,
                                   make_tiling, simulate, ub_plan_of)
from npulab.ops import golden
from npulab.sim.isa import Op, Pipe

CHIPS = ("910", "310", "910b", "teach")


def _routes(tr):
    """{route: set of pipes} of a trace's byte moves."""
    out = {}
    for route, pipe in zip(tr.route, tr.pipe):
        if route:
            out.setdefault(route, set()).add(Pipe(pipe))
    return out


def test_910_output_goes_through_ub_and_910b_through_fixpipe():
    """The acceptance line of issue 15: on the 910 a matmul's output goes L0C -> UB on the vector
    pipe, then UB -> GM on MTE3, and nothing runs on FixPipe; on the 910B FixPipe writes it."""
    p = MatmulProblem(1, 256, 512, 256, "float16", has_bias=True, relu=True)
    t910 = simulate(default_tiling(p, "910"), "910")
    r = _routes(t910)
    assert r["L0C->UB"] == {Pipe.V} and r["UB->GM"] == {Pipe.MTE3}
    assert "L0C->GM" not in r and not (t910.pipe == Pipe.FIX).any()
    assert t910.pipe_ratios()["fixpipe_ratio"] == 0 and t910.pipe_ratios()["vec_ratio"] > 0
    moved = sum(n for n, o in zip(t910.nbytes, t910.op) if o == Op.COPY_L0C_TO_UB)
    assert moved == 256 * 512 * 4                                 # every fp32 result, once
    assert t910.bytes_by_route()["UB->GM"] == 256 * 512 * 2       # written once, fp16
    t910b = simulate(default_tiling(p, "910b"), "910b")
    r = _routes(t910b)
    assert r["L0C->GM"] == {Pipe.FIX} and "L0C->UB" not in r and "UB->GM" not in r
    assert not (t910b.op == Op.COPY_L0C_TO_UB).any()


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("dtype,bias,relu", [(np.float16, True, True), (np.float16, False, False),
                                             (np.float32, True, False), (np.int8, True, True),
                                             (np.int8, False, False)])
def test_matmul_epilogue_matches_the_golden_on_every_chip(chip, dtype, bias, relu):
    m, n, k = 100, 200, 72                        # tails in M and N (200 = 12.5 fractal columns)
    rng = np.random.default_rng(11)
    if dtype == np.int8:
        a, b = rng.integers(-128, 128, (m, k)).astype(dtype), rng.integers(-128, 128, (k, n)).astype(dtype)
        bv = rng.integers(-3000, 3000, n).astype(np.int32) if bias else None
    else:
        a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
        bv = rng.standard_normal(n).astype(np.float32) if bias else None
    p = MatmulProblem(1, m, n, k, np.dtype(dtype).name, has_bias=bias, relu=relu)
    c, tr = launch_matmul(a[None], b[None], default_tiling(p, chip), bias=bv, chip=chip, check_races=True)
    want = golden.matmul(a, b, bias=bv, relu=relu)
    assert_close(c[0], want, unit="cube")
    if relu:
        assert c.min() == 0


@pytest.mark.parametrize("chip", CHIPS)
def test_conv_bn_relu_matches_torch_on_every_chip(chip):
    """Conv + BatchNorm (inference) + ReLU as one kernel: on the 910 and 310 the per-channel scale
    and offset and the ReLU run on the vector unit, in fp32 as FixPipe does."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 20, 9, 9)).astype(np.float16)
    w = (rng.standard_normal((40, 20, 3, 3)) * 0.2).astype(np.float16)
    b = rng.standard_normal(40).astype(np.float32)
    mean, var = rng.standard_normal(40), rng.uniform(0.5, 2.0, 40)
    gamma, beta = rng.uniform(0.5, 1.5, 40), rng.standard_normal(40)
    y, tr = ops.conv2d_bn_relu(x, w, b, mean, var, gamma, beta, padding=1, chip=chip, return_trace=True)
    t = lambda v: torch.tensor(np.asarray(v, np.float32))         # noqa: E731
    ref = TF.relu(TF.batch_norm(TF.conv2d(t(x), t(w), t(b), padding=1), t(mean), t(var), t(gamma), t(beta),
                                eps=1e-5)).numpy()
    assert_close(y, ref, unit="cube")
    assert_close(y, golden.conv2d_bn_relu(x, w, b, mean, var, gamma, beta, padding=1), unit="cube")
    fused_on_vector = get_chip(chip).cube.output_path != "fixpipe"
    assert ((tr.op == Op.VEC_BINARY).any()) == fused_on_vector


@pytest.mark.parametrize("chip", ["910", "310"])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_int8_conv_dequant_on_the_vector_unit(chip, per_channel, bias):
    """int8 conv dequantised to fp16: bias added in int32, the int32 -> fp32 cast exact, one fp32
    multiply, one rounding to fp16, as FixPipe does; the 310's move dequantises by an fp16 scale
    when there is no vector to apply (its DEQ mode), one fp16 rounding away."""
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (2, 24, 6, 6)).astype(np.int8)
    wt = rng.integers(-128, 128, (40, 24, 3, 3)).astype(np.int8)
    bv = rng.integers(-500, 500, 40).astype(np.int32) if bias else None
    scale = (rng.random(40) * 1e-3 + 1e-4).astype(np.float32) if per_channel else 2e-4
    y = ops.conv2d(x, wt, bv, 1, 1, chip=chip, scale=scale)
    acc = golden.conv2d(x, wt, bv, 1, 1)
    s = np.asarray(scale, np.float32).reshape(-1, 1, 1) if per_channel else np.float32(scale)
    expected = (acc.astype(np.float32) * s).astype(np.float16)
    if chip == "310" and not bias and not per_channel:
        assert_close(y, expected, unit="cube")
    else:
        np.testing.assert_array_equal(y, expected)


def test_the_epilogue_overlaps_the_next_tiles_mmads():
    """On one core, tile t's L0C -> UB moves and vector work run while the cube computes tile
    t + 1 (two L0C slots): some vector-pipe instruction of the epilogue lies inside the cube's
    busy span of a later tile."""
    p = MatmulProblem(1, 512, 512, 512, "float16", has_bias=True, relu=True)
    t = make_tiling(p, "910", (128, 128, 128, 64, 2, 2, 2), block_dim=1)
    tr = simulate(t, "910")
    moves = np.flatnonzero(tr.op == Op.COPY_L0C_TO_UB)
    mmads = np.flatnonzero(tr.op == Op.MMAD)
    first_move = moves[0]
    later = mmads[mmads > first_move]
    assert len(later) and tr.start[later[0]] < tr.end[first_move]
    busy = tr.busy_cycles()
    assert busy[Pipe.V] > 0 and tr.cycles < busy[Pipe.M] + busy[Pipe.V] + busy[Pipe.MTE3]


def test_tilings_count_the_ub_of_the_epilogue():
    """A tall, narrow block tile with a bias fills the 910's UB with its one-column pieces: the
    tiling cannot run there, and says UB; the same tiles run on the 910B (FixPipe, no UB demand)."""
    p = MatmulProblem(1, 2048, 64, 64, "float16", has_bias=True)
    t = make_tiling(p, "910", (2048, 16, 16, 16, 1, 1, 1))
    assert "UB" in buffer_demand(t, "910") and "UB" not in buffer_demand(t, "910b")
    assert "UB" not in buffer_demand(t)                          # no chip: the cube's buffers only
    with pytest.raises(BufferOverflowError, match=r"cannot run: UB needs [^;]*$"):   # UB alone
        can_implement(t, "910")
    assert can_implement(t, "910b")
    d = default_tiling(MatmulProblem(1, 4096, 4096, 4096, "float16"), "910")
    need, how = buffer_demand(d, "910")["UB"]
    assert need <= get_chip("910").buffers.ub and "piece" in how


@pytest.mark.parametrize("epi,steps", [
    (Epilogue("float32", "float16"), ["move", "cast"]),
    (Epilogue("float32", "float16", ("bias",), None, True), ["move", "bias", "cast", "relu"]),
    (Epilogue("int32", "float16", ("bias", "scale", "offset"), None, True),
     ["move", "bias", "to_f32", "scale_offset", "cast", "relu"]),
    (Epilogue("int32", "float16", (), 0.5), ["move", "to_f32", "scale_tensor", "cast"]),
    (Epilogue("int32", "int32", ("bias",)), ["move", "bias"]),
])
def test_epilogue_steps_and_what_the_310_move_takes_over(epi, steps):
    assert epi.steps(get_chip("910")) == steps
    on_310 = epi.steps(get_chip("310"))
    assert on_310 == (["move"] if not epi.vectors else steps)
    assert ub_plan(epi, 128, 256, get_chip("910b")) is None


def test_pieces_fit_ub_and_cover_the_tile():
    chip = get_chip("910")
    for tile in ((128, 256), (256, 256), (512, 64), (16, 16)):
        plan = ub_plan(Epilogue("float32", "float16", ("bias",), None, True), *tile, chip)
        assert plan.ub_demand()[0] <= chip.buffers.ub
        n1 = plan.cols // 16
        assert 1 <= plan.piece <= n1 and -(-n1 // plan.piece) * plan.piece - n1 < plan.piece


def test_conv_tiling_counts_ub_and_the_search_keeps_working():
    p = K.make_problem((8, 64, 1, 28, 28), (64, 64, 1, 3, 3), np.float16, (1, 1, 1), ((0, 0), (1, 1), (1, 1)),
                       scale="channel", has_offset=True, relu=True)
    t = K.default_tiling(p, "910")
    assert "UB" in K.buffer_demand(t, "910")
    assert K.ub_plan_of(t, "910") is not None and K.ub_plan_of(t, "910b") is None
    assert ub_plan_of(default_tiling(MatmulProblem(1, 64, 64, 64, "float16"), "teach"), "teach") is None
