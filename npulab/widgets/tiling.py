"""The tiling explorer: sliders for an operator's tiling knobs; shows which buffer overflows and
by how much, or the simulated cycles, pipe utilization and a buffer occupancy preview.

Operators plug in as :class:`npulab.widgets.tiling_cases.TilingCase` adapters (Add and MatMul
ship; register more in ``CASES``).
"""
from __future__ import annotations

import ipywidgets as W
import numpy as np

from ..errors import ArgumentError
from ..plot.occupancy import OccupancyData, OccupancyFigure, figure_height, used_buffers
from ..sim.memory import fmt_bytes
from ._render import PngFigure, new_figure
from .tiling_cases import AddCase, Exploration, MatMulCase, TilingCase, explore


def status_html(res: Exploration, case: TilingCase) -> str:
    """The verdict as HTML: the overflowing buffers with need / capacity / excess, or cycles,
    time and the busiest pipes."""
    knobs = ", ".join(f"{k}={v}" for k, v in res.values.items())
    if res.overflows:
        rows = "".join(f"<li><b>{b}</b> needs {fmt_bytes(res.demands[b])} but holds "
                       f"{fmt_bytes(res.capacities[b])}: over by {fmt_bytes(over)} ({over:,} B)</li>"
                       for b, over in res.overflows.items())
        return f"<p style='color:#b00'><b>{case.name} ({knobs}) does not fit</b></p><ul>{rows}</ul>"
    if res.error:
        return f"<p style='color:#b00'><b>{case.name} ({knobs}): the launch overflowed</b><br>{res.error}</p>"
    used = ", ".join(f"{b} {fmt_bytes(d)} of {fmt_bytes(res.capacities[b])}" for b, d in res.demands.items())
    busy = sorted(res.ratios.items(), key=lambda kv: -kv[1])[:3]
    return (f"<p><b>{case.name} ({knobs})</b>: {res.cycles:,} cycles ({res.time_us:.2f} us) on "
            f"{case.chip.name}; reserved {used}<br>utilization: "
            + ", ".join(f"{k} {v:.0%}" for k, v in busy) + "</p>")


def draw_preview(fig, res: Exploration, case: TilingCase, resize: bool = True) -> None:
    """Into ``fig``: the occupancy preview (core 0 at its fullest) when the knobs fit, else
    each buffer's demand against its capacity. resize: fit the figure's height to what is
    drawn (off for animation frames, which keep one size)."""
    fig.clear()
    if res.fits:
        data = OccupancyData(res.trace, 0)
        if resize:
            fig.set_size_inches(9, figure_height(len(used_buffers(data, "used"))))
        view = OccupancyFigure(data, fig=fig, buffers="used")
        fullest = max(data.buffers.values(), key=lambda s: s.peak / max(1, s.capacity))
        view.set_time(fullest.peak_time)
        return
    names = list(res.demands)
    if resize:
        fig.set_size_inches(9, 1.4 + 0.5 * len(names))
    ax = fig.add_subplot()
    fig.subplots_adjust(left=0.1, right=0.95, top=1 - 0.35 / fig.get_figheight(),
                        bottom=0.55 / fig.get_figheight())
    y = np.arange(len(names))
    caps = np.array([res.capacities[b] for b in names], float)
    need = np.array([res.demands[b] for b in names], float)
    ax.barh(y, need / caps * 100, color=["#d62728" if b in res.overflows else "#4e79a7" for b in names])
    ax.axvline(100, color="black", lw=1)
    ax.set_yticks(y, names)
    ax.set_xlabel("demand, % of capacity")
    for k, b in enumerate(names):
        ax.text(need[k] / caps[k] * 100, k, f" {fmt_bytes(int(need[k]))} / {fmt_bytes(int(caps[k]))}",
                va="center", fontsize=8)
    ax.set_xlim(0, max(120, need.max() / caps.min() * 100 * 1.25))
    ax.set_title(f"{case.name}: buffer demand vs capacity", fontsize=10)


class TilingExplorer(W.VBox):
    """case: a TilingCase (default Add of 65,536 fp16 elements on the teaching chip).

    Children: a slider per knob, the verdict, the preview picture. ``set(**values)`` moves
    knobs from code; ``result`` is the last :class:`Exploration`.
    """

    def __init__(self, case: TilingCase | None = None):
        self.case = case if case is not None else AddCase()
        self.sliders = {p.name: W.SelectionSlider(options=list(p.values), value=p.value,
                                                  description=p.label or p.name, continuous_update=False,
                                                  style={"description_width": "initial"},
                                                  layout=W.Layout(width="500px"))
                        for p in self.case.params}
        self.status, self.image = W.HTML(), W.Image(format="png")
        self.fig = new_figure(9, 3.2)
        self.png = PngFigure(self.fig)
        for s in self.sliders.values():
            s.observe(lambda _: self.update(), names="value")
        self.update()
        super().__init__(list(self.sliders.values()) + [self.status, self.image])

    def set(self, **values) -> None:
        for k, v in values.items():
            self.sliders[k].value = v

    def update(self) -> Exploration:
        self.result = explore(self.case, **{k: s.value for k, s in self.sliders.items()})
        self.status.value = status_html(self.result, self.case)
        draw_preview(self.fig, self.result, self.case)
        self.image.value = self.png.render()
        return self.result


#: Operators the explorer knows by name: name -> TilingCase class (its kwargs: n, dtype, chip...).
CASES: dict[str, type] = {"add": AddCase, "matmul": MatMulCase}


def tiling_explorer(case: TilingCase | str = "add", **kwargs) -> TilingExplorer:
    """The tiling explorer. case: a TilingCase, or a name in ``CASES`` ("add", "matmul");
    kwargs go to that case's constructor (Add: n, dtype, chip, max_tile; MatMul: m, n, k,
    dtype, chip)."""
    if isinstance(case, str):
        if case.lower() not in CASES:
            raise ArgumentError(f"tiling_explorer: unknown case {case!r}; known: {sorted(CASES)}, "
                             f"or pass a TilingCase")
        case = CASES[case.lower()](**kwargs)
    elif kwargs:
        raise ArgumentError(f"tiling_explorer: options {sorted(kwargs)} only apply when the case is named")
    return TilingExplorer(case)
