"""npulab bench --model: the naive and optimised builds of a whole network, their ratio and the
ablation, compile and simulate times apart; the command line prints it as a table or JSON."""
import json
import os

import pytest

from npulab.bench.model import NAIVE, OPTIMISATIONS, OPTIMISED, bench_model
from npulab.cli import main
from npulab.errors import ArgumentError
from npulab.kernels import search


@pytest.fixture(scope="module")
def bert():
    return bench_model("bert-base", 1, 2, "910b", seq_len=32)


def test_the_optimised_build_beats_the_naive_one_and_the_ablation_says_by_what(bert):
    r = bert
    assert r["model"] == "bert-base" and r["seq_len"] == 32 and r["iterations"] == 2
    naive, opt = r["naive"], r["optimised"]
    assert naive["build"] == {k: False for k in OPTIMISATIONS} and opt["build"] == {k: True for k in OPTIMISATIONS}
    assert r["speedup"] == pytest.approx(naive["latency_ms"] / opt["latency_ms"]) and r["speedup"] > 1
    assert opt["nodes"] < naive["nodes"]                               # the passes fused
    assert [a["optimisation"] for a in r["ablation"]] == list(OPTIMISATIONS)
    for a in r["ablation"]:
        assert a["speedup_over_naive"] == pytest.approx(naive["latency_ms"] / a["latency_ms"])
    for b in (naive, opt):
        assert b["throughput_samples_per_s"] == pytest.approx(1 / (b["latency_ms"] / 1000))
        assert b["samples_per_j"] == pytest.approx(1 / b["energy_per_sample_j"])
        assert b["power_w"] > 0 and 0 <= b["cube_utilization"] < 1
    assert r["compile_s"] >= 0 and r["simulate_s"] > 0 and r["cold"] is False


def test_a_cold_bench_starts_from_an_empty_cache_and_leaves_the_caller_s(tmp_path):
    before = os.environ.get(search.CACHE_ENV)
    r = bench_model("gpt2", 1, 1, "910", seq_len=16, ablation=False, cold=True)
    assert r["cold"] is True and "ablation" not in r and r["compile_warm_s"] >= 0
    assert os.environ.get(search.CACHE_ENV) == before


def test_the_command_line_prints_json_and_refuses_a_mix(capsys):
    assert main(["bench", "--model", "gpt2", "--seq-len", "16", "--no-ablation", "--json", "--chip", "910b"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["chip"] == "910b" and r["speedup"] > 0
    assert main(["bench", "--model", "gpt2", "--seq-len", "16", "--no-ablation", "--batch_size", "2",
                 "--num_iterations", "3"]) == 0                # the seeds' benchmark.py spellings
    assert "gpt2 batch 2" in capsys.readouterr().out
    assert main(["bench", "sim", "--model", "gpt2"]) == 2
    assert main(["bench"]) == 2
    with pytest.raises(ArgumentError, match="no model"):
        bench_model("vgg16")


def test_builds_name_their_options():
    assert NAIVE.options().tiling == "seed" and NAIVE.options().buffers == 1 and NAIVE.options().memory_mode == 0
    o = OPTIMISED.options()
    assert (o.tiling, o.buffers, o.small_channel, o.memory_mode) == ("searched", 2, True, 2)
