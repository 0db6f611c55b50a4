"""npulab: learn how NPU operator libraries work, on a simulated Ascend-style NPU.

Layers, lower never importing higher (tests/test_layers.py walks every import):

``errors``, ``arch`` (the hardware facts every layer shares), ``twins`` (the one switch between
the Cython core and its readable Python twins)
-> ``chips`` (chip files)
-> ``formats`` (ND, NZ, NC1HWC0 and the byte moves between them)
-> ``sim`` (buffers, pipes, the cost model, the timeline, GM traffic, races, Trace)
-> ``lang`` (the Ascend-C-style kernel language)
-> ``kernels`` (ops-nn style operators: problem, tiling, kernel; the one tiling search)
-> ``ops`` (the functional API, ``ops.nn`` modules, the registry and dispatcher, numpy goldens)
-> ``graph`` (the model IR, importers, zoo, passes, memory plan, compile, the offline model file)
-> ``runtime`` (the ACL analog: device memory, its policies, the memcpy kinds, loaded models)
-> ``tools`` (``npulab atc``, ATC's analog)
-> ``plot`` and ``widgets`` (pictures and ipywidgets over a Trace)
-> ``bench``, ``labs`` (notebook machinery and checkers) and ``cli``.

Every subpackage is reachable from the package's name: ``import npulab`` then ``npulab.ops.add``
(each is imported on first use, so ``import npulab`` itself stays light).
"""
import importlib

from .chips import ChipSpec, chip_names, chips, get_chip, load_chip
from .errors import (AlignmentError, ArgumentError, ArgumentTypeError, BufferOverflowError, ChipFileError,
                     ContextError, CoreTypeError, DataPathError, DeadlockError, DeviceMemoryError,
                     DevicePointerError, ExportError, GraphError, InstructionBudgetError, MemcpyError, NpuError,
                     OfflineModelError, RaceError, ShapeError, SyncError, UnsupportedOpError)

__version__ = "0.1.0"

#: the subpackages and modules ``npulab.<name>`` reaches without an import of its own (the
#: module ``npulab.chips`` is imported above; its name in the package is the function ``chips()``)
SUBMODULES = ("arch", "bench", "cli", "errors", "formats", "graph", "kernels", "labs", "lang", "ops", "plot",
              "runtime", "sim", "tools", "twins", "widgets")


def __getattr__(name: str):
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'npulab' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(SUBMODULES))


__all__ = ["ChipSpec", "chip_names", "chips", "get_chip", "load_chip", "AlignmentError", "ArgumentError",
           "ArgumentTypeError", "BufferOverflowError", "ChipFileError", "ContextError", "CoreTypeError",
           "DataPathError", "DeadlockError", "DeviceMemoryError", "DevicePointerError", "ExportError", "GraphError",
           "InstructionBudgetError", "MemcpyError", "NpuError", "OfflineModelError", "RaceError", "ShapeError", "SyncError", "UnsupportedOpError", "__version__"]
