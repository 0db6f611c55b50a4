"""The autotuner: candidates fit, search by simulated cycles, JSON cache, parallel workers,
progress bar, and the dispatcher picking the tuned tiling."""
import io
import json

import numpy as np
import pytest

from npulab.kernels import autotune
from npulab.kernels.matmul import simulate
from npulab.kernels.matmul_tiling import default_tiling, problems
from npulab.ops.matmul import _tiling_for, matmul

SHAPE = (1, 256, 512, 256)


@pytest.fixture(autouse=True)
def cache_file(tmp_path, monkeypatch):
    path = tmp_path / "autotune.json"
    monkeypatch.setenv(autotune.CACHE_ENV, str(path))
    monkeypatch.delenv(autotune.PARALLEL_ENV, raising=False)
    return path


def test_cache_path_follows_env(cache_file, monkeypatch):
    assert autotune.cache_path() == cache_file
    monkeypatch.delenv(autotune.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    assert str(autotune.cache_path()) == "/somewhere/npulab/autotune.json"


def test_candidates_fit_and_are_ranked():
    cands = autotune.candidates(SHAPE, np.float16, "910", limit=None)
    assert len(cands) > 10
    for t in cands:
        assert problems(t, "910") == []
    est = [autotune.estimate_cycles(t, "910") for t in cands]
    assert est == sorted(est)
    assert len(autotune.candidates(SHAPE, np.float16, "910", limit=5)) == 5


def test_search_picks_the_fewest_simulated_cycles_and_caches_it(cache_file):
    res = autotune.autotune(SHAPE, np.float16, "910", limit=4, progress=False)
    assert not res.from_cache and len(res.searched) == 4
    assert res.cycles == min(c for _, c in res.searched)
    assert res.cycles == simulate(res.tiling, "910").cycles      # the figure is a real simulation
    assert 0 < res.utilization <= 1
    data = json.loads(cache_file.read_text())                    # plain JSON, one entry
    assert data["version"] == autotune.CACHE_VERSION
    (key, entry), = data["entries"].items()
    assert key == "910|matmul|1x256x512x256|float16" and entry["cycles"] == res.cycles
    again = autotune.autotune(SHAPE, np.float16, "910", limit=4, progress=False)
    assert again.from_cache and again.tiling == res.tiling and again.cycles == res.cycles
    # the dispatcher now uses the tuned tiling
    t = _tiling_for(SHAPE, np.float16, autotune.get_chip("910"), None, {})
    assert t.name == "tuned" and t.recipe() == res.tiling.recipe()
    a = np.ones((256, 256), np.float16)
    b = np.ones((256, 512), np.float16)
    np.testing.assert_array_equal(matmul(a, b), np.full((256, 512), 256, np.float16))


def test_parallel_workers_give_the_same_answer(monkeypatch):
    serial = autotune.autotune(SHAPE, np.float16, "910", limit=3, progress=False, use_cache=False)
    monkeypatch.setenv(autotune.PARALLEL_ENV, "2")
    assert autotune.parallel_workers() == 2
    par = autotune.autotune(SHAPE, np.float16, "910", limit=3, progress=False, use_cache=False)
    assert par.searched == serial.searched and par.tiling == serial.tiling


def test_bad_parallel_setting(monkeypatch):
    monkeypatch.setenv(autotune.PARALLEL_ENV, "many")
    with pytest.raises(ValueError, match="NPULAB_PARALLEL_COMPILER='many'"):
        autotune.parallel_workers()
    monkeypatch.setenv(autotune.PARALLEL_ENV, "0")
    with pytest.raises(ValueError, match="at least 1"):
        autotune.parallel_workers()


def test_progress_bar_on_long_searches():
    out = io.StringIO()
    autotune.autotune(SHAPE, np.float16, "910", limit=autotune.PROGRESS_MIN, stream=out, use_cache=False)
    text = out.getvalue()
    assert f"{autotune.PROGRESS_MIN}/{autotune.PROGRESS_MIN}" in text and "best" in text and "#" in text
    quiet = io.StringIO()
    autotune.autotune(SHAPE, np.float16, "910", limit=2, stream=quiet, use_cache=False)
    assert quiet.getvalue() == ""


def test_corrupt_or_foreign_cache_is_ignored(cache_file):
    cache_file.write_text("not json")
    assert autotune.lookup(SHAPE, np.float16, "910") is None
    cache_file.write_text(json.dumps({"version": 999, "entries": {}}))
    assert autotune.load_cache() == {}
    key = autotune.cache_key("910", "matmul", SHAPE, np.float16)
    cache_file.write_text(json.dumps({"version": 1, "entries": {key: {"tiling": {"tile_m": 1}}}}))
    assert autotune.lookup(SHAPE, np.float16, "910") is None     # stale entry: default tiling
    t = _tiling_for(SHAPE, np.float16, autotune.get_chip("910"), None, {})
    assert t == default_tiling(SHAPE, np.float16, "910")


def test_lower_bound():
    assert autotune.lower_bound_cycles((4096, 4096, 4096), np.float16, "910") == 4096 ** 3 / (32 * 4096)
    assert autotune.lower_bound_cycles((4096, 4096, 4096), np.int8, "910") == 4096 ** 3 / (32 * 8192)


def test_functional_bench_row_compares_with_numpy_on_both_thread_settings():
    """The functional row of `npulab bench kernels` (run small here): the simulator's product
    equals numpy's float32 one to fp32 rounding, and both ratios are measured."""
    from npulab.kernels import bench
    row = bench.functional_vs_numpy(shape=(48, 80, 64), repeat=1, rounds=2)
    assert "2 rounds of 1 runs" in row["method"]
    assert row["mode"] == "functional" and list(row["shape"])[-3:] == [48, 80, 64]
    # C is fp16: the error is the output rounding, half an ulp of |c| <= 32 (2^-6)
    assert row["max_abs_err"] <= 2.0 ** -6
    assert row["sim_seconds"] > 0 and row["numpy_seconds"] > 0
    assert row["vs_numpy_ratio"] == pytest.approx(row["sim_seconds"] / row["numpy_seconds"])
    assert row["meets_target"] == (row["vs_numpy_ratio"] <= row["target_ratio"])
    one = row["one_thread"]
    assert one is not None and one["vs_numpy_ratio"] == pytest.approx(one["sim_seconds"] / one["numpy_seconds"])
    assert row["blas_threads"] is None or row["blas_threads"] >= 1
    assert row["worker"] is True            # this machine has numpy's OpenBLAS and pthreads
    assert row["blas_threads"] == bench._blas_threads()     # the launches set BLAS back
