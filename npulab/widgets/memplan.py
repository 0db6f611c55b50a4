"""The memory-plan widget: the static memory-plan view with a tensor picker; the picked
tensors are outlined, the rest fade, and a table gives their lifetime, address range and the
tensors they share time with."""
from __future__ import annotations

import html

import ipywidgets as W

from ..plot.memplan import memory_plan, overlaps, plan_tensors
from ..sim.memory import fmt_bytes
from ._render import PngFigure, new_figure


def details_html(plan, names) -> str:
    """A row per picked tensor: lifetime, bytes, and who else is live during it."""
    rows = []
    for t in plan:
        if t.name not in names:
            continue
        others = sorted({u.name for u in plan if u is not t and u.start < t.end and t.start < u.end})
        rows.append(f"<tr><td>{html.escape(t.name)}</td><td>{t.start:,}-{t.end:,}</td>"
                    f"<td>{t.offset:,}-{t.offset + t.size:,} ({fmt_bytes(t.size)})</td>"
                    f"<td>{html.escape(', '.join(others[:8]))}{' ...' if len(others) > 8 else ''}</td></tr>")
    bad = overlaps(plan)
    warn = (f"<p style='color:#b00'>{len(bad)} pair(s) share bytes while both live, e.g. "
            f"{html.escape(' & '.join(bad[0]))}</p>" if bad else "")
    if not rows:
        return warn + "<p>pick tensors to see their lifetime and addresses</p>"
    return (warn + "<table style='font-size:12px'><tr><th>tensor</th><th>live</th><th>bytes</th>"
            "<th>live at the same time</th></tr>" + "".join(rows) + "</table>")


class MemoryPlanWidget(W.VBox):
    """tensors: any plan accepted by :func:`npulab.plot.memplan.plan_tensors`. capacity: bytes
    of the memory (optional). Children: a tensor picker, the picture, the details table."""

    def __init__(self, tensors, *, capacity: int | None = None, time_unit: str = "cycle"):
        self.plan, self.capacity, self.time_unit = plan_tensors(tensors), capacity, time_unit
        names = list(dict.fromkeys(t.name for t in self.plan))
        self.picker = W.SelectMultiple(options=names, rows=min(8, max(2, len(names))),
                                       description="tensors")
        self.image, self.details = W.Image(format="png"), W.HTML()
        self.fig = new_figure(9, 4)
        self.png = PngFigure(self.fig)
        self.picker.observe(lambda ch: self.show(ch["new"]), names="value")
        self.show(())
        super().__init__([W.HBox([self.picker, self.details]), self.image])

    def show(self, names) -> None:
        """Outline ``names`` (a sequence of tensor names) and list their details."""
        self.fig.clear()
        ax = self.fig.add_subplot()
        self.fig.subplots_adjust(left=0.1, right=0.97, top=0.92, bottom=0.13)
        memory_plan(self.plan, capacity=self.capacity, ax=ax, highlight=list(names),
                    time_unit=self.time_unit)
        self.image.value = self.png.render()
        self.details.value = details_html(self.plan, set(names))


def memory_plan_widget(tensors, *, capacity: int | None = None, time_unit: str = "cycle") -> MemoryPlanWidget:
    """The memory-plan widget (see :class:`MemoryPlanWidget`)."""
    return MemoryPlanWidget(tensors, capacity=capacity, time_unit=time_unit)
