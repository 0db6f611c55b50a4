"""Static matplotlib views of a Trace: pipe gantt, where each pipe's time went, buffer
occupancy, memory plan; what a run's queues and vector pipe did, read off its trace; and
pictures of the storage formats (NZ, NC1HWC0, img2col).

Each drawing function takes the Trace (or plain data, or the shape it pictures) and an optional
Axes or Figure, and returns what it drew into; the interactive widgets in :mod:`npulab.widgets`
redraw these.

=================  ===========================================================================
module             holds
=================  ===========================================================================
``gantt``          the pipe gantt (:func:`gantt`)
``idle``           where each pipe's time went (:func:`pipe_time`, :func:`pipe_time_table`)
``occupancy``      buffer occupancy at a cycle (:func:`occupancy`)
``memplan``        a memory plan as rectangles (:func:`memory_plan`)
``queues``         queue slots, slot sizes, copies in, a buffer's plan (:func:`buffer_plan`)
``vector_pipe``    the vector pipe: one tile's instructions, its time by cause
``formats``        NZ and NC1HWC0 storage, the img2col matrix from L0A
``roofline``       a chip's roofline (:func:`~npulab.plot.roofline.roofline`)
=================  ===========================================================================
"""
from .formats import plot_img2col, plot_nc1hwc0, plot_nz
from .gantt import GanttData, GanttView, gantt
from .idle import pipe_time, pipe_time_table
from .memplan import PlanTensor, memory_plan, overlaps, plan_tensors
from .occupancy import OccupancyData, OccupancyFigure, occupancy
from .queues import buffer_plan, copies_in, queue_slot_bytes, queue_slots
from .vector_pipe import vector_program, vector_time

__all__ = ["GanttData", "GanttView", "gantt", "pipe_time", "pipe_time_table", "PlanTensor",
           "memory_plan", "overlaps", "plan_tensors", "OccupancyData", "OccupancyFigure", "occupancy",
           "queue_slots", "queue_slot_bytes", "copies_in", "buffer_plan", "vector_program", "vector_time",
           "plot_nz", "plot_img2col", "plot_nc1hwc0"]
