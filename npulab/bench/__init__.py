"""The benchmarks behind ``npulab bench``: each returns JSON-ready rows. Ratios measured side by
side in one run are what to quote; absolute seconds depend on the machine.

* :mod:`~.sim`: the Cython timeline scheduler against its Python twin (``npulab bench sim``),
  on the instruction streams of :mod:`~.streams` (also the scheduler tests' fixtures);
* :mod:`~.matmul`, :mod:`~.vector`, :mod:`~.conv`: the kernels' cycles and utilization
  (``npulab bench kernels --family matmul|vector|conv``), and the functional simulator's speed
  against numpy;
* :mod:`~.micro`: AIBench's cube and vector microbenchmarks (C1) as kernels in the kernel
  language (``micro.cube(chip)``, ``micro.vector(chip)``), and :mod:`~.calibrate`: the
  calibration set of data/FACTS.md, simulated against the published figures (``npulab bench
  calibrate``);
* :mod:`~.widgets`: one slider step of the trace widgets (``npulab bench widgets``).
"""
