"""Tools on the whole-model layers: :mod:`~.atc` (``npulab atc``, ATC's analog: a model to an
offline model file for one chip). Next here: the profiler, precision compare, quantization,
custom operators, collectives and the host pipeline."""
