"""Static matplotlib views of a Trace: pipe gantt, where each pipe's time went, buffer
occupancy, memory plan.

Each function takes the Trace (or plain data) and an optional Axes or Figure, and returns what
it drew into; the interactive widgets in :mod:`npulab.widgets` redraw these.
"""
from .gantt import GanttData, GanttView, gantt
from .idle import pipe_time, pipe_time_table
from .memplan import PlanTensor, memory_plan, overlaps, plan_tensors
from .occupancy import OccupancyData, OccupancyFigure, occupancy

__all__ = ["GanttData", "GanttView", "gantt", "pipe_time", "pipe_time_table", "PlanTensor",
           "memory_plan", "overlaps", "plan_tensors", "OccupancyData", "OccupancyFigure", "occupancy"]
