"""Mix kernels on a split chip (npulab.lang.mix, npulab.sim.cross_core): one body on an AIC and
its two AIVs, data through GM, ordered by cross-core flags; their timing, races, deadlocks and
the rules the flags follow, on both twins where the scheduler runs."""
import numpy as np
import pytest

import fixtures
from npulab import DeadlockError, RaceError, SyncError, get_chip
from npulab.lang import (A1, A2, B1, B2, CO1, PIPE_FIX, PIPE_MTE2, PIPE_MTE3, PIPE_S, VECIN, duplicate,
                         VECOUT, Queue, TPipe, adds, cross_core_set_flag, cross_core_wait_flag, data_copy,
                         data_copy_nd2nz, fixpipe, get_block_idx, get_block_num, get_sub_block_idx,
                         get_sub_block_num, is_aic, is_aiv, launch, load_data, mmad)
from npulab.sim.isa import Kind, Op, Pipe

M = N = K = 32                       # one 32 x 32 tile, K = 32; each AIV takes 16 rows
HALF = M // 2
AIC_DONE, AIV_DONE = 0, 1


class CubeTile:
    """The AIC's part: dst (m, n) fp16 = A (m, k) @ B (k, n), through L1, L0 and FixPipe (one
    TPipe a block, as a kernel has)."""

    def __init__(self, m=M, n=N, k=K):
        self.m, self.n, self.k = m, n, k
        self.pipe = TPipe()
        self.q = {nm: Queue(p, nm) for p, nm in ((A1, "a1"), (B1, "b1"), (A2, "a2"), (B2, "b2"), (CO1, "c"))}
        for nm, nbytes in (("a1", m * k * 2), ("b1", k * n * 2), ("a2", m * k * 2), ("b2", k * n * 2), ("c", m * n * 4)):
            self.pipe.init_buffer(self.q[nm], 1, max(nbytes, 1024))

    def __call__(self, a_gm, b_gm, dst_gm):
        m, n, k, q = self.m, self.n, self.k, self.q
        x1 = q["a1"].alloc_tensor(np.float16)
        data_copy_nd2nz(x1, a_gm, m, k)
        q["a1"].enque(x1)
        y1 = q["b1"].alloc_tensor(np.float16)
        data_copy_nd2nz(y1, b_gm, k, n)
        q["b1"].enque(y1)
        x1, y1 = q["a1"].deque(), q["b1"].deque()
        x2 = q["a2"].alloc_tensor(np.float16)
        load_data(x2, x1, m, k, src_rows=m)
        q["a2"].enque(x2)
        y2 = q["b2"].alloc_tensor(np.float16)
        load_data(y2, y1, k, n, src_rows=k)
        q["b2"].enque(y2)
        x2, y2 = q["a2"].deque(), q["b2"].deque()
        acc = q["c"].alloc_tensor(np.float32)
        mmad(acc, x2, y2, m, n, k)
        q["c"].enque(acc)
        for nm, t in (("a1", x1), ("b1", y1), ("a2", x2), ("b2", y2)):
            q[nm].free_tensor(t)
        acc = q["c"].deque()
        fixpipe(dst_gm, acc, m, n)
        q["c"].free_tensor(acc)


def cube_tile(a_gm, b_gm, dst_gm):
    CubeTile()(a_gm, b_gm, dst_gm)


def vector_half(src_gm, dst_gm, rows=HALF, wait=True, wait_pipe=PIPE_S):
    """An AIV's part: its ``rows`` rows of src, + 1, into dst."""
    pipe = TPipe()
    vin, vout = Queue(VECIN, "vin"), Queue(VECOUT, "vout")
    pipe.init_buffer(vin, 1, rows * N * 2)
    pipe.init_buffer(vout, 1, rows * N * 2)
    off = get_sub_block_idx() * rows * N
    if wait:
        cross_core_wait_flag(AIC_DONE, wait_pipe)
    x = vin.alloc_tensor(np.float16)
    data_copy(x, src_gm[off:], rows * N)
    vin.enque(x)
    x = vin.deque()
    y = vout.alloc_tensor(np.float16)
    adds(y, x, 1.0, rows * N)
    vout.enque(y)
    vin.free_tensor(x)
    y = vout.deque()
    data_copy(dst_gm[off:], y, rows * N)
    vout.free_tensor(y)


def producer_consumer(a, b, ws, out, flag=True, wait_pipe=PIPE_S):
    if is_aic():
        cube_tile(a, b, ws)
        if flag:
            cross_core_set_flag(2, PIPE_FIX, AIC_DONE)
    if is_aiv():
        vector_half(ws, out, wait=flag, wait_pipe=wait_pipe)


def per_block(a, b, ws, out):
    """producer_consumer with every block on its own part of ws and out (block = AI core index)."""
    blk = (get_block_idx() // get_sub_block_num()) * M * N
    producer_consumer(a, b, ws[blk:], out[blk:])


def _operands(key="mix"):
    a = fixtures.rand((M, K), np.float16, key + "a")
    b = fixtures.rand((K, N), np.float16, key + "b")
    return a, b, np.zeros(M * N, np.float16), np.zeros(M * N, np.float16)


def test_aic_result_reaches_the_aivs_through_gm_after_the_flag(side):
    a, b, ws, out = _operands()
    res = launch(producer_consumer, 1, a.reshape(-1), b.reshape(-1), ws, out, chip="910b", core_type="mix")
    want = a.astype(np.float64) @ b.astype(np.float64) + 1.0
    fixtures.assert_close(res.outputs[3].reshape(M, N), want, np.float16, unit="cube")
    tr = res.trace
    assert tr.summary()["cores_used"] == 3 and tr.core_labels == ["AIC 0", "AIV 0.0", "AIV 0.1"]
    lat = get_chip("910b").cross_core.flag_latency_cycles
    xset = np.flatnonzero(tr.kind == Kind.CROSS_SET)
    xwait = np.flatnonzero(tr.kind == Kind.CROSS_WAIT)
    assert len(xset) == 1 and len(xwait) == 2 and set(tr.core[xwait]) == {1, 2}
    # the AIVs wait until the AIC's set (on FIX, after the fixpipe completed) plus the latency
    fix = np.flatnonzero((tr.core == 0) & (tr.op == Op.FIXPIPE))
    assert tr.end[xset[0]] == tr.end[fix].max()
    assert (tr.end[xwait] == tr.end[xset[0]] + lat).all()
    # what the AIVs do after the wait starts after it
    for c in (1, 2):
        copies = np.flatnonzero((tr.core == c) & (tr.route == np.array("GM->UB")))
        assert (tr.start[copies] >= tr.end[xwait[0]]).all()


def test_mix_launch_traces_agree_on_both_twins():
    digests = []
    for side in ("cython", "python"):
        from npulab import twins
        with twins.use(side):
            a, b, _, _ = _operands()
            ws, out = np.zeros(2 * M * N, np.float16), np.zeros(2 * M * N, np.float16)
            res = launch(per_block, 2, a.reshape(-1), b.reshape(-1), ws, out, chip="910b", core_type="mix")
            digests.append(fixtures.trace_digest(res.trace))
    assert digests[0] == digests[1]


def test_timing_and_functional_runs_issue_the_same_streams():
    a, b, _, _ = _operands()
    args = (a.reshape(-1), b.reshape(-1), np.zeros(30 * M * N, np.float16), np.zeros(30 * M * N, np.float16))
    f = launch(per_block, 30, *args, chip="910b", core_type="mix").trace
    t = launch(per_block, 30, *args, chip="910b", core_type="mix", mode="timing").trace
    assert (f.start == t.start).all() and (f.end == t.end).all() and f.name == t.name


def test_a_read_on_an_aiv_of_what_the_aic_wrote_needs_the_flag(side):
    a, b, ws, out = _operands()
    with pytest.raises(RaceError, match=r"race between AIC 0 and AIV 0\.0 in GM:arg2") as info:
        launch(producer_consumer, 1, a.reshape(-1), b.reshape(-1), ws, out, False, chip="910b",
               core_type="mix", mode="timing", check_races=True)
    assert "FIX 'fixpipe 32x32 L0C->GM' (block 0, AIC 0) writes" in str(info.value)
    assert "MTE2 'data_copy GM->UB 1024 B' (block 0, AIV 0.0) reads" in str(info.value)


def test_a_wait_on_mte2_holds_only_mte2_and_one_on_s_holds_everything_after(side):
    def kernel(x, pipe):
        if is_aic():
            data_copy_nd2nz_big(x)
            cross_core_set_flag(2, PIPE_MTE2, 0)
        if is_aiv():
            tp = TPipe()
            buf = Queue(VECOUT, "v")
            tp.init_buffer(buf, 1, 1024)
            cross_core_wait_flag(0, pipe)
            t = buf.alloc_tensor(np.float16)
            duplicate(t, 1.0, 512)                   # the vector unit: no need to wait for MTE2
            buf.enque(t)
            buf.free_tensor(buf.deque())
    x = np.zeros(64 * 1024, np.float16)
    for pipe, before in ((PIPE_MTE2, True), (PIPE_S, False)):
        tr = launch(kernel, 1, x, pipe, chip="910b", core_type="mix", mode="timing").trace
        w = np.flatnonzero((tr.kind == Kind.CROSS_WAIT) & (tr.core == 1))[0]
        v = np.flatnonzero((tr.core == 1) & (tr.pipe == Pipe.V) & (tr.kind == Kind.WORK))[0]
        assert tr.pipe[w] == pipe and tr.end[w] > 1000
        assert (tr.start[v] < tr.end[w]) == before


def data_copy_nd2nz_big(x):
    tp = TPipe()
    q = Queue(A1, "big")
    tp.init_buffer(q, 1, 128 * 1024)
    t = q.alloc_tensor(np.float16)
    data_copy_nd2nz(t, x, 256, 256)
    q.enque(t)
    q.free_tensor(q.deque())


def test_block_and_sub_block_indices_follow_ascend_c():
    seen = {}

    def kernel(x):
        seen.setdefault((is_aic(), is_aiv()), []).append((get_block_idx(), get_sub_block_idx(),
                                                          get_sub_block_num(), get_block_num()))
    launch(kernel, 3, np.zeros(16, np.float16), chip="910b", core_type="mix")
    assert sorted(seen[(True, False)]) == [(0, 0, 1, 3), (1, 0, 1, 3), (2, 0, 1, 3)]
    assert sorted(seen[(False, True)]) == [(2 * b + s, s, 2, 3) for b in range(3) for s in (0, 1)]
    seen.clear()
    launch(kernel, 2, np.zeros(16, np.float16), chip="910", core_type="mix")   # coupled: g_coreType MIX
    assert sorted(seen) == [(False, False)] and sorted(seen[(False, False)]) == [(0, 0, 1, 2), (1, 0, 1, 2)]


def test_more_blocks_than_ai_cores_run_one_after_another_on_each(side):
    a, b, _, _ = _operands()
    ws, out = np.zeros(30 * M * N, np.float16), np.zeros(30 * M * N, np.float16)
    res = launch(per_block, 30, a.reshape(-1), b.reshape(-1), ws, out, chip="910b", core_type="mix")
    want = a.astype(np.float64) @ b.astype(np.float64) + 1.0
    for blk in (0, 23, 24, 29):
        fixtures.assert_close(res.outputs[3][blk * M * N:(blk + 1) * M * N].reshape(M, N), want,
                              np.float16, unit="cube")
    assert res.trace.summary()["cores_used"] == 72


def _ping_pong(a, b, ws, out, tiles, reverse=True):
    """Two workspace slots: the AIC fills one while the AIVs read the other; each side tells
    the other with a flag (AIC_DONE forward, AIV_DONE back)."""
    if is_aic():
        tile = CubeTile()
        for j in range(tiles):
            if reverse and j >= 2:
                cross_core_wait_flag(AIV_DONE, PIPE_FIX)
            tile(a, b, ws[(j % 2) * M * N:])
            cross_core_set_flag(2, PIPE_FIX, AIC_DONE)
        if reverse:
            for _ in range(min(tiles, 2)):
                cross_core_wait_flag(AIV_DONE, PIPE_FIX)
    if is_aiv():
        pipe = TPipe()
        vin, vout = Queue(VECIN, "vin"), Queue(VECOUT, "vout")
        pipe.init_buffer(vin, 1, HALF * N * 2)
        pipe.init_buffer(vout, 1, HALF * N * 2)
        off = get_sub_block_idx() * HALF * N
        for j in range(tiles):
            cross_core_wait_flag(AIC_DONE, PIPE_MTE2)
            x = vin.alloc_tensor(np.float16)
            data_copy(x, ws[(j % 2) * M * N + off:], HALF * N)
            if reverse:
                cross_core_set_flag(2, PIPE_MTE2, AIV_DONE)
            vin.enque(x)
            x = vin.deque()
            y = vout.alloc_tensor(np.float16)
            adds(y, x, float(j), HALF * N)
            vout.enque(y)
            vin.free_tensor(x)
            y = vout.deque()
            data_copy(out[j * M * N + off:], y, HALF * N)
            vout.free_tensor(y)


def test_double_buffered_workspace_with_flags_both_ways(side):
    a, b, _, _ = _operands()
    tiles = 5
    ws, out = np.zeros(2 * M * N, np.float16), np.zeros(tiles * M * N, np.float16)
    res = launch(_ping_pong, 1, a.reshape(-1), b.reshape(-1), ws, out, tiles, chip="910b", core_type="mix")
    c = a.astype(np.float64) @ b.astype(np.float64)
    for j in range(tiles):
        fixtures.assert_close(res.outputs[3][j * M * N:(j + 1) * M * N].reshape(M, N), c + j, np.float16,
                              unit="cube")
    tr = res.trace
    # the AIC's third fixpipe (tile 2, slot 0 again) waits for both AIVs to have read tile 0
    fix = np.flatnonzero((tr.core == 0) & (tr.route == np.array("L0C->GM")))
    reads = [np.flatnonzero((tr.core == c) & (tr.route == np.array("GM->UB"))) for c in (1, 2)]
    assert tr.start[fix[2]] >= max(tr.end[r[0]] for r in reads)


def test_without_the_reverse_flag_the_aic_overwrites_a_slot_being_read():
    a, b, _, _ = _operands()
    ws, out = np.zeros(2 * M * N, np.float16), np.zeros(5 * M * N, np.float16)
    with pytest.raises(RaceError, match=r"race between AIC 0 and AIV 0\.[01] .*fixpipe.*writes and .*GM->UB.*reads"):
        launch(_ping_pong, 1, a.reshape(-1), b.reshape(-1), ws, out, 5, False, chip="910b",
               core_type="mix", mode="timing", check_races=True)


def test_a_wait_no_set_releases_is_a_deadlock_in_both_modes(side):
    def kernel(x):
        if is_aiv():
            cross_core_wait_flag(3)
    for mode in ("functional", "timing"):
        with pytest.raises(DeadlockError, match=r"AIV 0\.0 .*cross-core flag 3"):
            launch(kernel, 1, np.zeros(16, np.float16), chip="910b", core_type="mix", mode=mode)


def test_waits_that_wait_on_each_other_deadlock(side):
    def kernel(x):
        if is_aic():
            cross_core_wait_flag(1)
            cross_core_set_flag(2, PIPE_FIX, 0)
        if is_aiv():
            cross_core_wait_flag(0)
            cross_core_set_flag(2, PIPE_MTE3, 1)
    for mode in ("functional", "timing"):
        with pytest.raises(DeadlockError, match="deadlock between cores") as info:
            launch(kernel, 1, np.zeros(16, np.float16), chip="910b", core_type="mix", mode=mode)
        msg = str(info.value)
        assert "flag 1" in msg and "flag 0" in msg and "AIC 0" in msg and "AIV 0." in msg


def test_the_aic_waits_for_both_aivs_in_mode_2(side):
    def kernel(x):
        if is_aiv():
            if get_sub_block_idx() == 1:
                data_copy_big(x)                      # AIV 1 sets late
            cross_core_set_flag(2, PIPE_MTE2, 2)
        if is_aic():
            cross_core_wait_flag(2)
    tr = launch(kernel, 1, np.zeros(8192, np.float16), chip="910b", core_type="mix", mode="timing").trace
    s = np.flatnonzero(tr.kind == Kind.CROSS_SET)
    w = np.flatnonzero(tr.kind == Kind.CROSS_WAIT)
    assert sorted(tr.core[s]) == [1, 2] and list(tr.core[w]) == [0]
    assert tr.end[s[tr.core[s] == 2][0]] > tr.end[s[tr.core[s] == 1][0]]
    assert tr.end[w[0]] == tr.end[s].max() + get_chip("910b").cross_core.flag_latency_cycles


def data_copy_big(x):
    pipe = TPipe()
    q = Queue(VECIN, "big")
    pipe.init_buffer(q, 1, x.size * 2)
    t = q.alloc_tensor(np.float16)
    data_copy(t, x, x.size)
    q.enque(t)
    q.free_tensor(q.deque())


@pytest.mark.parametrize("mode, block_dim, late, waits", [(1, 1, 1, 2), (0, 2, 3, 4)])
def test_modes_1_and_0_are_barriers_of_the_aivs(side, mode, block_dim, late, waits):
    """Mode 1: the two AIVs of an AI core; mode 0: every AIV of the launch. Each AIV's wait
    passes once all of them have set, the late one (AIV get_block_idx() == late) included."""
    def kernel(x):
        if is_aiv():
            if get_block_idx() == late:
                data_copy_big(x)
            cross_core_set_flag(mode, PIPE_MTE2, 4 + mode)
            cross_core_wait_flag(4 + mode)
    tr = launch(kernel, block_dim, np.zeros(8192, np.float16), chip="910b", core_type="mix", mode="timing").trace
    w = np.flatnonzero(tr.kind == Kind.CROSS_WAIT)
    s = np.flatnonzero(tr.kind == Kind.CROSS_SET)
    lat = get_chip("910b").cross_core.flag_latency_cycles
    assert len(w) == waits and (tr.end[w] == tr.end[s].max() + lat).all()


def test_mode_0_needs_every_block_on_a_core_at_once():
    def kernel(x):
        if is_aiv():
            cross_core_set_flag(0, PIPE_MTE2, 8)
    with pytest.raises(SyncError, match="mode 0 synchronises every AIV"):
        launch(kernel, 30, np.zeros(16, np.float16), chip="910b", core_type="mix", mode="timing")


def test_a_counter_holds_at_most_15_pending_sets(side):
    most = get_chip("910b").cross_core.max_pending

    def kernel(x, n):
        if is_aic():
            for _ in range(n):
                cross_core_set_flag(2, PIPE_FIX, 0)
        if is_aiv():
            for _ in range(n):
                cross_core_wait_flag(0)
    launch(kernel, 1, np.zeros(16, np.float16), 40, chip="910b", core_type="mix", mode="timing")   # in step

    # the AIVs' waits come after a copy on their pipe long enough (64 KB) that the AIC's sets,
    # issued issue_cycles apart, all rise before the first wait
    def late(x, n):
        if is_aic():
            for _ in range(n):
                cross_core_set_flag(2, PIPE_FIX, 0)
        if is_aiv():
            data_copy_big(x)
            for _ in range(n):
                cross_core_wait_flag(0, PIPE_MTE2)
    with pytest.raises(SyncError, match=r"raised 16 times with no wait between.*at most 15"):
        launch(late, 1, np.zeros(32768, np.float16), most + 1, chip="910b", core_type="mix", mode="timing")
    launch(late, 1, np.zeros(32768, np.float16), most, chip="910b", core_type="mix", mode="timing")


@pytest.mark.parametrize("body, match", [
    (lambda: cross_core_set_flag(2, PIPE_FIX, 11), "flag id 11 is out of range; .* ids 0-10"),
    (lambda: cross_core_set_flag(3, PIPE_FIX, 0), "mode must be 0"),
    (lambda: cross_core_wait_flag(0, Pipe.ALL), "not PIPE_ALL"),
    (lambda: is_aic() and cross_core_set_flag(1, PIPE_FIX, 0), "mode 1 synchronises the two AIVs"),
])
def test_bad_flags_are_sync_errors(body, match):
    with pytest.raises(SyncError, match=match):
        launch(lambda x: body(), 1, np.zeros(16, np.float16), chip="910b", core_type="mix", mode="timing")


def test_one_pipe_and_one_channel_per_counter():
    def two_pipes(x):
        if is_aic():
            cross_core_set_flag(2, PIPE_FIX, 0)
            cross_core_set_flag(2, PIPE_MTE2, 0)
    with pytest.raises(SyncError, match="on MTE2 here and on FIX"):
        launch(two_pipes, 1, np.zeros(16, np.float16), chip="910b", core_type="mix", mode="timing")

    def two_channels(x):
        if is_aic():
            cross_core_set_flag(2, PIPE_FIX, 6)
        if is_aiv():
            cross_core_set_flag(1, PIPE_MTE3, 6)
    with pytest.raises(SyncError, match="raised by mode-2 sets of AIC 0 and now by a mode-1 set"):
        launch(two_channels, 1, np.zeros(16, np.float16), chip="910b", core_type="mix", mode="timing")


def test_cross_core_flags_need_a_mix_launch_on_a_split_chip():
    k = lambda x: cross_core_set_flag(2, PIPE_FIX, 0)      # noqa: E731
    with pytest.raises(SyncError, match="split chips .* only; chip '910'"):
        launch(k, 1, np.zeros(16, np.float16), chip="910", core_type="mix")
    with pytest.raises(SyncError, match="need a mix launch"):
        launch(k, 1, np.zeros(16, np.float16), chip="910b", core_type="aic")


def test_a_body_that_does_not_branch_meets_the_missing_buffer():
    from npulab import CoreTypeError
    with pytest.raises(CoreTypeError, match=r"UB does not exist on an AIC core .*a mix launch.*is_aiv"):
        launch(lambda x: vector_half(x, x, wait=False), 1, np.zeros(M * N, np.float16), chip="910b",
               core_type="mix")
