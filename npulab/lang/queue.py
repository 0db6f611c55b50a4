"""The queue calls: alloc_tensor, enque, deque and free_tensor of a kernel's queue (Ascend C's
TQue, :class:`npulab.lang.pipe.Queue`), each turned into the one flag the hardware needs::

    alloc_tensor  producer pipe waits until the slot's last reader freed it (write-after-read)
    enque         producer pipe sets producer->consumer        (the data is written)
    deque         consumer pipe waits on producer->consumer    (read-after-write)
    free_tensor   consumer pipe sets consumer->producer        (the slot may be reused)

This is the readable specification. ``npulab._queue.QueueOps`` (pyx/_queue.pyx) has the same
names, signatures, traces and errors, compiled: every kernel makes these calls once per tile
on every queue. :mod:`npulab.twins` says which of the two a launch's queues use, and
tests/lang/test_queue.py runs one body on both.

The fields the calls read (``held``, ``allocs``, the flag keys ``fwd`` and ``back``, the
instruction names by slot, ...) are set once by the queue's ``_setup`` (npulab.lang.pipe);
the errors are the queue's own methods (``_need_init``, ``_own``, ...), written once there.
"""
from __future__ import annotations

from ..sim.isa import Kind, Op
from ..sim.memory import AllocRecord
from .tensor import LocalTensor, as_dtype, dtype_of

_WORK, _SET, _WAIT = int(Kind.WORK), int(Kind.SET), int(Kind.WAIT)
_OP_MARK, _OP_SET, _OP_WAIT = int(Op.MARK), int(Op.SET_FLAG), int(Op.WAIT_FLAG)


class QueueOps:
    """The four calls a kernel makes on a queue once per tile."""

    def _bind_stream(self, stream) -> None:
        """Issue every flag into ``stream``, the core's (``Stream.issue``)."""
        self._issue = stream.issue

    def alloc_tensor(self, dtype) -> LocalTensor:
        """Take the next free slot (Ascend C ``AllocTensor<T>()``)."""
        if self.core is None:
            self._need_init("alloc_tensor")
        dt = dtype_of(dtype)
        held = self.held
        slot = self.allocs % self.buffer_num
        if held[slot]:
            if all(held):
                self._all_held()
            slot = held.index(False)
        if self.synced and self.allocs >= self.buffer_num:
            # the slot was used before: wait until its consumer freed it
            i = self._issue(self._producer, _WAIT, _OP_WAIT, key=self.back, name=self._n_wait[slot])
            self.waits += 1
        else:
            i = self._issue(self._producer, _WORK, _OP_MARK, key=-1, name=self._n_alloc[slot])
        self.allocs += 1
        held[slot] = True
        offset, owner = self._slots[slot]
        rec = AllocRecord(self._buffer_name, owner, offset, self.slot_bytes, i)
        self.buffer.log.append(rec)
        self.records[slot] = rec
        # a LocalTensor holds nothing but where the slot is: one per (slot, dtype) serves every
        # allocation of the slot (ownership is checked by slot, never by identity)
        key = (slot, dt)
        t = self._tensors.get(key)
        if t is None:
            t = self._tensors[key] = LocalTensor(self.buffer, offset, dt, self.slot_bytes // dt.itemsize,
                                                 self.position, self.name, self, slot)
        return t

    def enque(self, t: LocalTensor) -> None:
        """Hand a written tensor to the consumer pipe (Ascend C ``EnQue``)."""
        if self.core is None:
            self._need_init("enque")
        if getattr(t, "queue", None) is not self or not self.held[t.slot]:
            self._own(t, "enque")
        if self.synced:
            self._issue(self._producer, _SET, _OP_SET, key=self.fwd, name=self._n_enque[t.slot])
        self.enqueued.append(t)

    def deque(self, dtype=None) -> LocalTensor:
        """Take the oldest enqueued tensor; the consumer pipe waits until it is written."""
        if self.core is None:
            self._need_init("deque")
        if not self.enqueued:
            self._nothing_enqueued()
        t = self.enqueued.popleft()
        if dtype is not None and as_dtype(dtype) != t.dtype:
            t = t.reinterpret_cast(dtype)
        if self.synced:
            self._issue(self._consumer, _WAIT, _OP_WAIT, key=self.fwd, name=self._n_deque[t.slot])
        return t

    def free_tensor(self, t: LocalTensor) -> None:
        """Give the slot back to the producer (Ascend C ``FreeTensor``)."""
        if self.core is None:
            self._need_init("free_tensor")
        if getattr(t, "queue", None) is not self or not self.held[t.slot]:
            self._own(t, "free_tensor")
        slot = t.slot
        if self.enqueued:
            for e in self.enqueued:
                if e.slot == slot:
                    self._still_enqueued(t)
        if self.synced:
            i = self._issue(self._consumer, _SET, _OP_SET, key=self.back, name=self._n_free[slot])
            self.frees += 1
        else:
            i = self._issue(self._consumer, _WORK, _OP_MARK, key=-1, name=self._n_free[slot])
        self.held[slot] = False
        self.records.pop(slot).released = i


__all__ = ["QueueOps"]
