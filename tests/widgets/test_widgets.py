"""The widgets redraw what their controls say, the tiling explorer reports an overflow exactly
when a real launch raises one, and the static scrubbers fetch nothing from the network."""
import matplotlib

matplotlib.use("Agg")

import re

import numpy as np
import pytest

from npulab import BufferOverflowError
from npulab.kernels.elementwise import add_tiling, launch_add
from npulab.plot import OccupancyData, pipe_time
from npulab.sim.memory import fmt_bytes
from npulab.widgets import (AddCase, GanttWidget, OccupancyWidget, TilingCase, TilingExplorer, explore,
                            gantt_static, memory_plan_widget, occupancy_static, tiling_static)
from npulab.widgets.static import gantt_windows, jshtml, occupancy_frames

PNG = b"\x89PNG"


@pytest.fixture(scope="module")
def trace():
    x = np.ones(8192 * 4, np.float16)
    return launch_add(x, x, add_tiling(x.size, x.dtype, "teach"), "teach", "timing")[1]


def test_occupancy_widget_follows_the_slider(trace):
    w = OccupancyWidget(trace, 0)
    assert w.slider.max == w.play.max == trace.core_cycles[0]
    assert bytes(w.image.value).startswith(PNG)
    rng = np.random.default_rng(5)
    data = OccupancyData(trace, 0)
    before = bytes(w.image.value)
    changed = 0
    for t in rng.integers(1, trace.core_cycles[0], 8).tolist():
        w.slider.value = t
        assert w.view.t == t
        assert w.view.fill_text["UB"].get_text().startswith(f"{fmt_bytes(data.at('UB', t))} / 16 KiB")
        changed += bytes(w.image.value) != before
        before = bytes(w.image.value)
    assert changed >= 6                                  # the picture moves with the time
    assert "UB</b> peak" in w.peaks.value and "L1" not in w.peaks.value
    w.core_select.value = 1
    assert w.data.core == 1 and w.slider.max == trace.core_cycles[1]


def test_gantt_widget_zooms_and_tabulates_the_range(trace):
    w = GanttWidget(trace, 0)
    assert w.range.value == (0, trace.core_cycles[0])
    w.range.value = (300, 900)
    assert w.view.ax.get_xlim() == (300.0, 900.0)
    rows = pipe_time(trace, 0, 300, 900)
    vec = rows[5]
    assert vec["pipe"] == "VECTOR"
    top_reason = next(iter(vec["waits"]))
    assert top_reason in w.table.value and f"{vec['busy'] / 600:.0%}" in w.table.value
    before = bytes(w.image.value)
    w.reset.click()
    assert w.range.value == (0, trace.core_cycles[0]) and bytes(w.image.value) != before


@pytest.mark.parametrize("buffer_num", [1, 2, 3])
def test_tiling_explorer_overflows_exactly_when_the_launch_raises(buffer_num):
    case = AddCase(n=4096, chip="teach")
    x = np.ones(4096, np.float16)
    tiles = case.params[0].values
    verdicts = []
    for tile in tiles[::3] + tiles[-1:]:
        res = explore(case, tile=tile, buffer_num=buffer_num)
        try:
            launched = launch_add(x, x, add_tiling(x.size, x.dtype, "teach", buffer_num, tile), "teach", "timing")[1]
            raised = False
        except BufferOverflowError:
            raised = True
        assert bool(res.overflows) == raised, (tile, buffer_num, res)
        assert res.error is None
        if raised:
            assert res.overflows["UB"] == res.demands["UB"] - 16 * 1024 > 0
        else:
            assert res.cycles == launched.cycles and res.ratios == launched.pipe_ratios()
        verdicts.append(raised)
    assert True in verdicts and False in verdicts         # the sweep crosses the boundary


def test_tiling_explorer_widget_shows_cycles_or_the_overflow():
    w = TilingExplorer(AddCase(n=8192, chip="teach"))
    assert w.result.fits and f"{w.result.cycles:,} cycles" in w.status.value
    big = w.case.params[0].values[-1]
    w.set(tile=big, buffer_num=4)
    assert not w.result.fits and "UB</b> needs" in w.status.value and "over by" in w.status.value
    assert bytes(w.image.value).startswith(PNG)
    with pytest.raises(ValueError, match="unknown knob"):
        explore(w.case, tiles=64)


def test_explore_reports_an_overflow_the_demand_model_missed():
    class Underestimates(AddCase):
        def demands(self, tile, buffer_num):
            return {"UB": 0}
    case = Underestimates(n=4096, chip="teach")
    res = explore(case, tile=case.params[0].values[-1], buffer_num=4)
    assert not res.fits and not res.overflows and "UB overflow" in res.error


def test_memory_plan_widget_picks_tensors():
    w = memory_plan_widget([("a", 0, 10, 0, 100), ("b", 5, 20, 100, 50), ("c", 12, 30, 0, 80)], capacity=200)
    w.picker.value = ("b",)
    assert "<td>b</td>" in w.details.value and "a, c" in w.details.value
    assert bytes(w.image.value).startswith(PNG)
    w2 = memory_plan_widget([("a", 0, 10, 0, 100), ("b", 5, 20, 50, 100)])
    assert "share bytes" in w2.details.value


def _frames(html):
    return re.findall(r'frames\[(\d+)\] = "data:image/png;base64,', html)


def test_static_scrubbers_are_self_contained(trace):
    occ = occupancy_static(trace, 0, frames=6).data
    data = OccupancyData(trace, 0)
    assert len(_frames(occ)) == len(occupancy_frames(data, 6)) >= 6
    g = gantt_static(trace, 0, frames=5).data
    assert len(_frames(g)) == 5
    t = tiling_static(AddCase(n=4096, chip="teach"), "tile", [256, 4096], buffer_num=2).data
    assert len(_frames(t)) == 2
    for html in (occ, g, t):
        assert not re.search(r"https?:", html)
        assert 'type="range"' in html and "font-awesome" not in html
    assert gantt_windows(1000, 5, 100) == [(0, 1000), (0, 100), (300, 400), (600, 700), (900, 1000)]
    with pytest.raises(ValueError, match="frames"):
        occupancy_static(trace, 0, frames=1)


def test_jshtml_refuses_network_references():
    class Fake:
        def to_jshtml(self, **kw):
            return '<img src="https://example.invalid/x.png">'
    with pytest.raises(RuntimeError, match="must not fetch"):
        jshtml(Fake())


def test_a_new_operator_plugs_in_with_an_adapter(trace):
    class Toy(TilingCase):
        name = "Toy"

        def __init__(self):
            from npulab import get_chip
            self.chip = get_chip("teach")
            self.params = [AddCase(n=4096).params[1]]

        def demands(self, buffer_num):
            return {"L1": 40_000 * buffer_num}

        def run(self, buffer_num):
            return trace
    res = explore(Toy(), buffer_num=2)
    assert res.overflows == {"L1": 80_000 - 64 * 1024}
    assert explore(Toy(), buffer_num=1).cycles == trace.cycles


def test_bench_widgets_reports_json_ready_numbers():
    import json

    from npulab.bench.widgets import GOAL_SECONDS, TARGET_INSTRUCTIONS, bench_widgets
    out = json.loads(json.dumps(bench_widgets(steps=2)))
    assert 0.9 * TARGET_INSTRUCTIONS <= out["instructions"] <= 1.1 * TARGET_INSTRUCTIONS
    assert out["goal_seconds"] == GOAL_SECONDS and isinstance(out["pass"], bool)
    for view in ("occupancy", "gantt"):
        assert 0 < out[f"{view}_seconds_p90"] <= out[f"{view}_seconds_max"]
        assert out[f"{view}_seconds_per_step"] <= out[f"{view}_seconds_max"]
    assert out["pass"] == (max(out["occupancy_seconds_p90"], out["gantt_seconds_p90"]) <= GOAL_SECONDS)


def test_matmul_explorer_overflows_exactly_when_the_launch_raises():
    from npulab.widgets import MatMulCase, tiling_explorer
    case = MatMulCase(m=128, n=128, k=128, chip="teach")
    rng = np.random.default_rng(3)
    verdicts = []
    for _ in range(24):
        vals = {p.name: p.values[int(rng.integers(len(p.values)))] for p in case.params}
        res = explore(case, **vals)
        try:
            launched = case.run(**vals)
            raised = False
        except BufferOverflowError:
            raised = True
        assert bool(res.overflows) == raised, vals
        if raised:
            assert all(res.demands[b] - case.chip.buffer_bytes(b) == over for b, over in res.overflows.items())
        else:
            assert res.cycles == launched.cycles
        verdicts.append(raised)
    assert True in verdicts and False in verdicts
    w = tiling_explorer("matmul", m=128, n=128, k=128, chip="teach")
    assert w.result.fits and set(w.sliders) == {p.name for p in case.params}
