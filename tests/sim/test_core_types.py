"""Core types: a vector-only kernel runs on the AIV cores of a split chip (910b: 48 AIV beside
24 AIC), on the AI cores of a coupled one; an AIV core has the UB but no L1, L0 or cube."""
import numpy as np
import pytest

import npulab
import npulab.ops as ops
from npulab.chips import load_chip
from npulab.errors import ChipFileError, CoreTypeError, NpuError
from npulab.kernels.elementwise import add_kernel, add_tiling, launch_add
from npulab.lang import A1, A2, VECIN, TPipe, Queue, data_copy, launch


def _xy(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * 100).astype(dtype), (rng.standard_normal(n) * 100).astype(dtype)


# -- ChipSpec.cores_for ---------------------------------------------------------------------
@pytest.mark.parametrize("chip", npulab.chips(), ids=lambda c: c.name)
def test_cores_for_on_every_chip(chip):
    if chip.arch == "coupled":         # one kind of core holds cube and vector: every kernel uses it
        assert [chip.cores_for(t) for t in ("aic", "aiv", "mix")] == [chip.ai_cores] * 3
    else:
        assert chip.cores_for("aiv") == chip.vector_cores > 0
        assert chip.cores_for("aic") == chip.cores_for("mix") == chip.ai_cores
    assert chip.cores_for() == chip.ai_cores             # the default keeps the old behaviour


def test_cores_for_910b_and_bad_core_type():
    c = npulab.get_chip("910b")
    assert (c.cores_for("aic"), c.cores_for("aiv"), c.cores_for("mix")) == (24, 48, 24)
    assert npulab.get_chip("910").cores_for("aiv") == 32
    with pytest.raises(ValueError, match="core_type must be one of"):
        c.cores_for("vector")
    with pytest.raises(ValueError, match="core_type must be one of"):
        launch(lambda: None, 1, chip="910b", core_type="AIV")


def test_split_chip_file_needs_vector_cores(tmp_path):
    src = npulab.get_chip("910b").source
    text = open(src, encoding="utf-8").read().replace("vector_cores = 48 ", "vector_cores = 0 ")
    (tmp_path / "nov.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ChipFileError, match="vector_cores"):
        load_chip(tmp_path / "nov.toml")


def test_gm_is_shared_by_the_cores_of_the_launch():
    c = npulab.get_chip("910b")
    assert c.gm_share_bytes_per_cycle(48, "aiv") * 48 == pytest.approx(c.gm_sustained_bytes_per_cycle)
    assert c.gm_share_bytes_per_cycle(48, "aic") * 24 == pytest.approx(c.gm_sustained_bytes_per_cycle)
    # 48 AIV cores together never pass the HBM roofline: an Add moves 3 x its bytes at best at
    # gm_bytes_per_cycle
    x, y = _xy(48 * 64 * 1024, np.float16)
    _, tr = launch_add(x, y, add_tiling(x.size, x.dtype, "910b"), "910b", "timing")
    assert tr.summary()["cores_used"] == 48
    assert tr.cycles >= 3 * x.nbytes / c.memory.gm_bytes_per_cycle


# -- vector kernels on the 910b use the AIV cores ---------------------------------------------
def test_add_on_910b_uses_48_aiv_cores_and_is_bit_exact():
    for dtype in (np.float16, np.float32):
        x, y = _xy(100_003, dtype, seed=3)
        t = add_tiling(x.size, dtype, "910b")
        assert t.block_dim == 48
        z, tr = ops.add(x, y, chip="910b", return_trace=True)
        s = tr.summary()
        assert (s["core_type"], s["cores_used"], s["block_dim"]) == ("aiv", 48, 48)
        assert len(np.unique(tr.core)) == 48
        view = np.uint16 if dtype == np.float16 else np.uint32
        assert np.array_equal(z.view(view), (x + y).view(view))


def test_small_add_on_910b_uses_no_more_cores_than_blocks():
    x, y = _xy(1000, np.float32, seed=4)
    z, tr = ops.add(x, y, chip="910b", return_trace=True)
    t = add_tiling(x.size, np.float32, "910b")
    assert t.block_dim < 48 and tr.summary()["cores_used"] == t.block_dim
    assert np.array_equal(z, x + y)


def _family_runs(chip):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 32, 64)).astype(np.float32)
    img = rng.standard_normal((2, 32, 12, 12)).astype(np.float32)
    ch = np.abs(rng.standard_normal(32)).astype(np.float32) + 0.5
    yield "layer_norm", ops.layer_norm(x, (64,), chip=chip, return_trace=True)
    yield "rms_norm", ops.rms_norm(x, (64,), chip=chip, return_trace=True)
    yield "softmax", ops.softmax(x, -1, chip=chip, return_trace=True)
    yield "softmax dim 1", ops.softmax(x, 1, chip=chip, return_trace=True)
    yield "gelu", ops.gelu(x, chip=chip, return_trace=True)
    yield "relu", ops.relu(x, chip=chip, return_trace=True)
    yield "batch_norm", ops.batch_norm(img, ch, ch, chip=chip, return_trace=True)
    yield "max_pool2d", ops.max_pool2d(img, 2, chip=chip, return_trace=True)
    yield "avg_pool2d", ops.avg_pool2d(img, 3, 1, 1, chip=chip, return_trace=True)
    yield "mul broadcast", ops.mul(x, x[0, :1, :], chip=chip, return_trace=True)


@pytest.mark.parametrize("chip", ["910b", "910"])
def test_every_vector_family_launches_as_aiv(chip):
    c = npulab.get_chip(chip)
    for name, (y, tr) in _family_runs(chip):
        s = tr.summary()
        assert s["core_type"] == "aiv", name
        assert 1 <= s["block_dim"] and s["cores_used"] == min(s["block_dim"], c.cores_for("aiv")), name
        assert s["cores_used"] <= c.cores_for("aiv"), name
        assert np.all(np.isfinite(y)), name
    assert c.cores_for("aiv") == (48 if chip == "910b" else 32)


def test_vector_kernels_on_910b_fill_48_cores_when_the_work_allows():
    x = np.zeros((48 * 4, 256), np.float16)
    for name, (_, tr) in (("layer_norm", ops.layer_norm(x, (256,), chip="910b", return_trace=True)),
                          ("softmax", ops.softmax(x, -1, chip="910b", return_trace=True)),
                          ("gelu", ops.gelu(x, chip="910b", return_trace=True))):
        assert tr.summary()["cores_used"] == 48 and len(np.unique(tr.core)) == 48, name


def test_trace_reports_the_core_type():
    x, y = _xy(4096, np.float16)
    _, tr = ops.add(x, y, chip="910b", return_trace=True)
    assert "core type" in tr.table() and "AIV" in tr.table()
    _, tr = ops.add(x, y, chip="910", return_trace=True)
    assert tr.summary()["core_type"] == "aiv"
    assert "core type" not in tr.table()        # coupled: the table a lab prints is unchanged


# -- coupled chips: nothing changes -----------------------------------------------------------
@pytest.mark.parametrize("chip", ["teach", "310", "910"])
def test_aiv_launch_on_a_coupled_chip_times_like_the_old_aic_launch(chip):
    x, y = _xy(50_000, np.float16, seed=5)
    t = add_tiling(x.size, x.dtype, chip)
    for mode in ("functional", "timing"):
        (_, _, z_aic, _), tr_aic = launch(add_kernel, t.block_dim, x, y, np.zeros_like(x), t, chip=chip,
                                          mode=mode, core_type="aic")
        z, tr = launch_add(x, y, add_tiling(x.size, x.dtype, chip), chip, mode)
        assert tr.cycles == tr_aic.cycles
        assert np.array_equal(tr.start, tr_aic.start) and np.array_equal(tr.end, tr_aic.end)
        assert {**tr.summary(), "core_type": "aic"} == tr_aic.summary()
        if mode == "functional":
            assert np.array_equal(z, z_aic)


# -- an AIV core has no L1, L0 or cube -------------------------------------------------------
def _l1_kernel(x):
    pipe = TPipe()
    q = Queue(A1, "a1")
    pipe.init_buffer(q, 1, 1024)


def _l0a_kernel(x):
    pipe = TPipe()
    q = Queue(A2, "a2")
    pipe.init_buffer(q, 1, 1024)


def _ub_kernel(x):
    pipe = TPipe()
    q = Queue(VECIN, "vin")
    pipe.init_buffer(q, 1, 1024)
    t = q.alloc_tensor(np.float16)
    data_copy(t, x[0:512], 512)
    q.enque(t)
    q.free_tensor(q.deque())


@pytest.mark.parametrize("chip", ["910b", "910"])
def test_l1_and_l0_on_an_aiv_launch_are_an_error_naming_the_core_type(chip):
    x = np.zeros(512, np.float16)
    for kernel, buf in ((_l1_kernel, "L1"), (_l0a_kernel, "L0A")):
        with pytest.raises(CoreTypeError, match=rf"buffer {buf} does not exist on an AIV core \(core_type='aiv'\)"):
            launch(kernel, 1, x, chip=chip, core_type="aiv")
        launch(kernel, 1, x, chip=chip, core_type="aic")      # a cube core has them
        if chip == "910":
            launch(kernel, 1, x, chip=chip, core_type="mix")  # a coupled core has everything
        else:                                             # a mix body runs on the AIVs too
            with pytest.raises(CoreTypeError, match=rf"{buf} does not exist on an AIV core \(a mix launch\).*is_aic"):
                launch(kernel, 1, x, chip=chip, core_type="mix")
    assert issubclass(CoreTypeError, NpuError) and issubclass(CoreTypeError, ValueError)
    _, tr = launch(_ub_kernel, 2, x, chip=chip, core_type="aiv")   # the UB is there
    assert tr.summary()["core_type"] == "aiv"


def test_matmul_cannot_run_as_an_aiv_kernel():
    from npulab.kernels.matmul import MatmulProblem, launch_matmul, make_tiling, matmul_kernel
    a = np.ones((32, 32), np.float16)
    t = make_tiling(MatmulProblem.of((32, 32, 32), np.float16), chip="910b")
    c, _ = launch_matmul(a, a, t, chip="910b")                # as a cube kernel it runs
    assert np.allclose(c.reshape(32, 32), 32.0)
    with pytest.raises(CoreTypeError, match="AIV core"):
        launch(matmul_kernel, t.block_dim, a.reshape(-1), a.reshape(-1),
               np.zeros(32 * 32, t.problem.out_dtype), None, t, chip="910b", core_type="aiv")


# -- the bench ---------------------------------------------------------------------------------
def test_bench_910b_layernorm_row_runs_on_the_aiv_cores():
    from npulab.bench.vector import BERT, bench_vector
    rows = bench_vector("910b", shape=BERT, dtypes=(np.float32,))
    ln = next(r for r in rows if r["op"] == "LayerNorm")
    assert (ln["chip"], ln["core_type"], ln["cores_used"], ln["tiling"]["block_dim"]) == ("910b", "aiv", 48, 48)
    assert {(r["op"], r.get("approximate")) for r in rows} >= {("Gelu", "none"), ("Gelu", "tanh")}
    # as "aic" or as a mix kernel that does not branch it cannot run: a 910B cube core has no UB
    from npulab.kernels.norm import launch_layer_norm, layer_norm_tiling
    from npulab.kernels import norm
    x, g = np.zeros(BERT, np.float32), np.zeros(BERT[-1], np.float32)
    t = layer_norm_tiling(int(np.prod(BERT[:-1])), BERT[-1], np.float32, "910b")
    args = [x.reshape(-1), g, g, np.zeros(x.size, np.float32), t, 1e-5]
    _, tr_aiv = launch_layer_norm(x, g, g, t, 1e-5, "910b", "timing")
    assert tr_aiv.summary()["cores_used"] == 48 and tr_aiv.cycles == ln["cycles"]
    for core_type, where in (("aic", r"core_type='aic'"), ("mix", "a mix launch")):
        with pytest.raises(CoreTypeError, match=rf"UB does not exist on an AIC core of a split chip \({where}\)"):
            launch(norm.layer_norm_kernel, t.block_dim, *args, chip="910b", mode="timing", core_type=core_type)


def test_bench_vector_default_has_910_and_910b_rows():
    from npulab.bench import vector as bv
    import inspect
    assert inspect.signature(bv.bench_vector).parameters["chip"].default == ("910", "910b")
    rows = bv.bench_vector(("teach", "910b"), shape=(2, 8, 64), dtypes=(np.float32,))
    assert [r["chip"] for r in rows] == ["teach"] * 4 + ["910b"] * 4
    tanh = [r for r in rows if r.get("approximate") == "tanh"]
    assert all("sqrt(8/pi)" in r["formula"] for r in tanh)
