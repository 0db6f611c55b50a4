"""Tensors of the kernel language: GlobalTensor over GM, LocalTensor inside an on-chip buffer.

``Position`` names where a LocalTensor lives, as in Ascend C (``TPosition``); each position
belongs to one physical buffer and has a producer pipe and a consumer pipe, which is what a
queue at that position synchronises.
"""
from __future__ import annotations

from enum import Enum

import numpy as np

from ..errors import ShapeError
from ..formats import PENDING as _PENDING, sync as _sync
from ..sim.isa import Pipe

DTYPES = {np.dtype(t) for t in (np.float16, np.float32, np.int8, np.uint8, np.int16, np.int32)}


class Position(Enum):
    """(buffer, producer pipe, consumer pipe) of each TPosition. CO1 and CO2 are FixPipe's on a
    chip whose cube output leaves through FixPipe; on one whose output goes through UB (the 910
    and 310, ``[cube] output_path``) the vector pipe takes FixPipe's place: :func:`pipes_of`."""
    VECIN = ("UB", Pipe.MTE2, Pipe.V)
    VECOUT = ("UB", Pipe.V, Pipe.MTE3)
    VECCALC = ("UB", Pipe.V, Pipe.V)
    A1 = ("L1", Pipe.MTE2, Pipe.MTE1)
    B1 = ("L1", Pipe.MTE2, Pipe.MTE1)
    A2 = ("L0A", Pipe.MTE1, Pipe.M)
    B2 = ("L0B", Pipe.MTE1, Pipe.M)
    CO1 = ("L0C", Pipe.M, Pipe.FIX)
    CO2 = ("UB", Pipe.FIX, Pipe.MTE3)

    @property
    def buffer(self) -> str:
        return self.value[0]

    @property
    def producer(self) -> Pipe:
        return self.value[1]

    @property
    def consumer(self) -> Pipe:
        return self.value[2]


def pipes_of(position: Position, output_path: str) -> tuple[Pipe, Pipe]:
    """(producer, consumer) of a queue at ``position`` on a chip whose ``[cube] output_path`` is
    ``output_path``: CO1 (L0C) is read by the vector pipe and CO2 (UB) written by it when the
    cube's result leaves L0C through UB (DataCopy CO1 -> CO2 runs on PIPE_V), by FixPipe else."""
    producer, consumer = position.producer, position.consumer
    if output_path != "fixpipe":
        if position is Position.CO1:
            consumer = Pipe.V
        elif position is Position.CO2:
            producer = Pipe.V
    return producer, consumer


VECIN, VECOUT, VECCALC = Position.VECIN, Position.VECOUT, Position.VECCALC
A1, B1, A2, B2, CO1, CO2 = Position.A1, Position.B1, Position.A2, Position.B2, Position.CO1, Position.CO2


def as_whole(value, what: str, name: str = "count", positive: bool = False) -> int:
    """``value`` as an int, when it is a whole number (a Python or numpy integer, or a float
    with no fraction) and, with ``positive``, at least 1; anything else, bools and strings
    included, is a ShapeError naming ``what`` and ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ShapeError(f"{what}: {name} must be a whole number, got {value!r} ({type(value).__name__})")
    if isinstance(value, (float, np.floating)) and not float(value).is_integer():
        raise ShapeError(f"{what}: {name} must be a whole number, got {value!r}")
    n = int(value)
    if positive and n <= 0:
        raise ShapeError(f"{what}: {name} must be positive, got {n}")
    return n


def as_dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in DTYPES:
        raise ShapeError(f"dtype {dt} is not supported; expected one of "
                         f"{', '.join(sorted(str(d) for d in DTYPES))}")
    return dt


#: the answers of :func:`dtype_of`, by argument (the compiled queue calls read it directly)
DTYPES_SEEN: dict = {}


def dtype_of(dtype) -> np.dtype:
    """:func:`as_dtype`, remembered per argument (alloc_tensor runs once per tile)."""
    try:
        return DTYPES_SEEN[dtype]
    except (KeyError, TypeError):
        dt = as_dtype(dtype)
        try:
            DTYPES_SEEN[dtype] = dt
        except TypeError:               # an unhashable argument: not remembered
            pass
        return dt


class _Elements:
    """What a GM and a local tensor share: ``size`` elements of ``dtype``."""

    def __len__(self) -> int:
        return self.size

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


class GlobalTensor(_Elements):
    """A 1-D window onto a GM allocation (Ascend C ``GlobalTensor<T>``).

    ``root`` names the allocation; ``offset`` and ``size`` are in elements. In timing-only
    mode ``data`` may be None: only shapes and bytes matter then.
    """

    def __init__(self, data=None, *, name: str = "gm", dtype=None, size: int | None = None,
                 _root=None, _offset: int = 0, _borrow: bool = False):
        if _root is not None:
            self.root, self.name, self.dtype = _root, _root.name, _root.dtype
            self.offset, self.size = _offset, size
            return
        self.root, self.name, self.offset = self, name, 0
        self._borrowed = False
        if data is not None:
            arr = np.ascontiguousarray(data).reshape(-1)
            if _borrow and np.may_share_memory(arr, data):
                # the caller's bytes, read until something writes them (then copied: writable())
                arr = arr.view()
                arr.flags.writeable = False
                self._borrowed = True
            self.dtype = as_dtype(arr.dtype)
            self._data, self.size = arr, arr.size
        else:
            if dtype is None or size is None:
                raise ShapeError("GlobalTensor needs either data or both dtype= and size=")
            self.dtype, self._data, self.size = as_dtype(dtype), None, int(size)

    @property
    def data(self) -> np.ndarray | None:
        """The whole allocation's elements (the root's array; None in timing-only mode)."""
        if _PENDING:                        # moves still queued for the worker (formats.sync)
            _sync()
        return self.root._data

    @property
    def borrowed(self) -> bool:
        """The allocation still reads its creator's array (nothing has written it yet)."""
        return self.root._borrowed

    def writable(self) -> np.ndarray | None:
        """The allocation's array, ready to be written: a borrowed array is copied first (copy
        on write), so a launch never writes the caller's numpy array."""
        r = self.root
        if _PENDING:
            _sync()
        if r._borrowed:
            r._data, r._borrowed = r._data.copy(), False
        return r._data

    @classmethod
    def empty(cls, size: int, dtype, name: str = "gm") -> "GlobalTensor":
        """A GM tensor with a size and dtype but no contents (timing-only runs)."""
        return cls(name=name, dtype=dtype, size=size)

    def set_global_buffer(self, src: "GlobalTensor", offset: int = 0, size: int | None = None) -> "GlobalTensor":
        """Ascend C ``SetGlobalBuffer(ptr + offset, size)``: make this tensor a window of ``src``."""
        view = src[offset: offset + size if size is not None else src.size]
        self.__dict__.update(view.__dict__)
        return self

    def __getitem__(self, key) -> "GlobalTensor":
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise ShapeError(f"GlobalTensor '{self.name}' takes a contiguous slice like t[a:b], got {key!r}")
        start, stop, _ = key.indices(self.size)
        return GlobalTensor(_root=self.root, _offset=self.offset + start, size=max(0, stop - start))

    def byte_range(self, count: int) -> tuple[str, int, int]:
        lo = self.offset * self.itemsize
        return (f"GM:{self.name}", lo, lo + count * self.itemsize)

    def numpy(self, write: bool = False) -> np.ndarray | None:
        """The elements of this window (a view), or None in timing-only mode; ``write=True``
        for a view to write through (see :meth:`writable`)."""
        data = self.writable() if write else self.data
        return None if data is None else data[self.offset: self.offset + self.size]

    def __repr__(self) -> str:
        return f"GlobalTensor('{self.name}'[{self.offset}:{self.offset + self.size}], {self.dtype})"


class LocalTensor(_Elements):
    """A typed window into an on-chip buffer (Ascend C ``LocalTensor<T>``).

    ``offset`` is in bytes from the buffer's start, ``size`` in elements.
    """

    def __init__(self, buffer, offset: int, dtype, size: int, position: Position, owner: str,
                 queue=None, slot: int = -1):
        self.buffer, self.offset, self.dtype, self.size = buffer, offset, np.dtype(dtype), size
        self.position, self.owner, self.queue, self.slot = position, owner, queue, slot

    def __getitem__(self, key) -> "LocalTensor":
        """``t[a:b]`` is the sub-tensor from element a (Ascend C ``t[a]``); its address must
        stay 32-byte aligned."""
        if isinstance(key, int):
            key = slice(key, None)
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise ShapeError(f"LocalTensor '{self.owner}' takes a contiguous slice like t[a:b], got {key!r}")
        start, stop, _ = key.indices(self.size)
        offset = self.offset + start * self.dtype.itemsize
        self.buffer.check_aligned(offset, f"slice [{start}:] of '{self.owner}'")
        return LocalTensor(self.buffer, offset, self.dtype, max(0, stop - start), self.position,
                           self.owner, self.queue, self.slot)

    def reinterpret_cast(self, dtype) -> "LocalTensor":
        dt = as_dtype(dtype)
        return LocalTensor(self.buffer, self.offset, dt, self.size * self.dtype.itemsize // dt.itemsize,
                           self.position, self.owner, self.queue, self.slot)


    def byte_range(self, count: int) -> tuple[str, int, int]:
        return (self.buffer.name, self.offset, self.offset + count * self.dtype.itemsize)

    def numpy(self) -> np.ndarray | None:
        """The elements (a view into the buffer's bytes), or None in timing-only mode."""
        if self.buffer.data is None:
            return None
        flush = getattr(self.buffer, "pending_flush", None)   # deferred mmads into L0C (lang/cube.py)
        if flush is not None:
            flush(self.offset, self.offset + self.nbytes)
        return self.buffer.data[self.offset: self.offset + self.nbytes].view(self.dtype)

    def __repr__(self) -> str:
        return (f"LocalTensor('{self.owner}' at {self.buffer.name}+{self.offset}, {self.size} x "
                f"{self.dtype})")
