# distutils: language = c++
# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The L2 replay over cache lines in C++: same name, signature and results as
``npulab.sim.l2`` (the readable specification, whose docstring gives the model; a launch uses the
one its side of npulab.twins names, and tests/sim/test_l2.py runs one body on both).

What it optimises: the LRU is a std::list of (line key, fetch id) with a std::unordered_map
from key to list position, so a hit moves one node and a miss adds one and drops the oldest;
the fetch ids every read used go into one flat vector, summed once the replay is done.
"""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, int8_t

cnp.import_array()


cdef extern from *:
    """
    #include <cstdint>
    #include <list>
    #include <unordered_map>
    #include <utility>
    #include <vector>
    static void npulab_l2_replay(int64_t n, const int64_t* buf, const int64_t* lo, const int64_t* row,
                                 const int64_t* step, const int64_t* rows, const int8_t* is_write,
                                 int64_t line_bytes, int64_t capacity, double* hbm, int64_t* hits,
                                 int64_t* misses) {
        typedef std::pair<int64_t, int64_t> slot;          /* (line key, fetch id) */
        std::list<slot> lru;                                /* most recently used first */
        std::unordered_map<int64_t, std::list<slot>::iterator> where;
        where.reserve((size_t)(capacity < (1 << 22) ? capacity + 1 : (1 << 22)));
        std::vector<double> fetched;
        std::vector<int64_t> readers, touched;
        std::vector<size_t> begin((size_t)n + 1);
        for (int64_t a = 0; a < n; a++) {
            begin[a] = touched.size();
            hits[a] = misses[a] = 0;
            bool write = is_write[a] != 0;
            int64_t base = buf[a] << 44, last = -1;
            int64_t nrows = row[a] > 0 ? rows[a] : 0;
            for (int64_t r = 0; r < nrows; r++) {
                int64_t start = lo[a] + r * step[a];
                int64_t first = start / line_bytes, end = (start + row[a] - 1) / line_bytes;
                for (int64_t line = first > last + 1 ? first : last + 1; line <= end; line++) {
                    int64_t key = base | line, f;
                    auto it = where.find(key);
                    if (it != where.end()) {
                        lru.splice(lru.begin(), lru, it->second);
                        f = it->second->second;
                        hits[a]++;
                    } else {
                        misses[a]++;
                        f = (int64_t)fetched.size();
                        fetched.push_back(write ? 0.0 : (double)line_bytes);
                        readers.push_back(0);
                        lru.emplace_front(key, f);
                        where[key] = lru.begin();
                        if ((int64_t)lru.size() > capacity) {
                            where.erase(lru.back().first);
                            lru.pop_back();
                        }
                    }
                    if (!write) {
                        readers[f]++;
                        touched.push_back(f);
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
