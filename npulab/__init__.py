"""npulab: learn how NPU operator libraries work, on a simulated Ascend-style NPU.

Layers, lower never importing higher: ``chips`` (chip files) -> ``sim`` (buffers, pipes,
timeline, GM traffic, Trace; ``formats`` beside it: NZ, NC1HWC0 and the deferred moves) ->
``lang`` (the Ascend-C-style kernel language) -> ``kernels`` (ops-nn style operators: tiling +
kernel, and their benches) -> ``ops`` (the functional API, ``ops.nn`` modules, the dispatcher)
-> ``plot`` and ``widgets`` (pictures and ipywidgets over a Trace) -> ``labs`` (notebook
machinery and checkers), ``bench`` and ``cli``.
"""
from .chips import ChipSpec, chip_names, chips, get_chip, load_chip
from .errors import (AlignmentError, BufferOverflowError, ChipFileError, CoreTypeError, DeadlockError,
                     InstructionBudgetError, NpuError, RaceError, ShapeError, SyncError,
                     UnsupportedOpError)

__version__ = "0.1.0"

__all__ = ["ChipSpec", "chip_names", "chips", "get_chip", "load_chip", "AlignmentError",
           "BufferOverflowError", "ChipFileError", "CoreTypeError", "DeadlockError", "InstructionBudgetError",
           "NpuError", "RaceError", "ShapeError", "SyncError", "UnsupportedOpError", "__version__"]
