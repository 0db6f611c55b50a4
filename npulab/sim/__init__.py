"""The simulated device, below the kernel language.

* :mod:`~.isa`: the closed instruction set (pipes, kinds, opcodes);
* :mod:`~.cost`: what each instruction costs (copies, mmad, vector, energy) and the roofline;
* :mod:`~.memory`: the on-chip buffers and their allocation log;
* :mod:`~.stream`: one core's instruction stream (the Cython ``npulab._stream`` has the same
  signatures); :mod:`~.timeline`: the scheduler's readable specification (``npulab._timeline``);
* :mod:`~.gm`: GM traffic, the shared HBM and the L2 in front of it;
* :mod:`~.races`: the race checker;
* :mod:`~.device`: the cores of one launch, and the run that turns their streams into a
  :class:`~npulab.sim.trace.Trace` (:mod:`~.trace`).
"""
