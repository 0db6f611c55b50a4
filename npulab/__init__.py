"""npulab: learn how NPU operator libraries work, on a simulated Ascend-style NPU.

Layers, lower never importing higher: ``chips`` (chip files) -> ``sim`` (buffers, pipes,
timeline, Trace) -> ``lang`` (the Ascend-C-style kernel language) -> ``kernels`` (ops-nn style
operators: tiling + kernel) -> ``ops`` (the public functional API) -> ``cli``.
"""
from .chips import ChipSpec, chip_names, chips, get_chip, load_chip
from .errors import (AlignmentError, BufferOverflowError, ChipFileError, DeadlockError,
                     InstructionBudgetError, NpuError, RaceError, ShapeError, SyncError,
                     UnsupportedOpError)

__version__ = "0.1.0"

__all__ = ["ChipSpec", "chip_names", "chips", "get_chip", "load_chip", "AlignmentError",
           "BufferOverflowError", "ChipFileError", "DeadlockError", "InstructionBudgetError",
           "NpuError", "RaceError", "ShapeError", "SyncError", "UnsupportedOpError", "__version__"]
