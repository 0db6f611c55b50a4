"""The one tiling search and its cache: candidates fit, search by simulated cycles, one JSON cache
for every family, parallel workers, the tqdm progress bar, and the dispatcher picking the tuned
tiling."""
import io
import json

import numpy as np
import pytest

from npulab.chips import get_chip
from npulab.kernels import search
from npulab.kernels.conv import ConvProblem, make_problem
from npulab.kernels.conv import default_tiling as conv_default_tiling
from npulab.kernels.conv import simulate as conv_simulate
from npulab.kernels.matmul import MatmulProblem, default_tiling, estimate_cycles, problems, simulate
from npulab.ops.matmul import matmul, tiling_for
from npulab.sim.cost import lower_bound_cycles

SHAPE = (1, 256, 512, 256)
PROBLEM = MatmulProblem.of(SHAPE, np.float16)


@pytest.fixture(autouse=True)
def cache_file(tmp_path, monkeypatch):
    path = tmp_path / "tilings.json"
    monkeypatch.setenv(search.CACHE_ENV, str(path))
    monkeypatch.delenv(search.PARALLEL_ENV, raising=False)
    search.CACHE.clear_memory()
    yield path
    search.CACHE.clear_memory()                # later tests do not see this file's tilings


def test_cache_path_follows_env(cache_file, monkeypatch):
    assert search.CACHE.path() == cache_file
    monkeypatch.delenv(search.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    assert str(search.CACHE.path()) == "/somewhere/npulab/tilings.json"


def test_candidates_fit_and_are_ranked():
    ranked = search.rank(PROBLEM, "910")
    cands = [t for _, _, t in ranked]
    assert len(cands) > 10
    for t in cands:
        assert problems(t, "910") == []
    est = [estimate_cycles(t, "910") for t in cands]
    assert est == sorted(est)
    assert [e for e, _, _ in ranked] == est


def test_search_picks_the_fewest_simulated_cycles_and_caches_it(cache_file):
    res = search.tune(PROBLEM, "910", limit=4, progress=False)
    assert not res.from_cache and len(res.searched) == 4
    assert res.cycles == min(c for _, c in res.searched)
    assert res.cycles == simulate(res.tiling, "910").cycles      # the figure is a real simulation
    assert 0 < res.utilization <= 1
    data = json.loads(cache_file.read_text())                    # plain JSON, one entry
    assert data["version"] == search.CACHE_VERSION
    (key, entry), = data["entries"].items()
    assert key == "910|matmul|1x256x512x256|float16" and entry["cycles"] == res.cycles
    again = search.tune(PROBLEM, "910", limit=4, progress=False)
    assert again.from_cache and again.tiling == res.tiling and again.cycles == res.cycles
    # the dispatcher now uses the tuned tiling, for any epilogue of the same GEMM
    t = tiling_for(PROBLEM, get_chip("910"))
    assert t.name == "tuned" and t.recipe() == res.tiling.recipe()
    biased = tiling_for(MatmulProblem.of(SHAPE, np.float16, has_bias=True), get_chip("910"))
    assert biased.tiles == res.tiling.tiles and biased.problem.has_bias
    a = np.ones((256, 256), np.float16)
    b = np.ones((256, 512), np.float16)
    np.testing.assert_array_equal(matmul(a, b), np.full((256, 512), 256, np.float16))


def test_parallel_workers_give_the_same_answer(monkeypatch):
    serial = search.tune(PROBLEM, "910", limit=3, progress=False, use_cache=False)
    monkeypatch.setenv(search.PARALLEL_ENV, "2")
    assert search.parallel_workers() == 2
    par = search.tune(PROBLEM, "910", limit=3, progress=False, use_cache=False)
    assert par.searched == serial.searched and par.tiling == serial.tiling


def test_bad_parallel_setting(monkeypatch):
    monkeypatch.setenv(search.PARALLEL_ENV, "many")
    with pytest.raises(ValueError, match="NPULAB_PARALLEL_COMPILER='many'"):
        search.parallel_workers()
    monkeypatch.setenv(search.PARALLEL_ENV, "0")
    with pytest.raises(ValueError, match="at least 1"):
        search.parallel_workers()


def test_progress_bar_on_long_searches():
    out = io.StringIO()
    search.tune(PROBLEM, "910", limit=search.PROGRESS_MIN, stream=out, use_cache=False)
    text = out.getvalue()
    assert f"{search.PROGRESS_MIN}/{search.PROGRESS_MIN}" in text and "best" in text and "#" in text
    assert "it/s" not in text and "s/it" not in text          # no rates: nothing machine-dependent
    quiet = io.StringIO()
    search.tune(PROBLEM, "910", limit=2, stream=quiet, use_cache=False)
    assert quiet.getvalue() == ""


def test_corrupt_or_foreign_cache_is_ignored(cache_file):
    cache_file.write_text("not json")
    assert search.lookup(PROBLEM, "910") is None
    cache_file.write_text(json.dumps({"version": 999, "entries": {}}))
    assert search.CACHE.entries() == {}
    key = search.cache_key("910", "matmul", PROBLEM.key())
    cache_file.write_text(json.dumps({"version": search.CACHE_VERSION, "entries": {key: {"tiles": {"tile_m": 1}}}}))
    assert search.lookup(PROBLEM, "910") is None                  # stale entry: default tiling
    t = tiling_for(PROBLEM, get_chip("910"))
    assert t == default_tiling(PROBLEM, "910")


def test_lower_bound():
    big = MatmulProblem.of((4096, 4096, 4096), np.float16)
    assert lower_bound_cycles("910", big.macs, np.float16) == 4096 ** 3 / (32 * 4096)
    assert lower_bound_cycles("910", big.macs, np.int8) == 4096 ** 3 / (32 * 8192)
    assert search.family_of(big).lower_bound(big, get_chip("910")) == 4096 ** 3 / (32 * 4096)


def test_conv_shares_the_search_and_the_cache(cache_file):
    """The conv family runs through the same search: its default tiling's simulated shortlist is
    stored in the one file (kind "default"), a later process-fresh lookup reads it back without
    searching, and the autotuner tunes a conv as it tunes a matmul."""
    prob = make_problem((8, 64, 1, 14, 14), (128, 64, 1, 3, 3), np.float16, pads=((0, 0), (1, 1), (1, 1)))
    assert isinstance(prob, ConvProblem) and search.family_of(prob).op == "conv"
    picked = conv_default_tiling(prob, "910", search=True)
    entries = json.loads(cache_file.read_text())["entries"]
    (key, entry), = entries.items()
    assert key.startswith("910|conv|") and key.endswith("|default-searched")
    assert entry["cycles"] == conv_simulate(picked, "910").cycles and entry["searched"] >= 2
    search.CACHE.clear_memory()                                   # as a new process would start
    again = conv_default_tiling(prob, "910", search=True)
    assert again == picked and again is not picked
    tuned = search.tune(prob, "910", limit=3, progress=False)
    assert tuned.cycles == min(c for _, c in tuned.searched)
    assert tuned.cycles == conv_simulate(tuned.tiling, "910").cycles
    assert search.pick(prob, "910").tiles == tuned.tiling.tiles   # the dispatcher's pick follows
    assert len(json.loads(cache_file.read_text())["entries"]) == 2


def test_one_cache_holds_the_dispatchers_tilings():
    from npulab.ops.registry import dispatcher
    search.CACHE.clear_memory()
    a = np.ones((32, 48), np.float16)
    matmul(a, a.T.copy())
    assert dispatcher.misses == 1 and len(dispatcher) == 1
    assert any(ns == "dispatch" for ns, _ in search.CACHE.memory)
    dispatcher.clear()
    assert not search.CACHE.memory and dispatcher.misses == 0


def test_a_chip_file_of_another_name_or_figures_keys_its_own_tilings(tmp_path):
    import dataclasses
    c910 = get_chip("910")
    assert search.chip_key(c910) == "910"
    faster = dataclasses.replace(c910, clock_ghz=2.0)
    assert search.chip_key(faster).startswith("910@") and search.chip_key(faster) != "910"


def test_functional_bench_row_compares_with_numpy_on_both_thread_settings():
    """The functional row of `npulab bench kernels` (run small here): the simulator's product
    equals numpy's float32 one to fp32 rounding, and both ratios are measured."""
    from npulab.bench import matmul as bench
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


def test_the_cache_ages_its_oldest_entries_past_its_size_limit(cache_file, monkeypatch):
    entry = {"tiles": {"tile_m": 128}, "cycles": 1, "note": "x" * 400}
    for i in range(6):
        search.CACHE.put(f"k{i}", entry)
    assert list(search.CACHE.entries()) == [f"k{i}" for i in range(6)]
    size = cache_file.stat().st_size
    monkeypatch.setenv(search.MAX_SIZE_ENV, str(size * 0.5 / 2**20))      # half the file, in MB
    before = search.CACHE.aged
    search.CACHE.put("k6", entry)
    kept = list(search.CACHE.entries())
    assert kept[-1] == "k6" and kept == sorted(kept, key=lambda k: int(k[1:]))   # the newest stay
    assert len(kept) < 7 and search.CACHE.aged - before == 7 - len(kept)
    assert cache_file.stat().st_size <= size * 0.5 * search.REMAIN_RATIO + 1
    search.CACHE.put("k3", entry)                          # a rewritten entry counts as new
    assert list(search.CACHE.entries())[-1] == "k3"
    monkeypatch.setenv(search.MAX_SIZE_ENV, "-1")          # -1: no ageing, as in CANN
    held = len(search.CACHE.entries())
    for i in range(7, 12):
        search.CACHE.put(f"k{i}", entry)
    assert len(search.CACHE.entries()) == held + 5 and cache_file.stat().st_size > size * 0.5


@pytest.mark.parametrize("raw", ["lots", "0", "-5"])
def test_a_bad_cache_size_limit_is_refused(monkeypatch, raw):
    monkeypatch.setenv(search.MAX_SIZE_ENV, raw)
    with pytest.raises(search.ArgumentError, match=search.MAX_SIZE_ENV):
        search.CACHE.put("k", {"tiles": {}})


def test_an_isolated_cache_is_empty_and_gives_the_old_one_back(cache_file, tmp_path):
    search.CACHE.put("kept", {"tiles": {}})
    search.CACHE.memo("pick", "k", lambda: 1)
    with search.CACHE.isolated(tmp_path / "fresh.json"):
        assert search.CACHE.entries() == {} and ("pick", "k") not in search.CACHE.memory
        search.CACHE.put("new", {"tiles": {}})
    assert search.CACHE.path() == cache_file and "kept" in search.CACHE.entries() and "new" not in search.CACHE.entries()
    assert search.CACHE.memory[("pick", "k")] == 1
