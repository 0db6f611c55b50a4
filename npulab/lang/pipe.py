"""TPipe, TQue and TBuf: on-chip memory handed out in slots, and the flags that queues set.

A queue at a position carries data from the position's producer pipe to its consumer pipe and
turns each call into exactly the flags the hardware needs::

    alloc_tensor  producer pipe waits until the slot's last reader freed it (write-after-read)
    enque         producer pipe sets producer->consumer        (the data is written)
    deque         consumer pipe waits on producer->consumer    (read-after-write)
    free_tensor   consumer pipe sets consumer->producer        (the slot may be reused)

With ``buffer_num=2`` the producer fills one slot while the consumer reads the other: double
buffering needs nothing more than that. The four calls themselves are in :mod:`npulab.lang.queue`
(and compiled, ``npulab._queue``); this module sets queues up and hands out the memory.
"""
from __future__ import annotations

from collections import deque as _fifo

from .. import _queue as _cython_calls
from .. import twins
from ..arch import round_up
from ..errors import ArgumentError, ArgumentTypeError, DeadlockError, ShapeError, SyncError
from ..sim.isa import Kind, Op, flag_key
from ..sim.isa import Pipe as HwPipe
from ..sim.memory import AllocRecord
from . import context
from . import queue as _python_calls
from .context import current
from .tensor import LocalTensor, Position, as_dtype, as_whole, pipes_of

_counter = {"queue": 0, "tbuf": 0}


_QUEUE_CONSTANTS: dict = {}
_QUEUE_CONSTANTS_KEEP = 4096            # distinct (position, name, depth) remembered


def _queue_constants(position: Position, name: str, buffer_num: int, output_path: str) -> tuple:
    """(producer pipe, consumer pipe, slot owner names, instruction names by call and slot) of
    a queue: fixed by its position, name and depth and the chip's cube output path, so worked
    out once for all blocks."""
    key = (position, name, buffer_num, output_path)
    found = _QUEUE_CONSTANTS.get(key)
    if found is None:
        if len(_QUEUE_CONSTANTS) >= _QUEUE_CONSTANTS_KEEP:
            _QUEUE_CONSTANTS.clear()
        names = {what: [fmt.format(name, s) for s in range(buffer_num)] for what, fmt in (
            ("wait", "alloc_tensor {}[{}] (wait free)"), ("alloc", "alloc_tensor {}[{}]"),
            ("enque", "enque {}[{}]"), ("deque", "deque {}[{}]"), ("free", "free_tensor {}[{}]"))}
        found = _QUEUE_CONSTANTS[key] = (*pipes_of(position, output_path),
                                         [f"{name}[{s}]" for s in range(buffer_num)], names)
    return found


def _auto_name(kind: str, position: Position) -> str:
    _counter[kind] += 1
    return f"{position.name.lower()}_{kind}{_counter[kind]}"


class Queue:
    """Ascend C ``TQue<position, depth>``: give it a name so traces and errors can say whose bytes.

    This class holds what a queue is besides its four calls: its slots, flags and names, and
    its errors. The calls (alloc_tensor, enque, deque, free_tensor) are the compiled ones
    (``npulab._queue.QueueOps``) or their readable twin (:class:`npulab.lang.queue.QueueOps`):
    ``Queue(...)`` makes a queue with those of the running launch's side of :mod:`npulab.twins`
    (outside a kernel: the switch's side)."""

    def __new__(cls, position: Position, name: str | None = None):
        if cls is Queue:
            ctx = context.stack()
            cls = _QUEUES[ctx[-1].device.twins if ctx else twins.side()]
        return super().__new__(cls)

    def __init__(self, position: Position, name: str | None = None):
        self.position = Position(position)
        self.name = name or _auto_name("queue", self.position)
        self.core = None
        self.buffer_num = 0

    def _setup(self, core, buffer, offset, buffer_num, slot_bytes):
        if _QUEUES[core.device.twins] is not type(self):
            raise ArgumentError(
                f"queue '{self.name}' was made for the {type(self).twins} twins and this launch runs the "
                f"{core.device.twins} ones (npulab.twins): make the queue inside the kernel")
        self.core, self.buffer, self.base = core, buffer, offset
        self.buffer_num, self.slot_bytes = buffer_num, slot_bytes
        self.held = [False] * buffer_num
        self.allocs = self.frees = self.waits = 0
        self.enqueued = _fifo()
        self.records: dict[int, AllocRecord] = {}
        # what every call issues, worked out once (these run once per tile: they are hot) and
        # the same for every block that sets up a queue of this name and depth
        producer, consumer, owners, self._names = _queue_constants(self.position, self.name, buffer_num,
                                                                   core.device.chip.cube.output_path)
        self.synced = producer != consumer
        if self.synced:
            self.fwd = flag_key(producer, consumer, core.take_event(producer, consumer, self.name))
            self.back = flag_key(consumer, producer, core.take_event(consumer, producer, self.name))
        self._producer, self._consumer = int(producer), int(consumer)
        self._bind_stream(core.stream)        # the four calls issue their flags into it
        names = self._names
        self._n_wait, self._n_alloc, self._n_enque, self._n_deque, self._n_free = (
            names["wait"], names["alloc"], names["enque"], names["deque"], names["free"])
        self._buffer_name = buffer.name
        self._slots = [(offset + s * slot_bytes, owners[s]) for s in range(buffer_num)]
        self._tensors: dict = {}              # (slot, dtype) -> the LocalTensor alloc_tensor hands out

    def _need_init(self, what):
        if self.core is None:
            raise SyncError(f"{what} on queue '{self.name}' before pipe.init_buffer({self.name}, buffer_num, nbytes)")

    def _own(self, t: LocalTensor, what: str) -> None:
        if not isinstance(t, LocalTensor) or t.queue is not self or not self.held[t.slot]:
            raise SyncError(f"{what} on queue '{self.name}': {t!r} is not a tensor this queue "
                            f"allocated and still holds")

    def _all_held(self):
        raise SyncError(f"alloc_tensor on queue '{self.name}': all {self.buffer_num} buffers are "
                        f"held (allocated and not yet freed). free_tensor one first, or give the "
                        f"queue more buffers in init_buffer(buffer_num=...)")

    def _nothing_enqueued(self):
        producer, consumer = HwPipe(self._producer).name, HwPipe(self._consumer).name
        raise DeadlockError(
            f"deadlock on core {self.core.index}: deque on queue '{self.name}' finds nothing "
            f"enqueued, so pipe {consumer} would wait on flag "
            f"{producer}->{consumer} forever (instruction #{len(self.core)}). "
            f"enque a tensor before you deque it.")

    def _still_enqueued(self, t: LocalTensor):
        raise SyncError(f"free_tensor on queue '{self.name}': slot {t.slot} is still enqueued; "
                        f"deque it first")

    def _drain(self) -> None:
        """End of block: the producer consumes the free flags no alloc waited on, as TPipe's
        destruction does, so the next block on this core starts with clean flags."""
        if self.core is None or not self.synced:
            return
        for _ in range(self.frees - self.waits):
            self.core.issue(HwPipe(self._producer), Kind.WAIT, Op.WAIT_FLAG, key=self.back,
                            name=f"release {self.name}")
        self.waits = self.frees
        self.core = None


class _CythonQueue(Queue, _cython_calls.QueueOps):
    twins = "cython"


class _PythonQueue(Queue, _python_calls.QueueOps):
    twins = "python"


_QUEUES = {"cython": _CythonQueue, "python": _PythonQueue}


class TBuf:
    """Ascend C ``TBuf<position>``: scratch space with no queue and no flags."""

    def __init__(self, position: Position = Position.VECCALC, name: str | None = None):
        self.position = Position(position)
        self.name = name or _auto_name("tbuf", self.position)
        self.buffer = None

    def get(self, dtype, size: int | None = None) -> LocalTensor:
        """The whole buffer (or its first ``size`` elements) as a tensor of ``dtype``."""
        if self.buffer is None:
            raise SyncError(f"TBuf '{self.name}'.get before pipe.init_buffer({self.name}, nbytes)")
        dt = as_dtype(dtype)
        n = self.nbytes // dt.itemsize
        if size is not None:
            size = as_whole(size, f"TBuf '{self.name}'.get", "size", positive=True)
            if size > n:
                raise ShapeError(f"TBuf '{self.name}' holds {n} elements of {dt}, asked for {size}")
            n = size
        return LocalTensor(self.buffer, self.offset, dt, n, self.position, self.name)


class TPipe:
    """Ascend C ``TPipe``: hands out on-chip memory to queues and TBufs for one block."""

    def __init__(self):
        ctx = current()
        self.core = ctx.core
        self.queues: list[Queue] = []
        ctx.pipes.append(self)

    def init_buffer(self, queue: "Queue | TBuf", buffer_num: int = 1, nbytes: int | None = None) -> None:
        """Reserve ``buffer_num`` slots of ``nbytes`` each (rounded up to 32-byte blocks) in the
        queue's buffer. For a TBuf: ``init_buffer(tbuf, nbytes)``."""
        if isinstance(queue, TBuf):
            if nbytes is None:
                buffer_num, nbytes = 1, buffer_num
        elif not isinstance(queue, Queue):
            raise ArgumentTypeError(f"init_buffer takes a Queue or a TBuf, got {type(queue).__name__}")
        elif nbytes is None:
            raise ShapeError(f"init_buffer({queue.name}, buffer_num, nbytes): nbytes is missing")
        nbytes = as_whole(nbytes, f"init_buffer({queue.name})", "nbytes", positive=True)
        if isinstance(queue, TBuf):
            buf = self.core.buffers[queue.position.buffer]
            queue.offset = buf.reserve(nbytes, queue.name)
            queue.buffer, queue.nbytes = buf, round_up(nbytes, buf.align)
            i = self.core.issue(HwPipe.V, Kind.WORK, Op.MARK, name=f"init_buffer {queue.name}")
            buf.log.append(AllocRecord(buf.name, queue.name, queue.offset, queue.nbytes, i))
            return
        buffer_num = as_whole(buffer_num, f"init_buffer({queue.name})", "buffer_num")
        if queue.core is not None:
            raise SyncError(f"queue '{queue.name}' is already initialised")
        if buffer_num < 1:
            raise ShapeError(f"init_buffer({queue.name}): buffer_num must be at least 1, got {buffer_num}")
        buf = self.core.buffers[queue.position.buffer]
        slot = round_up(nbytes, buf.align)
        offset = buf.reserve(slot * buffer_num, queue.name)
        queue._setup(self.core, buf, offset, buffer_num, slot)
        self.queues.append(queue)

    def destroy(self) -> None:
        for q in self.queues:
            q._drain()
            q._tensors = {}             # the tensors it handed out point back at it: let them go

