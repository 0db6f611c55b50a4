# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A core's instruction stream in Cython: same signatures and results as
``npulab.sim.stream`` (the readable specification; the parity tests run one launch on both).
What it optimises: ``issue`` is one C call (no Python frame), and the numbers go straight
into typed arrays that double when full, so the columns are numpy views, not lists to convert.
"""
import numpy as np
cimport numpy as cnp
from cpython.long cimport PyLong_CheckExact, PyLong_AsLongLong
from cpython.float cimport PyFloat_CheckExact, PyFloat_AS_DOUBLE

cnp.import_array()

COLUMNS = ("pipe", "kind", "op", "dur", "key", "name", "nbytes", "flops", "energy", "route", "lat")
_DTYPES = {"pipe": np.int8, "kind": np.int8, "op": np.int16, "dur": np.int64, "key": np.int64,
           "nbytes": np.int64, "flops": np.int64, "energy": np.float64, "lat": np.int64}


cdef class Budget:
    """How many instructions a launch has issued (``issued``), over all its cores, and how many
    it may (``limit``)."""
    cdef public long long issued, limit

    def __init__(self, limit):
        self.issued = 0
        self.limit = limit


cdef inline long long _int(object v) except? -1:
    """v as an integer column holds it: a float is truncated toward zero (as numpy's cast)."""
    if PyLong_CheckExact(v):
        return PyLong_AsLongLong(v)
    return int(v)


cdef inline double _float(object v) except? -1.0:
    if PyFloat_CheckExact(v):
        return PyFloat_AS_DOUBLE(v)
    return float(v)


cdef class Stream:
    """The stream of one core (see ``npulab.sim.stream.Stream``)."""
    cdef Budget budget
    cdef public bint check_races
    cdef public object over_budget
    cdef public dict accesses
    cdef Py_ssize_t n, cap
    cdef cnp.ndarray _pipe, _kind, _op, _dur, _key, _nbytes, _flops, _energy, _lat
    cdef signed char *pipe_p
    cdef signed char *kind_p
    cdef short *op_p
    cdef long long *dur_p
    cdef long long *key_p
    cdef long long *nbytes_p
    cdef long long *flops_p
    cdef double *energy_p
    cdef long long *lat_p
    cdef list names, routes

    def __init__(self, Budget budget, check_races, over_budget):
        self.budget = budget
        self.check_races = bool(check_races)
        self.over_budget = over_budget
        self.accesses = {}
        self.names, self.routes = [], []
        self.n = 0
        self._grow(256)

    cdef int _grow(self, Py_ssize_t cap) except -1:
        """Arrays of ``cap`` rows holding the ``n`` rows so far."""
        cdef Py_ssize_t n = self.n
        arrays = []
        for name in ("pipe", "kind", "op", "dur", "key", "nbytes", "flops", "energy", "lat"):
            a = np.empty(cap, dtype=_DTYPES[name])
            if n:
                a[:n] = self._array(name)[:n]
            arrays.append(a)
        (self._pipe, self._kind, self._op, self._dur, self._key, self._nbytes, self._flops,
         self._energy, self._lat) = arrays
        self.pipe_p = <signed char*>cnp.PyArray_DATA(self._pipe)
        self.kind_p = <signed char*>cnp.PyArray_DATA(self._kind)
        self.op_p = <short*>cnp.PyArray_DATA(self._op)
        self.dur_p = <long long*>cnp.PyArray_DATA(self._dur)
        self.key_p = <long long*>cnp.PyArray_DATA(self._key)
        self.nbytes_p = <long long*>cnp.PyArray_DATA(self._nbytes)
        self.flops_p = <long long*>cnp.PyArray_DATA(self._flops)
        self.energy_p = <double*>cnp.PyArray_DATA(self._energy)
        self.lat_p = <long long*>cnp.PyArray_DATA(self._lat)
        self.cap = cap
        return 0

    cdef cnp.ndarray _array(self, str name):
        if name == "pipe":
            return self._pipe
        if name == "kind":
            return self._kind
        if name == "op":
            return self._op
        if name == "dur":
            return self._dur
        if name == "key":
            return self._key
        if name == "nbytes":
            return self._nbytes
        if name == "flops":
            return self._flops
        if name == "energy":
            return self._energy
        if name == "lat":
            return self._lat
        raise KeyError(name)

    def __len__(self):
        return self.n

    def issue(self, pipe, kind, op, dur=0, *, key=-1, name="", nbytes=0, flops=0, energy=0.0,
              route="", reads=(), writes=(), lat=0):
        """Append one instruction; return its index in the stream (see the twin)."""
        cdef Py_ssize_t i = self._reserve(name)
        # convert every value first, so that a bad one leaves the stream as it was
        cdef long long v_pipe = _int(pipe), v_kind = _int(kind), v_op = _int(op), v_dur = _int(dur)
        cdef long long v_key = _int(key), v_nbytes = _int(nbytes), v_flops = _int(flops), v_lat = _int(lat)
        cdef double v_energy = _float(energy)
        self._put(i, v_pipe, v_kind, v_op, v_dur, v_key, v_nbytes, v_flops, v_energy, v_lat, name, route)
        if (reads or writes) and self.check_races:
            self.accesses[i] = [(buf, lo, hi, False) for buf, lo, hi in reads] + \
                               [(buf, lo, hi, True) for buf, lo, hi in writes]
        return i

    cdef Py_ssize_t push(self, long long pipe, long long kind, long long op, long long key,
                         object name) except -1:
        """``issue(pipe, kind, op, key=key, name=name)``: an instruction with no duration, bytes
        or accesses (a queue's flag or mark), in one C call."""
        cdef Py_ssize_t i = self._reserve(name)
        self._put(i, pipe, kind, op, 0, key, 0, 0, 0.0, 0, name, "")
        return i

    cdef inline Py_ssize_t _reserve(self, object name) except -1:
        """Count one more instruction against the launch's budget and make room for it;
        return its index."""
        cdef Budget b = self.budget
        b.issued += 1
        if b.issued > b.limit:
            self.over_budget(name)
        if self.n == self.cap:
            self._grow(2 * self.cap)
        return self.n

    cdef inline int _put(self, Py_ssize_t i, long long pipe, long long kind, long long op,
                         long long dur, long long key, long long nbytes, long long flops,
                         double energy, long long lat, object name, object route) except -1:
        """Write instruction i (the next one) into the columns."""
        self.pipe_p[i] = <signed char>pipe
        self.kind_p[i] = <signed char>kind
        self.op_p[i] = <short>op
        self.dur_p[i] = dur
        self.key_p[i] = key
        self.nbytes_p[i] = nbytes
        self.flops_p[i] = flops
        self.energy_p[i] = energy
        self.lat_p[i] = lat
        self.names.append(name)
        self.routes.append(route)
        self.n = i + 1
        return 0

    def column(self, str name):
        """One column, in program order: a view of the typed array for the numbers (settling
        a GM copy writes ``dur`` through it; a later issue may move the array), the list itself
        for ``name`` and ``route``."""
        if name == "name":
            return self.names
        if name == "route":
            return self.routes
        return self._array(name)[:self.n]


# -- the queue calls ---------------------------------------------------------------------------
# alloc_tensor, enque, deque and free_tensor of npulab.lang.pipe.Queue, which every kernel makes
# once per tile on every queue: here, in the stream's module, so that the flag each one issues
# is one C call (Stream.push). ``npulab.lang.pipe.PyQueueOps`` is the readable twin, line for
# line (the labs show that one); tests/test_fast_paths.py runs kernels through both and compares
# their traces and errors. The errors' messages are the Python side's (``_need_init``, ``_own``,
# ``_all_held``, ``_nothing_enqueued``, ``_still_enqueued``), written once.

# what the Python side hands over once (bind): the classes and constants these calls use
cdef object LocalTensor = None, AllocRecord = None, dtype_of = None, as_dtype = None
cdef dict dtype_cache = {}
cdef int WORK = 0, SET = 0, WAIT = 0, OP_MARK = 0, OP_SET = 0, OP_WAIT = 0


def bind_queue(local_tensor, alloc_record, dtype_of_, dtype_cache_, as_dtype_, kinds, ops):
    """Called by npulab.lang.pipe at import: LocalTensor, AllocRecord, its dtype lookup (and
    the dict it remembers answers in), as_dtype, the (WORK, SET, WAIT) kinds and the (MARK,
    SET_FLAG, WAIT_FLAG) opcodes."""
    global LocalTensor, AllocRecord, dtype_of, dtype_cache, as_dtype, WORK, SET, WAIT, OP_MARK, OP_SET, OP_WAIT
    LocalTensor, AllocRecord, dtype_of, as_dtype = local_tensor, alloc_record, dtype_of_, as_dtype_
    dtype_cache = dtype_cache_
    WORK, SET, WAIT = kinds
    OP_MARK, OP_SET, OP_WAIT = ops


cdef class QueueOps:
    """The fields the four calls read and write (set by ``Queue._setup``), and the calls."""
    cdef public object core, buffer, position, name, enqueued, _issue
    cdef public int buffer_num, allocs, frees, waits, _producer, _consumer
    cdef public bint synced
    cdef public long long fwd, back, slot_bytes
    cdef public list held, _slots, _n_wait, _n_alloc, _n_enque, _n_deque, _n_free
    cdef public dict records, _tensors
    cdef public object _buffer_name
    cdef Stream _s          # the core's stream when it is this module's Stream (else None)

    def _bind_stream(self, stream):
        """Issue through ``stream`` directly (one C call a flag) when it is the Cython Stream."""
        self._s = stream if isinstance(stream, Stream) else None

    cdef inline Py_ssize_t _flag(self, long long pipe, long long kind, long long op, long long key,
                                 object name) except -1:
        if self._s is not None:
            return self._s.push(pipe, kind, op, key, name)
        return self._issue(pipe, kind, op, key=key, name=name)

    def alloc_tensor(self, dtype):
        """Take the next free slot (Ascend C ``AllocTensor<T>()``)."""
        if self.core is None:
            self._need_init("alloc_tensor")
        try:
            dt = dtype_cache[dtype]
        except (KeyError, TypeError):
            dt = dtype_of(dtype)
        cdef list held = self.held
        cdef int slot = self.allocs % self.buffer_num
        if held[slot]:
            if all(held):
                self._all_held()
            slot = held.index(False)
        if self.synced and self.allocs >= self.buffer_num:
            i = self._flag(self._producer, WAIT, OP_WAIT, self.back, self._n_wait[slot])
            self.waits += 1
        else:
            i = self._flag(self._producer, WORK, OP_MARK, -1, self._n_alloc[slot])
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
            self._flag(self._producer, SET, OP_SET, self.fwd, self._n_enque[t.slot])
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
            self._flag(self._consumer, WAIT, OP_WAIT, self.fwd, self._n_deque[t.slot])
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
            i = self._flag(self._consumer, SET, OP_SET, self.back, self._n_free[slot])
            self.frees += 1
        else:
            i = self._flag(self._consumer, WORK, OP_MARK, -1, self._n_free[slot])
        self.held[slot] = False
        self.records.pop(slot).released = i
