# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Deferred moves: the cube path's numerics on a worker thread. Same names and signatures as
``npulab.formats.worker`` (the readable twin, where every move runs at once; a launch uses the
one its side of npulab.twins names). What it optimises: the host's second CPU.

In a functional launch the Python thread issues instructions, and the numerics behind the
cube path's hot ones are plain loops on raw pointers: data_copy_nd2nz's pack and load_data's
window (npulab._layouts), mmad's widening into its chain and FixPipe's fp16 drain
(npulab._drains), a buffer's zeroing when it goes back to the pool (``zero_bytes``), and half
of each mmad product (``product_into``). Inside ``deferred_moves()`` (``launch`` holds it for a
functional run on the Cython side) the moves check their arguments, then hand their loop to
``submit`` (_worker.pxd), which queues it for one worker thread instead of running it, and
Python goes on issuing meanwhile: the two host CPUs of a small machine both work.

The rules that keep this invisible:

* one thread at a time runs queued moves, in the order they were queued, so moves among
  themselves need no further ordering (a window reads what the pack before it wrote);
* anything else that touches the bytes first calls ``sync()``, which returns once every queued
  move has run: ``Buffer.data``, ``GlobalTensor.data`` and ``writable()``, the mmad product,
  and the end of the launch do. ``PENDING`` is non-empty while moves may be queued, and holds
  a reference to every array a queued move touches;
* ``sync()`` never waits for a worker the OS has not scheduled: the calling thread runs the
  queued moves itself (only the move the worker is running is waited for).

Without a worker (no pthreads, or no numpy OpenBLAS to split the product with) every move runs
at once. ``_use_worker(False)`` turns the worker off for the tests that compare a deferred run
with an immediate one; it is not a switch between twins (that is npulab.twins).
"""
import os

import numpy as np
cimport numpy as cnp
from libc.string cimport memset

from npulab.errors import ShapeError

cnp.import_array()


# -- the queue and the worker thread (C, on pthreads) --------------------------------------------
cdef extern from *:
    """
    #define NPULAB_RING 1024
    static npulab_task npulab_ring[NPULAB_RING];
    static size_t npulab_head = 0, npulab_tail = 0;    /* queued, done: head - tail pending */
    static int npulab_worker_ok = 0;                   /* a worker thread is running */
    #if defined(_WIN32) || !defined(__GNUC__)
    static int npulab_worker_start(void) { return -1; }   /* no worker: moves run at once */
    static void npulab_commit(void) {}
    static void npulab_drain(void) {}
    static void npulab_wait_taken(size_t idx) { (void)idx; }
    static size_t npulab_pending(void) { return 0; }
    #else
    #include <pthread.h>
    #if defined(__x86_64__) || defined(__i386__)
    #include <immintrin.h>
    #define npulab_pause() _mm_pause()
    #else
    #define npulab_pause() ((void)0)
    #endif
    /* Every field below is written under npulab_mu; head, tail and busy are also read without
       it (atomically). tail is the next move to run. A thread runs a move only while it holds
       the run token (busy): the worker, or a thread that syncs (it runs the queued moves itself
       rather than wait for a worker the OS may not have scheduled). So moves run one at a time,
       in the order they were queued, whoever runs them. */
    static pthread_mutex_t npulab_mu = PTHREAD_MUTEX_INITIALIZER;
    static pthread_cond_t npulab_cv_work = PTHREAD_COND_INITIALIZER;
    static pthread_cond_t npulab_cv_done = PTHREAD_COND_INITIALIZER;
    static int npulab_sleeping = 0, npulab_waiters = 0, npulab_draining = 0, npulab_busy = 0;
    #define NPULAB_POLLS 256           /* empty-queue polls (a few microseconds) before sleeping */

    /* with the lock held and the token taken: run the next move, give the token back */
    static void npulab_run_next(void) {
        const npulab_task *t = &npulab_ring[npulab_tail % NPULAB_RING];
        __atomic_store_n(&npulab_tail, npulab_tail + 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&npulab_mu);
        t->run(t);
        pthread_mutex_lock(&npulab_mu);
        __atomic_store_n(&npulab_busy, 0, __ATOMIC_RELEASE);
        if (npulab_waiters) pthread_cond_broadcast(&npulab_cv_done);
    }
    /* with the lock held: wait for the token and take it */
    static void npulab_take_token(void) {
        while (npulab_busy) {
            npulab_waiters++;
            pthread_cond_wait(&npulab_cv_done, &npulab_mu);
            npulab_waiters--;
        }
        __atomic_store_n(&npulab_busy, 1, __ATOMIC_RELEASE);
    }

    static void *npulab_worker(void *arg) {
        (void)arg;
        pthread_mutex_lock(&npulab_mu);
        for (;;) {
            while (npulab_tail == npulab_head || npulab_draining || npulab_busy) {
                if (!npulab_draining && !npulab_busy) {   /* the next move is usually microseconds away */
                    size_t t = npulab_tail;
                    int i;
                    pthread_mutex_unlock(&npulab_mu);
                    for (i = 0; i < NPULAB_POLLS && __atomic_load_n(&npulab_head, __ATOMIC_ACQUIRE) == t; i++)
                        npulab_pause();
                    pthread_mutex_lock(&npulab_mu);
                    if (npulab_tail != npulab_head && !npulab_draining && !npulab_busy) break;
                }
                npulab_sleeping = 1;
                pthread_cond_wait(&npulab_cv_work, &npulab_mu);
                npulab_sleeping = 0;
            }
            __atomic_store_n(&npulab_busy, 1, __ATOMIC_RELEASE);
            npulab_run_next();
        }
        return NULL;
    }
    /* the queuing thread: a new move is in its slot */
    static void npulab_commit(void) {
        pthread_mutex_lock(&npulab_mu);
        __atomic_store_n(&npulab_head, npulab_head + 1, __ATOMIC_RELEASE);
        if (npulab_sleeping && !npulab_draining) pthread_cond_signal(&npulab_cv_work);
        pthread_mutex_unlock(&npulab_mu);
    }
    /* run the moves queued before index ``upto`` (all of them: upto = head) on this thread,
       the worker standing aside (it finishes the move it is running, if any) */
    static void npulab_run_upto(size_t upto) {
        pthread_mutex_lock(&npulab_mu);
        npulab_draining++;
        for (;;) {
            npulab_take_token();
            if ((ptrdiff_t)(upto - npulab_tail) <= 0) {
                __atomic_store_n(&npulab_busy, 0, __ATOMIC_RELEASE);
                if (npulab_waiters) pthread_cond_broadcast(&npulab_cv_done);
                break;
            }
            npulab_run_next();
        }
        npulab_draining--;
        if (!npulab_draining && npulab_sleeping && npulab_tail != npulab_head)
            pthread_cond_signal(&npulab_cv_work);     /* what is left (a product half) is the worker's */
        pthread_mutex_unlock(&npulab_mu);
    }
    /* every queued move has run when this returns; the worker then sleeps until the next one */
    static void npulab_drain(void) {
        npulab_run_upto(__atomic_load_n(&npulab_head, __ATOMIC_ACQUIRE));
    }
    /* the queuing thread waits until the worker has taken move ``idx`` (so every move before it
       has run), polling while the worker makes progress; if it makes none for a while (the OS
       has not scheduled it), this thread runs the moves before ``idx`` itself */
    #define NPULAB_STALL 8192          /* polls without progress (~0.2 ms) before taking over */
    static void npulab_wait_taken(size_t idx) {
        size_t last = __atomic_load_n(&npulab_tail, __ATOMIC_ACQUIRE);
        int still = 0;
        while (__atomic_load_n(&npulab_tail, __ATOMIC_ACQUIRE) <= idx) {
            size_t now = __atomic_load_n(&npulab_tail, __ATOMIC_ACQUIRE);
            if (now != last) { last = now; still = 0; }
            else if (++still > NPULAB_STALL) break;
            npulab_pause();
        }
        if (__atomic_load_n(&npulab_tail, __ATOMIC_ACQUIRE) <= idx)
            npulab_run_upto(idx);
    }
    /* moves queued or running */
    static size_t npulab_pending(void) {
        return __atomic_load_n(&npulab_head, __ATOMIC_ACQUIRE) - __atomic_load_n(&npulab_tail, __ATOMIC_ACQUIRE)
               + (size_t)__atomic_load_n(&npulab_busy, __ATOMIC_ACQUIRE);
    }
    /* fork: the child has no worker thread. Queue nothing across a fork: the parent drains and
       holds the lock; the child starts from an empty queue and a fresh lock */
    static void npulab_before_fork(void) { if (npulab_worker_ok) npulab_drain(); pthread_mutex_lock(&npulab_mu); }
    static void npulab_after_fork_parent(void) { pthread_mutex_unlock(&npulab_mu); }
    static void npulab_after_fork_child(void) {
        pthread_mutex_init(&npulab_mu, NULL);
        pthread_cond_init(&npulab_cv_work, NULL);
        pthread_cond_init(&npulab_cv_done, NULL);
        npulab_sleeping = npulab_waiters = npulab_draining = npulab_busy = 0;
        npulab_tail = npulab_head;
        npulab_worker_ok = 0;
    }
    static int npulab_worker_start(void) {
        static int registered = 0;
        pthread_t th;
        pthread_attr_t attr;
        int rc;
        if (!registered) {
            if (pthread_atfork(npulab_before_fork, npulab_after_fork_parent, npulab_after_fork_child))
                return -1;
            registered = 1;
        }
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&th, &attr, npulab_worker, NULL);
        pthread_attr_destroy(&attr);
        if (rc) return -1;
        npulab_worker_ok = 1;
        return 0;
    }
    #endif
    """
    int NPULAB_RING
    npulab_task npulab_ring[1024]
    size_t npulab_head
    int npulab_worker_ok
    int npulab_worker_start() nogil
    void npulab_commit() nogil
    void npulab_drain() nogil
    void npulab_wait_taken(size_t idx) nogil
    size_t npulab_pending() nogil


# -- the product's BLAS ----------------------------------------------------------------------------
# The mmad product (lang/cube.flush_l0c) in two halves of rows, one on the worker and one on the
# calling thread, each single-threaded: the numbers of a multithreaded BLAS call without its pool
# threads, which poll for work for a while after every call and would take the CPU the worker
# needs. Needs the cblas_sgemm of numpy's own OpenBLAS (found through threadpoolctl); without it
# the product is numpy's matmul (and the moves run at once: no worker).
cdef extern from *:
    """
    #if !defined(_WIN32) && defined(__GNUC__)
    #include <dlfcn.h>
    #define NPULAB_DL 1
    #else
    #define NPULAB_DL 0
    #endif
    typedef void (*npulab_sgemm64_fn)(int, int, int, long long, long long, long long, float, const float *,
                                      long long, const float *, long long, float, float *, long long);
    typedef void (*npulab_sgemm32_fn)(int, int, int, int, int, int, float, const float *, int,
                                      const float *, int, float, float *, int);
    typedef int (*npulab_get_fn)(void);
    typedef void (*npulab_set_fn)(int);
    static npulab_sgemm64_fn npulab_sgemm64 = 0;
    static npulab_sgemm32_fn npulab_sgemm32 = 0;
    static npulab_get_fn npulab_blas_get_threads = 0;
    static npulab_set_fn npulab_blas_set_threads = 0;
    /* numpy's OpenBLAS (already loaded): its cblas_sgemm and its thread count */
    static int npulab_blas_load(const char *path) {
    #if NPULAB_DL
        void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
        if (!h) return -1;
        npulab_sgemm64 = (npulab_sgemm64_fn)dlsym(h, "scipy_cblas_sgemm64_");
        if (npulab_sgemm64) {
            npulab_blas_get_threads = (npulab_get_fn)dlsym(h, "scipy_openblas_get_num_threads64_");
            npulab_blas_set_threads = (npulab_set_fn)dlsym(h, "scipy_openblas_set_num_threads64_");
        } else {
            npulab_sgemm32 = (npulab_sgemm32_fn)dlsym(h, "scipy_cblas_sgemm");
            npulab_blas_get_threads = (npulab_get_fn)dlsym(h, "scipy_openblas_get_num_threads");
            npulab_blas_set_threads = (npulab_set_fn)dlsym(h, "scipy_openblas_set_num_threads");
        }
        if (!npulab_blas_get_threads || !npulab_blas_set_threads || !(npulab_sgemm64 || npulab_sgemm32)) {
            npulab_sgemm64 = 0; npulab_sgemm32 = 0;
            return -1;
        }
        return 0;
    #else
        (void)path;
        return -1;
    #endif
    }
    /* C (m x n, row stride ldc) = A (m x k, row stride lda) B (k x n, row stride ldb): the
       row-major cblas_sgemm numpy's matmul calls (one thread while deferring: see below) */
    static void npulab_sgemm_1t(Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, const float *a, Py_ssize_t lda,
                                const float *b, Py_ssize_t ldb, float *c, Py_ssize_t ldc) {
        if (npulab_sgemm64) npulab_sgemm64(101, 111, 111, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
        else npulab_sgemm32(101, 111, 111, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, 0.0f, c, (int)ldc);
    }
    """
    int npulab_blas_load(const char* path)
    void npulab_sgemm_1t(Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, const float* a, Py_ssize_t lda,
                         const float* b, Py_ssize_t ldb, float* c, Py_ssize_t ldc) nogil
    int npulab_blas_get_threads() nogil
    void npulab_blas_set_threads(int) nogil


cdef int _blas_state = 0                 # 0 not looked for yet, 1 found, -1 not available
cdef int _blas_threads = 1               # numpy's BLAS threads before deferred_moves()
cdef bint _enabled = True                # _use_worker
cdef int _deferring = 0                  # deferred_moves() depth
cdef bint _worker_failed = False
#: the arrays the queued moves touch (kept alive until sync); non-empty while moves may be queued
PENDING = []


def _use_worker(bint enabled) -> bool:
    """Defer moves to the worker in later launches, or run them at once; returns the previous
    setting. For the tests that hold a deferred run to an immediate one (traces the same,
    results to float32 rounding: the split product, see ``product_into``)."""
    global _enabled
    sync()
    prev, _enabled = _enabled, enabled
    return prev


def _find_blas() -> bool:
    """Look once for numpy's OpenBLAS cblas_sgemm (see above)."""
    global _blas_state
    if _blas_state == 0:
        _blas_state = -1
        try:
            from threadpoolctl import threadpool_info
            libs = [i["filepath"] for i in threadpool_info()
                    if i.get("internal_api") == "openblas" and "numpy" in i.get("filepath", "")]
        except Exception:                   # pragma: no cover - threadpoolctl is a dependency
            libs = []
        for path in libs:
            if npulab_blas_load(os.fsencode(path)) == 0:
                _blas_state = 1
                break
    return _blas_state == 1


cdef void _run_sgemm(const npulab_task* t) noexcept nogil:
    npulab_sgemm_1t(t.a[0], t.a[1], t.a[2], <const float*>t.s, t.a[3], <const float*>t.s2, t.a[4],
                    <float*>t.d, t.a[5])


def product_into(a, b, cnp.ndarray out):
    """``out[...] = a @ b`` for float32 matrices (rows of a and b contiguous, out C-contiguous).
    Inside ``deferred_moves()``, with the worker and numpy's cblas_sgemm there, in two halves
    of rows: rows from the first multiple of 16 past the middle on the worker, the rest on this
    thread, each numpy's own row-major sgemm on one thread. Otherwise numpy's matmul. The two
    agree to float32 rounding; for some sizes BLAS picks another kernel for half the rows than
    for all of them, and the sums over k then round differently in the last bit."""
    cdef cnp.ndarray A = a, B = b
    if A.dtype != np.float32 or B.dtype != np.float32 or out.dtype != np.float32 or A.ndim != 2 \
            or B.ndim != 2 or out.ndim != 2 or A.shape[1] != B.shape[0] or out.shape[0] != A.shape[0] \
            or out.shape[1] != B.shape[1] or not cnp.PyArray_IS_C_CONTIGUOUS(out):
        raise ShapeError("product_into: expected float32 (m, k) @ (k, n) into a C-contiguous (m, n)")
    cdef Py_ssize_t m = A.shape[0], n = B.shape[1], k = A.shape[1], h
    cdef Py_ssize_t lda = A.strides[0] // 4, ldb = B.strides[0] // 4, ldc = n
    cdef npulab_task* t
    cdef const float* ap
    cdef const float* bp
    cdef float* cp
    # (numpy's matmul calls gemv, not gemm, for a single column: leave those to it)
    if m < 32 or n < 2 or k < 1 or A.strides[1] != 4 or B.strides[1] != 4 or A.strides[0] % 4 \
            or B.strides[0] % 4 or lda < k or ldb < n or not _deferring or not _find_blas() \
            or not _worker_ready():
        sync()                           # queued moves may still be filling a and b
        np.matmul(A, B, out=out)
        return out
    ap, bp, cp = <const float*>cnp.PyArray_DATA(A), <const float*>cnp.PyArray_DATA(B), <float*>cnp.PyArray_DATA(out)
    h = (m // 2 + 15) // 16 * 16         # the worker's rows start on a fractal boundary
    # queued behind the moves that fill a and b: the worker, busy with them, goes straight on
    t = _task_slot()
    cdef size_t idx = npulab_head
    t.run, t.s, t.s2, t.d = _run_sgemm, <const char*>(ap + h * lda), <const char*>bp, <char*>(cp + h * ldc)
    t.a[0], t.a[1], t.a[2], t.a[3], t.a[4], t.a[5] = m - h, n, k, lda, ldb, ldc
    PENDING.append((A, B, out))
    npulab_commit()
    with nogil:
        npulab_wait_taken(idx)           # a and b are complete once the worker takes its half
        npulab_sgemm_1t(h, n, k, ap, lda, bp, ldb, cp, ldc)
    sync()
    return out


cdef npulab_task* _task_slot() except NULL:
    """The next free slot of the queue (waiting for room when it is full)."""
    if npulab_pending() >= <size_t>NPULAB_RING:
        sync()
    return &npulab_ring[npulab_head % NPULAB_RING]


cdef bint _worker_ready():
    """Start the worker on first use; False when this platform cannot."""
    global _worker_failed
    if not npulab_worker_ok and not _worker_failed:
        if npulab_worker_start() != 0:
            _worker_failed = True
    return npulab_worker_ok


cdef int submit(const npulab_task* t, object keep) except -1:
    """Run the move ``t`` now; inside ``deferred_moves()``, queue a copy of it for the worker
    instead (run it now all the same when no worker thread can start), keeping ``keep`` (the
    arrays it touches) referenced until it has run."""
    cdef npulab_task* slot
    if not _deferring:
        t.run(t)
        return 0
    slot = _task_slot()
    slot[0] = t[0]
    PENDING.append(keep)
    if _worker_ready():
        npulab_commit()
    else:                                # no threads here: the move runs now, as undeferred
        slot.run(slot)
    return 0


def queued() -> int:
    """How many moves were queued for the worker so far in this process (a count for tests)."""
    return npulab_head


def sync():
    """Wait until every queued move has run (a no-op when none is queued). The queue is checked
    again after each drain, which runs with the GIL released: another thread may queue moves
    meanwhile, and PENDING is cleared only once none is left (with the GIL held, no thread can
    queue between the last check and the clear)."""
    while npulab_worker_ok and npulab_pending():
        with nogil:
            npulab_drain()
    PENDING.clear()


class deferred_moves:
    """``with deferred_moves():`` queue the cube path's moves for the worker thread (see
    above); leaving the block (the outermost one, when nested) waits for them: ``sync()``."""

    def __enter__(self):
        global _deferring, _blas_threads
        # only with the split product (above), and with numpy's BLAS on one thread meanwhile
        # (the setting is process-wide in OpenBLAS): its pool threads would otherwise poll for
        # work after every product and take turns with the worker for the CPU
        self.on = _enabled and _find_blas()
        if self.on:
            if _deferring == 0:
                _blas_threads = npulab_blas_get_threads()
                npulab_blas_set_threads(1)
            _deferring += 1
        return self

    def __exit__(self, *exc):
        global _deferring
        if self.on:
            _deferring -= 1
            if _deferring == 0:
                sync()
                npulab_blas_set_threads(_blas_threads)
        return False


def deferring() -> bool:
    """True inside ``deferred_moves()`` (when it defers: the worker is on and BLAS found)."""
    return _deferring > 0


cdef void _run_zero(const npulab_task* t) noexcept nogil:
    memset(t.d, 0, t.a[0])


def zero_bytes(cnp.ndarray buf, Py_ssize_t n):
    """``buf[:n] = 0`` for a C-contiguous uint8 array (a buffer given back to the pool),
    queued for the worker while deferring."""
    if buf.dtype != np.uint8 or not cnp.PyArray_IS_C_CONTIGUOUS(buf) or n < 0 or n > buf.shape[0]:
        raise ShapeError(f"zero_bytes: {n} bytes of a {buf.dtype} array of {buf.shape[0]}")
    cdef npulab_task t
    if n == 0:
        return
    t.run, t.d = _run_zero, <char*>cnp.PyArray_DATA(buf)
    t.a[0] = n
    submit(&t, buf)
