"""npulab.bench.micro: AIBench's cube and vector microbenchmarks (C1), as rows."""
import pytest

from npulab import get_chip
from npulab.bench import micro


@pytest.fixture(scope="module")
def rows():
    return micro.cube("910"), micro.vector("910")


def test_rows_say_what_ran_and_how_it_compares_with_the_peak(rows):
    cube, vector = rows
    chip = get_chip("910")
    for row in rows:
        assert row["chip"] == "910" and row["iterations"] == 100 and row["run"]
        assert 0 < row["utilization"] <= 1
    assert cube["blocks"] == 1 and vector["blocks"] == 30     # as the TIK sources launch them
    assert cube["peak_tflops"] == chip.peak_fp16_tflops
    assert cube["utilization"] == pytest.approx(cube["tflops"] / cube["peak_tflops"])
    assert vector["peak_gflops"] == pytest.approx(chip.ai_cores * 128 * chip.clock_ghz)
    assert vector["utilization"] == pytest.approx(vector["gflops"] / vector["peak_gflops"])
    # 30 of 32 cores run the vector test: it cannot pass 30/32 of the peak
    assert vector["utilization"] <= 30 / 32
    # the cube test's time is its loads and mmads: no more cube work than the cube's time
    assert cube["pipe_ratios"]["mac_ratio"] == pytest.approx(cube["utilization"], rel=1e-6)
    assert cube["tflops"] == max(r["tflops"] for r in cube["sweep"])


def test_small_instructions_and_small_tiles_cost_more(rows):
    cube, vector = rows
    by_repeats = {r["repeats"]: r["gflops"] for r in vector["sweep"]}
    assert by_repeats[1] < by_repeats[8] < by_repeats[255]
    by_size = {r["size"]: r["tflops"] for r in cube["sweep"]}
    assert by_size[32] < by_size[160]
