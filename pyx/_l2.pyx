# distutils: language = c++
# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The L2 replay over cache lines in C++: same name, signature and results as
``npulab.sim.l2`` (the readable specification, whose docstring gives the model; a launch uses the
one its side of npulab.twins names, and tests/sim/test_l2.py runs one body on both).

What it optimises: the LRU is a ring of preallocated slots (index links, no allocation per
line), found through a flat table over every line the accesses can touch (a hash map when that
is more than 16M lines), so a hit relinks one slot and a miss reuses the oldest; the fetch ids
every read used go into one flat vector, summed once the replay is done.
"""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, int8_t

cnp.import_array()


cdef extern from *:
    """
    #include <cstdint>
    #include <unordered_map>
    #include <vector>
    /* line key -> LRU slot (-1: not in L2): a flat table over every line the accesses can
       touch when that is not too many, else a hash map */
    struct npulab_l2_where {
        std::vector<int32_t> dense;
        std::unordered_map<int64_t, int32_t> sparse;
        bool flat;
        int32_t get(int64_t k) const {
            if (flat) return dense[(size_t)k];
            auto it = sparse.find(k);
            return it == sparse.end() ? -1 : it->second;
        }
        void set(int64_t k, int32_t v) { if (flat) dense[(size_t)k] = v; else sparse[k] = v; }
        void drop(int64_t k) { if (flat) dense[(size_t)k] = -1; else sparse.erase(k); }
    };
    static void npulab_l2_replay(int64_t n, const int64_t* buf, const int64_t* lo, const int64_t* row,
                                 const int64_t* step, const int64_t* rows, const int8_t* is_write,
                                 int64_t line_bytes, int64_t capacity, double* hbm, int64_t* hits,
                                 int64_t* misses) {
        /* a line's key: its index after every line of the buffers before it (flat), or
           buf << 44 | line (hashed) */
        int64_t nbuf = 0;
        for (int64_t a = 0; a < n; a++) if (buf[a] + 1 > nbuf) nbuf = buf[a] + 1;
        std::vector<int64_t> base((size_t)nbuf + 1, 0);
        for (int64_t a = 0; a < n; a++)
            if (row[a] > 0 && rows[a] > 0) {
                int64_t past = (lo[a] + (rows[a] - 1) * step[a] + row[a] - 1) / line_bytes + 1;
                if (past > base[buf[a] + 1]) base[buf[a] + 1] = past;
            }
        for (int64_t b = 0; b < nbuf; b++) base[b + 1] += base[b];
        npulab_l2_where where;
        where.flat = base[nbuf] <= ((int64_t)1 << 24);
        if (where.flat) where.dense.assign((size_t)base[nbuf], -1);
        /* the LRU: slots in a doubly linked ring through the sentinel ``cap`` (newest after it) */
        /* (never more slots than lines the accesses can touch: that L2 never evicts either) */
        int64_t slots = capacity < base[nbuf] ? capacity : base[nbuf];
        int32_t cap = (int32_t)(slots < ((int64_t)1 << 30) ? slots : ((int64_t)1 << 30)), used = 0;
        std::vector<int32_t> prev((size_t)cap + 1), next((size_t)cap + 1);
        std::vector<int64_t> key((size_t)cap + 1), fetch((size_t)cap + 1);
        prev[cap] = next[cap] = cap;
        std::vector<double> fetched;
        std::vector<int64_t> readers;
        std::vector<uint32_t> touched;                  /* fetch ids: 4 bytes a line a read used */
        std::vector<size_t> begin((size_t)n + 1);
        for (int64_t a = 0; a < n; a++) {
            begin[a] = touched.size();
            hits[a] = misses[a] = 0;
            bool write = is_write[a] != 0;
            int64_t first_key = where.flat ? base[buf[a]] : (buf[a] << 44), last = -1;
            int64_t nrows = row[a] > 0 ? rows[a] : 0;
            for (int64_t r = 0; r < nrows; r++) {
                int64_t start = lo[a] + r * step[a];
                int64_t first = start / line_bytes, end = (start + row[a] - 1) / line_bytes;
                for (int64_t line = first > last + 1 ? first : last + 1; line <= end; line++) {
                    int64_t k = where.flat ? first_key + line : (first_key | line), f;
                    int32_t s = cap ? where.get(k) : -1;
                    if (s >= 0) {
                        hits[a]++;
                        f = fetch[s];
                        next[prev[s]] = next[s]; prev[next[s]] = prev[s];       /* unlink */
                    } else {
                        misses[a]++;
                        f = (int64_t)fetched.size();
                        fetched.push_back(write ? 0.0 : (double)line_bytes);
                        readers.push_back(0);
                        if (cap) {
                            if (used < cap) s = used++;
                            else {                                              /* evict the oldest */
                                s = prev[cap];
                                next[prev[s]] = next[s]; prev[next[s]] = prev[s];
                                where.drop(key[s]);
                            }
                            key[s] = k; fetch[s] = f;
                            where.set(k, s);
                        }
                    }
                    if (s >= 0) {                                               /* newest */
                        prev[s] = cap; next[s] = next[cap]; prev[next[cap]] = s; next[cap] = s;
                    }
                    if (!write) {
                        readers[f]++;
                        touched.push_back((uint32_t)f);
                    }
                }
                if (end > last) last = end;
            }
        }
        begin[n] = touched.size();
        for (int64_t a = 0; a < n; a++) {
            double h = 0.0;
            for (size_t i = begin[a]; i < begin[a + 1]; i++)
                h += fetched[touched[i]] / (double)readers[touched[i]];
            hbm[a] = h;
        }
    }
    """
    void npulab_l2_replay(int64_t n, const int64_t* buf, const int64_t* lo, const int64_t* row,
                          const int64_t* step, const int64_t* rows, const int8_t* is_write,
                          int64_t line_bytes, int64_t capacity, double* hbm, int64_t* hits,
                          int64_t* misses) nogil


def replay(buf, lo, row, step, rows, is_write, line_bytes: int, capacity_lines: int):
    """Replay the accesses in the order given; ``(hbm, hits, misses)`` as ``npulab.sim.l2.replay``."""
    cdef cnp.ndarray[int64_t, ndim=1] b = np.ascontiguousarray(buf, dtype=np.int64)
    cdef cnp.ndarray[int64_t, ndim=1] l = np.ascontiguousarray(lo, dtype=np.int64)
    cdef cnp.ndarray[int64_t, ndim=1] w = np.ascontiguousarray(row, dtype=np.int64)
    cdef cnp.ndarray[int64_t, ndim=1] s = np.ascontiguousarray(step, dtype=np.int64)
    cdef cnp.ndarray[int64_t, ndim=1] r = np.ascontiguousarray(rows, dtype=np.int64)
    cdef cnp.ndarray[int8_t, ndim=1] wr = np.ascontiguousarray(is_write, dtype=np.int8)
    cdef int64_t n = b.shape[0]
    if not (l.shape[0] == w.shape[0] == s.shape[0] == r.shape[0] == wr.shape[0] == n):
        raise ValueError("replay: buf, lo, row, step, rows and is_write must have one length")
    cdef cnp.ndarray[double, ndim=1] hbm = np.zeros(n, np.float64)
    cdef cnp.ndarray[int64_t, ndim=1] hits = np.zeros(n, np.int64)
    cdef cnp.ndarray[int64_t, ndim=1] misses = np.zeros(n, np.int64)
    cdef int64_t lb = line_bytes, cap = capacity_lines
    if n:
        with nogil:
            npulab_l2_replay(n, &b[0], &l[0], &w[0], &s[0], &r[0], &wr[0], lb, cap,
                             &hbm[0], &hits[0], &misses[0])
    return hbm, hits, misses
