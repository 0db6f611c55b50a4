# What the modules whose moves the worker runs (npulab._layouts, npulab._drains) use of
# npulab._worker. A move is a task: the C function that runs it and its arguments (pointers and
# sizes). ``submit`` runs it at once, or, inside ``deferred_moves()``, queues a copy for the
# worker thread behind the moves queued before. The task carries its own function, so the
# worker never needs to know the modules that queue moves (no cimport cycle).

cdef extern from *:
    """
    #ifndef NPULAB_TASK_DEFINED
    #define NPULAB_TASK_DEFINED
    typedef struct npulab_task npulab_task;
    struct npulab_task {
        void (*run)(const npulab_task *);      /* runs the move, without the GIL */
        const char *s;                         /* source bytes */
        const char *s2;                        /* a second source (a bias, B of a product) */
        char *d;                               /* destination bytes */
        Py_ssize_t a[14];                      /* sizes, strides, flags: the move's own */
    };
    #endif
    """
    ctypedef struct npulab_task:
        void (*run)(const npulab_task*) noexcept nogil
        const char* s
        const char* s2
        char* d
        Py_ssize_t a[14]

# run ``t`` now, or queue it (deferring); ``keep`` (the arrays it touches) stays referenced
# until it has run
cdef int submit(const npulab_task* t, object keep) except -1
