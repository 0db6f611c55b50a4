"""The fused matmul (npulab.kernels.fused_matmul, ops.fused_matmul): matmul + GELU as one mix
kernel on the 910b, against the numpy golden and PyTorch, its cross-core flags and workspace,
and against the separate matmul and GELU launches."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fixtures
import npulab.ops as ops
from npulab import ShapeError, twins
from npulab.kernels.activation import activation_tiling, launch_activation
from npulab.kernels.fused_matmul import (AIC_DONE, AIV_DONE, WS_SLOTS, FusedMatmulProblem, launch_fused_matmul,
                                         make_fused_tiling)
from npulab.kernels import search
from npulab.kernels.matmul import simulate
from npulab.ops import golden
from npulab.sim.isa import Kind, Pipe

CHIP = "910b"


def _inputs(m, k, n, key):
    a = fixtures.rand((m, k), np.float16, key + "a")
    b = (fixtures.rand((k, n), np.float16, key + "b") / np.sqrt(k)).astype(np.float16)
    return a, b, fixtures.bias_for(n, np.float16, key + "c").astype(np.float32)


@pytest.mark.parametrize("m, k, n", [(256, 256, 512), (200, 130, 304), (33, 48, 16), (1, 64, 32)])
@pytest.mark.parametrize("fused_op_type", ["gelu_erf", "gelu_tanh"])
def test_fused_matmul_matches_the_golden_and_torch(m, k, n, fused_op_type):
    a, b, c = _inputs(m, k, n, f"f{m}{k}{n}")
    y = ops.fused_matmul(a, b, bias=c, fused_op_type=fused_op_type, chip=CHIP)
    assert y.dtype == np.float16 and y.shape == (m, n)
    fixtures.assert_close(y, golden.fused_matmul(a, b, bias=c, fused_op_type=fused_op_type), unit="cube")
    t = F.gelu(torch.tensor(a, dtype=torch.float32) @ torch.tensor(b, dtype=torch.float32) + torch.tensor(c),
               approximate="none" if fused_op_type == "gelu_erf" else "tanh")
    fixtures.assert_close(y, t.numpy(), unit="cube")


def test_without_bias_and_with_a_recipe_tiling():
    a, b, _ = _inputs(300, 96, 256, "nb")
    y = ops.fused_matmul(a, b, chip=CHIP, tiling="seed")           # 128 x 64 block tiles
    fixtures.assert_close(y, golden.fused_matmul(a, b), unit="cube")


def test_each_block_tile_goes_through_the_workspace_under_flags_both_ways():
    a, b, c = _inputs(256, 128, 512, "flags")
    t = make_fused_tiling(FusedMatmulProblem(256, 512, 128, "gelu_erf", True), CHIP)
    y, tr = launch_fused_matmul(a, b, t, c, chip=CHIP)
    tiles = t.mm.core_loops
    G = t.block_dim
    assert tr.core_labels[:2] == ["AIC 0", "AIC 1"] and len(tr.core_cycles) == 3 * G
    sets = tr.kind == Kind.CROSS_SET
    waits = tr.kind == Kind.CROSS_WAIT
    aic = tr.core < G
    # forward: one AIC_DONE set a tile (on FIX), one wait a tile on each AIV (on MTE2)
    assert (sets & aic).sum() == tiles and set(tr.pipe[sets & aic]) == {Pipe.FIX}
    assert (waits & ~aic).sum() == 2 * tiles and set(tr.pipe[waits & ~aic]) == {Pipe.MTE2}
    # back: every AIV sets AIV_DONE once a tile; the AIC waits once a tile (its slot reuses and
    # the last WS_SLOTS reads), on FIX, so its mmads go on meanwhile
    assert (sets & ~aic).sum() == 2 * tiles and (waits & aic).sum() == tiles
    assert set(tr.pipe[waits & aic]) == {Pipe.FIX}
    assert "cross_core_set_flag mode 2 FIX #%d" % AIC_DONE in tr.name
    assert "cross_core_set_flag mode 2 MTE2 #%d" % AIV_DONE in tr.name
    # the AIC drains to the workspace (FixPipe -> GM), the AIVs read it back and write y
    r = tr.bytes_by_route()
    ws_bytes = tiles * t.mm.tiles.tile_m * t.mm.tiles.tile_n * 2
    assert r["L0C->GM"] == ws_bytes and r["UB->GM"] == 256 * 512 * 2
    assert t.workspace_elems == G * WS_SLOTS * t.slot_elems
    fixtures.assert_close(y, golden.fused_matmul(a, b, bias=c), unit="cube")


def test_traces_agree_on_both_twins():
    a, b, c = _inputs(96, 64, 128, "twins")
    digests = []
    for side in twins.SIDES:
        with twins.use(side):
            y, tr = ops.fused_matmul(a, b, bias=c, chip=CHIP, return_trace=True)
            digests.append(fixtures.trace_digest(tr))
    assert digests[0] == digests[1]


def _separate_cycles(m, n, k):
    """Cycles and GM bytes of ops.matmul's kernel (default tiling) and then ops.gelu's."""
    p = FusedMatmulProblem(m, n, k, "gelu_erf", True)
    trm = simulate(search.pick(p.matmul, CHIP), CHIP)
    at = activation_tiling(m * n, np.float16, "gelu_erf", CHIP)
    _, trg = launch_activation(np.zeros(m * n, np.float16), at, CHIP, "timing")
    return trm, trg


@pytest.mark.parametrize("m, n, k", [(2048, 3072, 768), (512, 4096, 1024)])
def test_one_mix_launch_beats_the_matmul_and_gelu_launches(m, n, k):
    """BERT-base's FFN up-projection (2048 tokens) and a shorter one: the GELU runs on the AIVs
    under the next tiles' mmads, and the workspace tiles come back from L2, not HBM."""
    t = make_fused_tiling(FusedMatmulProblem(m, n, k, "gelu_erf", True), CHIP)
    _, fused = launch_fused_matmul(None, None, t, np.zeros(n, np.float32), chip=CHIP, mode="timing")
    trm, trg = _separate_cycles(m, n, k)
    assert trm.cycles < fused.cycles < trm.cycles + trg.cycles
    f, sm, sg = fused.summary(), trm.summary(), trg.summary()
    assert f["gm_write_bytes"] == sm["gm_write_bytes"] + sg["gm_write_bytes"]      # C, then y; ws, then y
    assert f["hbm_read_bytes"] < sm["hbm_read_bytes"] + sg["hbm_read_bytes"]
    assert f["aic_mac_ratio"] > sm["mac_ratio"] * 0.8 and f["aiv_vec_ratio"] > 0


def test_what_the_fused_matmul_cannot_take():
    a, b, _ = _inputs(16, 32, 32, "bad")
    with pytest.raises(ShapeError, match="needs a split chip .*chip '910'.*ops.matmul, then ops.gelu"):
        ops.fused_matmul(a, b, chip="910")
    with pytest.raises(ShapeError, match="N must be a multiple of 16"):
        ops.fused_matmul(a, b[:, :24], chip=CHIP)
    with pytest.raises(ShapeError, match="must be float16"):
        ops.fused_matmul(a.astype(np.float32), b.astype(np.float32), chip=CHIP)
    with pytest.raises(ShapeError, match="fused_op_type must be one of"):
        ops.fused_matmul(a, b, fused_op_type="silu", chip=CHIP)
    with pytest.raises(ShapeError, match="chunk_rows=0 must be 1 to"):
        make_fused_tiling(FusedMatmulProblem(16, 32, 32), CHIP, chunk_rows=0)


def test_the_bench_row_compares_with_the_separate_launches():
    from npulab.bench.fused import bench_fused
    (row,) = bench_fused(shapes=((512, 1024, 512),))
    assert row["shape"] == [512, 1024, 512] and row["chip"] == "910b"
    assert row["separate_cycles"] == row["matmul_cycles"] + row["activation_cycles"]
    assert row["speedup"] == pytest.approx(row["separate_cycles"] / row["cycles"]) and row["speedup"] > 1
    assert 0 < row["utilization"] < 1 and row["hbm_read_bytes"] <= row["separate_hbm_read_bytes"]
