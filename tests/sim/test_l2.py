"""The L2 replay over cache lines (sim/l2.py and its Cython twin npulab._l2), and what a launch
takes from it (sim/gm.py): hits for the lines a read shares with earlier copies, line
granularity, LRU eviction, write-allocate, the HBM bytes a shared fetch splits, the L2-hit
start-up and the exact ranges the race check sees."""
import numpy as np
import pytest

import npulab
from npulab import _l2, lang
from npulab.lang import VECIN, TBuf, TPipe, data_copy
from npulab.sim import l2
from npulab.sim.gm import GmTraffic
from npulab.sim.isa import Op

TWINS = pytest.mark.parametrize("replay", [l2.replay, _l2.replay], ids=["python", "cython"])


def _run(replay, accesses, line=128, capacity=1 << 20):
    """accesses: (buf, lo, row, step, rows, is_write) each, in replay order."""
    cols = list(zip(*accesses))
    return replay(*cols, line, capacity)


@TWINS
def test_a_read_that_overlaps_part_of_an_earlier_one_hits_for_those_lines_only(replay):
    hbm, hits, misses = _run(replay, [(0, 0, 1024, 1024, 1, 0), (0, 512, 1024, 1024, 1, 0)])
    assert hits.tolist() == [0, 4] and misses.tolist() == [8, 4]
    # the 4 shared lines were fetched once and served both reads: each read carries half of them
    assert hbm.tolist() == [4 * 128 + 4 * 64, 4 * 64 + 4 * 128]


@TWINS
def test_l2_keeps_and_fetches_whole_lines(replay):
    # 16 bytes inside one line, then 16 bytes across two; then the rest of the first line
    hbm, hits, misses = _run(replay, [(0, 100, 16, 16, 1, 0), (0, 120, 16, 16, 1, 0), (0, 0, 32, 32, 1, 0)])
    assert misses.tolist() == [1, 1, 0] and hits.tolist() == [0, 1, 1]
    assert hbm.sum() == pytest.approx(2 * 128)      # two lines came from HBM, whole
    # another buffer's line 0 is another line
    _, hits, misses = _run(replay, [(0, 0, 32, 32, 1, 0), (1, 0, 32, 32, 1, 0)])
    assert hits.tolist() == [0, 0] and misses.tolist() == [1, 1]


@TWINS
def test_rows_of_one_access_that_share_a_line_look_it_up_once(replay):
    # 4 rows of 32 bytes, 64 bytes apart: lines 0, 0, 1, 1
    hbm, hits, misses = _run(replay, [(0, 0, 32, 64, 4, 0)])
    assert (hits[0], misses[0], hbm[0]) == (0, 2, 256)
    # 4 rows of 32 bytes, 256 apart: every row has its own line; a read of the gaps then misses
    _, hits, misses = _run(replay, [(0, 0, 32, 256, 4, 0), (0, 128, 32, 256, 4, 0)])
    assert misses.tolist() == [4, 4] and hits.tolist() == [0, 0]


@TWINS
def test_the_least_recently_used_line_goes_first(replay):
    line = 128
    acc = [(0, i * line, line, line, 1, 0) for i in (0, 1, 0, 2, 1, 0)]   # capacity: 2 lines
    _, hits, misses = _run(replay, acc, line, capacity=2)
    # 0 miss, 1 miss, 0 hit (now the newest), 2 miss evicts 1, 1 miss evicts 0, 0 miss
    assert hits.tolist() == [0, 0, 1, 0, 0, 0] and misses.tolist() == [1, 1, 0, 1, 1, 1]
    _, hits, _ = _run(replay, acc, line, capacity=0)                     # no L2: nothing hits
    assert not hits.any()


@TWINS
def test_writes_allocate_their_lines_and_a_later_read_hits_them(replay):
    hbm, hits, misses = _run(replay, [(0, 0, 512, 512, 1, 1), (0, 0, 512, 512, 1, 0)])
    assert misses.tolist() == [4, 0] and hits.tolist() == [0, 4]
    assert hbm.tolist() == [0.0, 0.0]               # the written bytes were in L2: no fetch
    # a write takes L2 room: it evicts what a read left
    acc = [(0, 0, 128, 128, 1, 0), (1, 0, 256, 256, 1, 1), (0, 0, 128, 128, 1, 0)]
    _, hits, _ = _run(replay, acc, capacity=2)
    assert hits.tolist() == [0, 0, 0]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("span", [8192, 1 << 36], ids=["near", "far"])   # far: the C++ side hashes its lines
def test_the_twins_agree_on_random_traces(seed, span):
    rng = np.random.default_rng(seed)
    for _ in range(40):
        n = int(rng.integers(0, 80))
        row = rng.integers(0, 900, n)
        lo = rng.integers(0, 8192, n) + rng.integers(0, 4, n) * (span // 4)
        cols = (rng.integers(0, 3, n), lo, row, row + rng.integers(0, 600, n),
                rng.integers(0, 7, n), rng.integers(0, 2, n))
        line, cap = int(rng.choice([32, 128, 512])), int(rng.integers(0, 64))
        a, b = l2.replay(*cols, line, cap), _l2.replay(*cols, line, cap)
        for x, y in zip(a, b):
            assert x.dtype == y.dtype and np.array_equal(x, y)


# -- what a launch takes from it ---------------------------------------------------------------
N = 16384                      # fp16 elements: 32 KB


def _two_reads(x, second, barrier):
    pipe = TPipe()
    buf = TBuf(VECIN, "x")
    pipe.init_buffer(buf, 2 * N * 2)
    t = buf.get(np.float16)
    data_copy(t, x, N)
    if barrier:
        lang.pipe_barrier(lang.PIPE_ALL)
    data_copy(t[N:], x[second:], N)


def _launch(second, barrier=False, chip="910"):
    return lang.launch(_two_reads, 1, np.zeros(3 * N, np.float16), second, barrier, chip=chip,
                       mode="timing").trace


def test_a_launch_hits_for_the_lines_a_read_shares_with_an_earlier_one():
    line = npulab.get_chip("910").memory.l2_line_bytes
    half = _launch(N // 2).gm_stats                 # the second read starts in the middle of the first
    assert half["l2_hits"] == N * 2 // 2 // line and half["l2_misses"] == 3 * N * 2 // 2 // line
    assert half["hbm_read_bytes"] == 3 * N * 2 // 2
    apart = _launch(2 * N).gm_stats
    assert apart["l2_hits"] == 0 and apart["hbm_read_bytes"] == 2 * N * 2


def test_a_read_l2_serves_wholly_starts_up_faster_than_one_that_reaches_hbm():
    chip = npulab.get_chip("910")
    tr = _launch(0, barrier=True)
    sel = tr.op == Op.COPY_GM_TO_UB
    in_flight = (tr.end - tr.busy_end)[sel].tolist()
    assert in_flight == [chip.pipes.mte2_startup_cycles, chip.memory.l2_hit_startup_cycles]
    assert chip.memory.l2_hit_startup_cycles < chip.pipes.mte2_startup_cycles
    # partly served: the read still waits for HBM
    tr = _launch(N // 2, barrier=True)
    assert (tr.end - tr.busy_end)[tr.op == Op.COPY_GM_TO_UB].tolist() == [chip.pipes.mte2_startup_cycles] * 2
    # no L2 on the 910's twin without one: a repeat is no hit
    import dataclasses
    none = dataclasses.replace(chip, memory=dataclasses.replace(chip.memory, l2_bytes=0))
    assert _launch(0, chip=none).gm_stats["l2_hits"] == 0


class _Core:
    index = 0


def test_the_race_check_sees_a_strided_read_row_by_row():
    g = GmTraffic(None)
    g.read(_Core, 5, 64, ("GM:x", 0, 32, 128, 2))
    g.read(_Core, 6, 256, ("GM:x", 512, 128, 128, 2))     # packed rows: one range
    g.write(_Core, 7, lang.PIPE_MTE3, 32, ("GM:y", 64, 32, 32, 1))
    assert list(g.block_accesses()) == [("GM:y", 64, 96, True, 0, 7), ("GM:x", 0, 32, False, 0, 5),
                                        ("GM:x", 128, 160, False, 0, 5), ("GM:x", 512, 768, False, 0, 6)]
