# What other Cython modules may use of a core's instruction stream (npulab._stream): the
# launch's Budget and the Stream with its C-level issue path ``push``, which the queue calls
# (npulab._queue) use to issue a flag in one C call.
cimport cython
cimport numpy as cnp


cdef class Budget:
    cdef public long long issued, limit


@cython.final
cdef class Stream:
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

    # an instruction with no duration, bytes or accesses (a queue's flag or mark), in one C call
    cdef Py_ssize_t push(self, long long pipe, long long kind, long long op, long long key,
                         object name) except -1
