# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A core's instruction stream in Cython: same signatures and results as
``npulab.sim.stream`` (the readable specification; tests/sim/test_stream.py runs one body on
both). What it optimises: ``issue`` is one C call (no Python frame), and the numbers go
straight into typed arrays that double when full, so the columns are numpy views, not lists to
convert. ``push`` (declared in _stream.pxd) is the issue of a flag in one C call, for the
queue calls (npulab._queue).
"""
cimport cython
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


@cython.final
cdef class Stream:
    """The stream of one core (see ``npulab.sim.stream.Stream``; fields in _stream.pxd)."""

    def __init__(self, Budget budget, check_races, over_budget):
        self.budget = budget
        self.check_races = bool(check_races)
        self.over_budget = over_budget
        self.accesses = {}
        self.names, self.routes = [], []
        self.n = 0
        _grow(self, 256)

    def __len__(self):
        return self.n

    def issue(self, pipe, kind, op, dur=0, *, key=-1, name="", nbytes=0, flops=0, energy=0.0,
              route="", reads=(), writes=(), lat=0):
        """Append one instruction; return its index in the stream (see the twin)."""
        cdef Py_ssize_t i = _reserve(self, name)
        # convert every value first, so that a bad one leaves the stream as it was
        cdef long long v_pipe = _int(pipe), v_kind = _int(kind), v_op = _int(op), v_dur = _int(dur)
        cdef long long v_key = _int(key), v_nbytes = _int(nbytes), v_flops = _int(flops), v_lat = _int(lat)
        cdef double v_energy = _float(energy)
        _put(self, i, v_pipe, v_kind, v_op, v_dur, v_key, v_nbytes, v_flops, v_energy, v_lat, name, route)
        if (reads or writes) and self.check_races:
            self.accesses[i] = [(buf, lo, hi, False) for buf, lo, hi in reads] + \
                               [(buf, lo, hi, True) for buf, lo, hi in writes]
        return i

    cdef Py_ssize_t push(self, long long pipe, long long kind, long long op, long long key,
                         object name) except -1:
        """``issue(pipe, kind, op, key=key, name=name)``: an instruction with no duration, bytes
        or accesses (a queue's flag or mark), in one C call."""
        cdef Py_ssize_t i = _reserve(self, name)
        _put(self, i, pipe, kind, op, 0, key, 0, 0, 0.0, 0, name, "")
        return i

    def column(self, str name):
        """One column, in program order: a view of the typed array for the numbers (settling
        a GM copy writes ``dur`` through it; a later issue may move the array), the list itself
        for ``name`` and ``route``."""
        if name == "name":
            return self.names
        if name == "route":
            return self.routes
        return _array(self, name)[:self.n]


cdef inline Py_ssize_t _reserve(Stream s, object name) except -1:
    """Count one more instruction against the launch's budget and make room for it in ``s``;
    return its index."""
    cdef Budget b = s.budget
    b.issued += 1
    if b.issued > b.limit:
        s.over_budget(name)
    if s.n == s.cap:
        _grow(s, 2 * s.cap)
    return s.n


cdef inline int _put(Stream s, Py_ssize_t i, long long pipe, long long kind, long long op,
                     long long dur, long long key, long long nbytes, long long flops,
                     double energy, long long lat, object name, object route) except -1:
    """Write instruction i (the next one) into the columns of ``s``."""
    s.pipe_p[i] = <signed char>pipe
    s.kind_p[i] = <signed char>kind
    s.op_p[i] = <short>op
    s.dur_p[i] = dur
    s.key_p[i] = key
    s.nbytes_p[i] = nbytes
    s.flops_p[i] = flops
    s.energy_p[i] = energy
    s.lat_p[i] = lat
    s.names.append(name)
    s.routes.append(route)
    s.n = i + 1
    return 0


cdef int _grow(Stream s, Py_ssize_t cap) except -1:
    """Arrays of ``cap`` rows holding the ``n`` rows of ``s`` so far."""
    cdef Py_ssize_t n = s.n
    arrays = []
    for name in ("pipe", "kind", "op", "dur", "key", "nbytes", "flops", "energy", "lat"):
        a = np.empty(cap, dtype=_DTYPES[name])
        if n:
            a[:n] = _array(s, name)[:n]
        arrays.append(a)
    (s._pipe, s._kind, s._op, s._dur, s._key, s._nbytes, s._flops, s._energy, s._lat) = arrays
    s.pipe_p = <signed char*>cnp.PyArray_DATA(s._pipe)
    s.kind_p = <signed char*>cnp.PyArray_DATA(s._kind)
    s.op_p = <short*>cnp.PyArray_DATA(s._op)
    s.dur_p = <long long*>cnp.PyArray_DATA(s._dur)
    s.key_p = <long long*>cnp.PyArray_DATA(s._key)
    s.nbytes_p = <long long*>cnp.PyArray_DATA(s._nbytes)
    s.flops_p = <long long*>cnp.PyArray_DATA(s._flops)
    s.energy_p = <double*>cnp.PyArray_DATA(s._energy)
    s.lat_p = <long long*>cnp.PyArray_DATA(s._lat)
    s.cap = cap
    return 0


cdef cnp.ndarray _array(Stream s, str name):
    """The typed array behind column ``name`` of ``s``."""
    if name == "pipe":
        return s._pipe
    if name == "kind":
        return s._kind
    if name == "op":
        return s._op
    if name == "dur":
        return s._dur
    if name == "key":
        return s._key
    if name == "nbytes":
        return s._nbytes
    if name == "flops":
        return s._flops
    if name == "energy":
        return s._energy
    if name == "lat":
        return s._lat
    raise KeyError(name)
