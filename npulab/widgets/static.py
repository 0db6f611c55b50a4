"""The views without a kernel, for the static book: each view as a matplotlib animation exported
with ``to_jshtml`` (the frames as embedded PNGs and the scrubber's own script), with nothing
fetched from the network.

matplotlib's template links its button icons from a CDN; :func:`jshtml` drops that link and
writes the buttons as plain characters, then checks that no http(s) address is left.
"""
from __future__ import annotations

import hashlib
import re

import numpy as np
from matplotlib import animation

from ..errors import ArgumentError, ExportError
from ..plot.gantt import GanttData, GanttView
from ..plot.occupancy import OccupancyData, OccupancyFigure, figure_height, used_buffers
from ._render import new_figure

#: matplotlib's Font Awesome icon classes -> characters that need no font download.
ICONS = {"fa-minus": "&#8722;", "fa-fast-backward": "&#9198;", "fa-step-backward": "&#9664;|",
         "fa-play fa-flip-horizontal": "&#9664;", "fa-pause": "&#10074;&#10074;",
         "fa-play": "&#9654;", "fa-step-forward": "|&#9654;", "fa-fast-forward": "&#9197;",
         "fa-plus": "+"}
STATIC_DPI = 72


def jshtml(anim: animation.Animation, *, fps: float = 5) -> str:
    """The animation as self-contained HTML (frames + scrubber), without network references."""
    text = anim.to_jshtml(fps=fps, default_mode="once")
    text = re.sub(r"<link[^>]*font-awesome[^>]*>", "", text)
    text = re.sub(r'<i class="fa ([^"]+)"></i>',
                  lambda m: ICONS.get(m.group(1), m.group(1).replace("fa-", "")), text)
    # matplotlib names the scrubber's elements with a random uuid; a hash of the content
    # names them instead, so a notebook that stores this output is the same on every run
    ids = set(re.findall(r"anim([0-9a-f]{32})", text))
    if len(ids) == 1:
        (old,) = ids
        stable = hashlib.sha256(text.replace(old, "").encode()).hexdigest()[:32]
        text = text.replace(old, stable)
    left = re.findall(r"https?://\S+", text)
    if left:
        raise ExportError(f"jshtml: the exported animation still refers to {left[:3]}; "
                          f"the static book must not fetch anything")
    return text


def _html(text: str):
    from IPython.display import HTML
    return HTML(text)


def occupancy_frames(data: OccupancyData, frames: int) -> list[int]:
    """``frames`` cycles evenly over the run, plus each used buffer's peak time."""
    if frames < 2:
        raise ArgumentError(f"occupancy_static: frames must be at least 2, got {frames}")
    ts = set(np.linspace(0, max(0, data.cycles - 1), frames).astype(int).tolist())
    ts |= {s.peak_time for s in data.buffers.values() if s.peak > 0}
    return sorted(ts)


def occupancy_static(trace, core: int = 0, frames: int = 40, *, buffers="used", fps: float = 5):
    """The occupancy view as an HTML scrubber (IPython HTML object) for the static book.

    trace: the Trace. core: which core. frames: evenly spaced cycles shown (each buffer's peak
    time is added). buffers: which buffers (default those the kernel used). fps: play speed.
    """
    data = OccupancyData(trace, core)
    fig = new_figure(9, figure_height(len(used_buffers(data, buffers))))
    fig.set_dpi(STATIC_DPI)
    view = OccupancyFigure(data, fig=fig, buffers=buffers)
    ts = occupancy_frames(data, frames)
    anim = animation.FuncAnimation(fig, lambda i: view.set_time(ts[i]), frames=len(ts), repeat=False)
    return _html(jshtml(anim, fps=fps))


def gantt_windows(cycles: int, frames: int, window: int | None) -> list[tuple[int, int]]:
    """(start, end) of ``frames`` windows of ``window`` cycles sliding over [0, cycles]; the
    first frame is the whole run."""
    if frames < 2:
        raise ArgumentError(f"gantt_static: frames must be at least 2, got {frames}")
    cycles = max(1, cycles)
    window = min(cycles, window or max(1, cycles // 8))
    starts = np.linspace(0, cycles - window, frames - 1).astype(int)
    return [(0, cycles)] + [(int(s), int(s) + window) for s in starts]


def gantt_static(trace, core: int = 0, frames: int = 20, *, window: int | None = None, fps: float = 2):
    """The pipe gantt as an HTML scrubber: first the whole run, then a ``window``-cycle window
    (default an eighth of the run) sliding from start to end."""
    data = GanttData(trace, core)
    fig = new_figure(10, 3.2)
    fig.set_dpi(STATIC_DPI)
    fig.subplots_adjust(left=0.09, right=0.99, top=0.9, bottom=0.2)
    view = GanttView(fig.add_subplot(), data)
    wins = gantt_windows(data.cycles, frames, window)
    anim = animation.FuncAnimation(fig, lambda i: view.set_range(*wins[i]), frames=len(wins), repeat=False)
    return _html(jshtml(anim, fps=fps))


def tiling_static(case, knob: str, values=None, *, fps: float = 2, **fixed):
    """The tiling explorer as an HTML scrubber over one knob.

    case: a TilingCase. knob: the knob that moves (e.g. "tile"). values: its values (default
    up to 12 spread over the slider's range). fixed: the other knobs' values.
    """
    from .tiling import draw_preview
    from .tiling_cases import explore
    params = {p.name: p for p in case.params}
    if knob not in params:
        raise ArgumentError(f"tiling_static: {case.name} has no knob {knob!r}; knobs: {sorted(params)}")
    if values is None:
        allv = params[knob].values
        values = [allv[i] for i in sorted(set(np.linspace(0, len(allv) - 1, min(12, len(allv))).astype(int)))]
    results = [explore(case, **{**fixed, knob: v}) for v in values]
    fig = new_figure(9, 4.2)
    fig.set_dpi(STATIC_DPI)

    def frame(i):
        res = results[i]
        draw_preview(fig, res, case, resize=False)
        verdict = (f"{res.cycles:,} cycles" if res.fits else
                   "overflow: " + ", ".join(f"{b} over by {o:,} B" for b, o in res.overflows.items())
                   if res.overflows else "overflow")
        fig.text(0.01, 0.005, f"{case.name} {knob}={values[i]}: {verdict}", fontsize=9,
                 color="black" if res.fits else "#b00")

    anim = animation.FuncAnimation(fig, frame, frames=len(results), repeat=False)
    return _html(jshtml(anim, fps=fps))
