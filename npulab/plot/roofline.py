"""The roofline of a chip drawn: attainable FLOPs a second against arithmetic intensity, log-log.

Two roofs per chip, both read from the chip file: the cube's fp16 peak and the vector unit's
fp16 peak; one slope, the GM bandwidth. Operators are points at their intensity, drawn on the
roof of the unit they run on. The model itself (:func:`~npulab.sim.cost.attainable`,
:func:`~npulab.sim.cost.ridge`) is in :mod:`npulab.sim.cost`.
"""
from __future__ import annotations

import numpy as np

from ..arch import DEFAULT_CHIP
from ..chips import get_chip
from ..sim.cost import attainable, peak_tflops

UNIT_STYLE = {"cube": "-", "vector": "--"}


def roofline(chips=(DEFAULT_CHIP,), *, ax=None, points=None, units=("cube", "vector"),
             intensity_range=(1e-2, 1e4)):
    """Draw each chip's roofs on ``ax`` (created if None); returns the Axes.

    chips: names, paths or ChipSpecs. points: {label: (intensity, unit)} drawn on the first
    chip's roof of that unit, labelled. units: which roofs to draw ("cube", "vector").
    """
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    specs = [get_chip(c) for c in chips]
    x = np.logspace(np.log10(intensity_range[0]), np.log10(intensity_range[1]), 400)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, chip in enumerate(specs):
        color = colors[i % len(colors)]
        for unit in units:
            peak = peak_tflops(chip, unit)
            ax.plot(x, attainable(x, peak, chip.gm_bandwidth_gbs), UNIT_STYLE[unit], color=color,
                    label=f"{chip.name} {unit} ({peak:.3g} TFLOPS, {chip.gm_bandwidth_gbs:g} GB/s)")
    if points and specs:
        chip = specs[0]
        for label, (ai, unit) in points.items():
            peak = peak_tflops(chip, unit)
            y = float(attainable(ai, peak, chip.gm_bandwidth_gbs))
            ax.plot([ai], [y], "o", color="black", zorder=5)
            ax.annotate(f"{label}\n{ai:.3g} FLOP/B", (ai, y), textcoords="offset points",
                        xytext=(6, -22), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per GM byte)")
    ax.set_ylabel("attainable TFLOPS (fp16)")
    ax.set_title("Roofline: " + ", ".join(c.name for c in specs))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return ax
