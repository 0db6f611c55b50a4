"""Every error npulab raises on purpose.

Each one teaches: it names the operation and the argument, the value received, the value
expected, the rule, and where possible a fix. All derive from :class:`NpuError`, so a learner can
catch them together; each also derives from the built-in error a Python user would expect
(``ValueError`` for bad values, ``RuntimeError`` for a kernel that cannot run).
"""


class NpuError(Exception):
    """Base class of every npulab error."""


class ArgumentError(NpuError, ValueError):
    """An argument has a value the function does not take (a mode, a count, a name, a setting)."""


class ArgumentTypeError(NpuError, TypeError):
    """An argument is of a type the function does not take (a kernel that is not callable)."""


class ContextError(NpuError, RuntimeError):
    """A kernel-language call made outside a kernel that ``launch`` runs."""


class ExportError(NpuError, RuntimeError):
    """What an export would write breaks a rule of its target (an offline page fetching a URL)."""


class ChipFileError(NpuError, ValueError):
    """A chip description file is missing, unreadable, or has a bad field."""


class ShapeError(NpuError, ValueError):
    """A tensor's shape, dtype or format is not what an operation expects."""


class AlignmentError(NpuError, ValueError):
    """An address or a length breaks a buffer's alignment rule."""


class CoreTypeError(NpuError, ValueError):
    """A kernel uses a unit or buffer its core type does not have (L1 or the cube on an AIV core)."""


class DataPathError(NpuError, ValueError):
    """An instruction moves data along a path the chip does not have (FixPipe on a chip whose
    cube output leaves L0C through the vector unit)."""


class BufferOverflowError(NpuError, MemoryError):
    """An allocation does not fit into an on-chip buffer."""


class SyncError(NpuError, ValueError):
    """A flag, event id or queue is used against the rules."""


class DeadlockError(NpuError, RuntimeError):
    """Some pipe waits on a flag that can never be set.

    ``blocked`` lists the indices (in the core's instruction stream) of the instructions that
    could not start: the head of every stalled pipe, and the scalar unit's next instruction.
    """

    def __init__(self, message: str, blocked=()):
        super().__init__(message)
        self.blocked = list(blocked)


class RaceError(NpuError, RuntimeError):
    """Two pipes touch the same bytes without being ordered."""


class InstructionBudgetError(NpuError, RuntimeError):
    """A kernel issued more instructions than the launch allows (a runaway loop)."""


class GraphError(NpuError, ValueError):
    """A graph breaks a rule of the IR: a value read before it is written, a name used twice, an
    op type no schema knows, inputs an op cannot take. The message names the node."""


class PlanError(NpuError, RuntimeError):
    """A memory plan breaks its rule: two tensors live at the same time on common bytes, or an
    offset or size off the plan's alignment. The message names the tensors and their bytes."""


class UnsupportedOpError(NpuError, NotImplementedError):
    """No kernel is registered for an op type (message begins ``Op type not supported:``)."""


class DeviceMemoryError(NpuError, MemoryError):
    """A device memory allocation (``runtime.Device.malloc``, aclrtMalloc) cannot be met: the
    device is out of memory, or a HUGE_ONLY request finds too few free 2 MB huge pages."""


class DevicePointerError(NpuError, ValueError):
    """A device pointer that is not a live allocation of this device: freed already (a double
    free), never allocated, another device's, or an offset past its buffer."""


class MemcpyError(NpuError, ValueError):
    """A copy (``runtime.Device.memcpy``, aclrtMemcpy) breaks a rule: more bytes than ``dst_max``
    or than a buffer holds, or a ``kind`` that does not match where its pointers live."""


class OfflineModelError(NpuError, ValueError):
    """An offline model file (the .om analog, ``graph.offline``) is not one npulab can read:
    missing, truncated, corrupted (checksum), of another magic or format version; or what a
    write was given cannot be stored without pickle (object arrays)."""
