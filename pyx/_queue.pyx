# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The queue calls in Cython: alloc_tensor, enque, deque and free_tensor of a kernel's queue
(Ascend C's TQue), which every kernel makes once per tile on every queue. Same names,
signatures, traces and errors as ``npulab.lang.queue.QueueOps`` (the readable specification;
tests/lang/test_queue.py runs one body on both). What it optimises: the flag each call issues
is one C call into the core's stream (``Stream.push``, declared in _stream.pxd), and the
fields are typed. The errors' messages are the queue's own (``_need_init``, ``_own``,
``_all_held``, ``_nothing_enqueued``, ``_still_enqueued`` in npulab.lang.pipe), written once.
"""
from npulab._isa cimport KIND_SET, KIND_WAIT, KIND_WORK, OP_MARK, OP_SET_FLAG, OP_WAIT_FLAG
from npulab._stream cimport Stream

from npulab.lang.tensor import DTYPES_SEEN, LocalTensor, as_dtype, dtype_of
from npulab.sim.memory import AllocRecord


cdef class QueueOps:
    """The fields the four calls read and write (set by the queue's ``_setup``), and the calls."""
    cdef public object core, buffer, position, name, enqueued
    cdef public int buffer_num, allocs, frees, waits, _producer, _consumer
    cdef public bint synced
    cdef public long long fwd, back, slot_bytes
    cdef public list held, _slots, _n_wait, _n_alloc, _n_enque, _n_deque, _n_free
    cdef public dict records, _tensors
    cdef public object _buffer_name
    cdef Stream _s          # the core's stream

    def _bind_stream(self, Stream stream):
        """Issue every flag into ``stream``, the core's."""
        self._s = stream

    def alloc_tensor(self, dtype):
        """Take the next free slot (Ascend C ``AllocTensor<T>()``)."""
        if self.core is None:
            self._need_init("alloc_tensor")
        try:
            dt = DTYPES_SEEN[dtype]
        except (KeyError, TypeError):
            dt = dtype_of(dtype)
        cdef list held = self.held
        cdef int slot = self.allocs % self.buffer_num
        if held[slot]:
            if all(held):
                self._all_held()
            slot = held.index(False)
        if self.synced and self.allocs >= self.buffer_num:
            i = self._s.push(self._producer, KIND_WAIT, OP_WAIT_FLAG, self.back, self._n_wait[slot])
            self.waits += 1
        else:
            i = self._s.push(self._producer, KIND_WORK, OP_MARK, -1, self._n_alloc[slot])
        self.allocs += 1
        held[slot] = True
        offset, owner = self._slots[slot]
        rec = AllocRecord(self._buffer_name, owner, offset, self.slot_bytes, i)
        self.buffer.log.append(rec)
        self.records[slot] = rec
        key = (slot, dt)
        t = self._tensors.get(key)
        if t is None:
            t = self._tensors[key] = LocalTensor(self.buffer, offset, dt, self.slot_bytes // dt.itemsize,
                                                 self.position, self.name, self, slot)
        return t

    def enque(self, t):
        """Hand a written tensor to the consumer pipe (Ascend C ``EnQue``)."""
        if self.core is None:
            self._need_init("enque")
        if getattr(t, "queue", None) is not self or not self.held[t.slot]:
            self._own(t, "enque")
        if self.synced:
            self._s.push(self._producer, KIND_SET, OP_SET_FLAG, self.fwd, self._n_enque[t.slot])
        self.enqueued.append(t)

    def deque(self, dtype=None):
        """Take the oldest enqueued tensor; the consumer pipe waits until it is written."""
        if self.core is None:
            self._need_init("deque")
        if not self.enqueued:
            self._nothing_enqueued()
        t = self.enqueued.popleft()
        if dtype is not None and as_dtype(dtype) != t.dtype:
            t = t.reinterpret_cast(dtype)
        if self.synced:
            self._s.push(self._consumer, KIND_WAIT, OP_WAIT_FLAG, self.fwd, self._n_deque[t.slot])
        return t

    def free_tensor(self, t):
        """Give the slot back to the producer (Ascend C ``FreeTensor``)."""
        if self.core is None:
            self._need_init("free_tensor")
        if getattr(t, "queue", None) is not self or not self.held[t.slot]:
            self._own(t, "free_tensor")
        cdef int slot = t.slot
        if self.enqueued:
            for e in self.enqueued:
                if e.slot == slot:
                    self._still_enqueued(t)
        if self.synced:
            i = self._s.push(self._consumer, KIND_SET, OP_SET_FLAG, self.back, self._n_free[slot])
            self.frees += 1
        else:
            i = self._s.push(self._consumer, KIND_WORK, OP_MARK, -1, self._n_free[slot])
        self.held[slot] = False
        self.records.pop(slot).released = i
