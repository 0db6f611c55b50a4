"""Interactive views of a Trace for JupyterLab (plain ipywidgets; figures are rendered to PNG, so
no ipympl is needed), and their kernel-free forms for the static book.

* :func:`occupancy`: buffer occupancy at a cycle (slider, play), occupancy over the run, peaks;
* :func:`gantt`: the pipe gantt with a zoomable cycle range and where each pipe's time went;
* :func:`tiling_explorer`: tiling knobs -> overflow (which buffer, by how much) or cycles,
  utilization and an occupancy preview;
* :func:`memory_plan_widget`: tensors as lifetime x address rectangles, with a picker;
* :func:`occupancy_static`, :func:`gantt_static`, :func:`tiling_static`: HTML scrubbers.
"""
from .gantt import GanttWidget, gantt
from .memplan import MemoryPlanWidget, memory_plan_widget
from .occupancy import OccupancyWidget, occupancy
from .static import gantt_static, occupancy_static, tiling_static
from .tiling import TilingExplorer, tiling_explorer
from .tiling_cases import AddCase, Exploration, MatMulCase, Param, TilingCase, explore

__all__ = ["GanttWidget", "gantt", "MemoryPlanWidget", "memory_plan_widget", "OccupancyWidget",
           "occupancy", "gantt_static", "occupancy_static", "tiling_static", "TilingExplorer",
           "tiling_explorer", "AddCase", "Exploration", "MatMulCase", "Param", "TilingCase", "explore"]
