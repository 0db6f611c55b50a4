"""Mistakes a learner makes writing kernels, each answered by an error that names it (a
user-acceptance pass found these answered by raw Python errors, or not at all)."""
import numpy as np
import pytest

import npulab
from npulab import lang
from npulab.lang import (PIPE_ALL, PIPE_V, VECCALC, VECIN, VECOUT, TPipe, Queue, TBuf, data_copy,
                         get_block_idx, set_flag, wait_flag)

X = np.arange(64, dtype=np.float32)


def _scratch(nbytes=256, dtype=np.float32):
    pipe = TPipe()
    buf = TBuf(VECCALC, "work")
    pipe.init_buffer(buf, nbytes)
    return pipe, buf, buf.get(dtype)


def _run(kernel, *args, block_dim=1):
    return lang.launch(kernel, block_dim, *args, chip="teach", core_type="aiv")


# -- reductions: dst holds the partials, not count elements --------------------------------------
def test_reduce_sum_into_a_small_dst():
    def kernel(x, out):
        pipe = TPipe()
        q, o = Queue(VECIN, "q"), Queue(VECOUT, "o")
        pipe.init_buffer(q, 1, 64 * 4)
        pipe.init_buffer(o, 1, 32)                  # 8 fp32: room for one partial a repeat
        t = q.alloc_tensor(np.float32)
        data_copy(t, x, 64)
        q.enque(t)
        t = q.deque()
        s = o.alloc_tensor(np.float32)
        lang.reduce_sum(s, t, 64)
        q.free_tensor(t)
        o.enque(s)
        s = o.deque()
        data_copy(out, s, 8)
        o.free_tensor(s)
    out = _run(kernel, X, np.zeros(8, np.float32)).outputs[1]
    assert out[0] == X.sum()


def test_reduce_into_a_dst_too_small_for_the_partials_says_how_many():
    def kernel(x):
        _, buf, t = _scratch(1024)                  # 256 fp32 values: 4 repeats on the teach chip
        small = TBuf(VECCALC, "small")
        TPipe().init_buffer(small, 32)
        lang.reduce_max(small.get(np.float32, 2), t, 256)
    with pytest.raises(npulab.ShapeError, match=r"reduce_max: dst 'small' holds 2 elements.*4 for count 256"):
        _run(kernel, X)


# -- flags ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("call", [set_flag, wait_flag])
def test_pipe_all_is_not_a_flag_end(call):
    def kernel(x):
        call(PIPE_ALL, PIPE_V, 0)
    with pytest.raises(ValueError, match=r"PIPE_ALL is not a pipe a flag can leave or reach.*pipe_barrier\(PIPE_ALL\)"):
        _run(kernel, X)


# -- blocks that share GM bytes ------------------------------------------------------------------
def _blocks(x, z, offset_out=True, read_other=False, parts=None):
    b = get_block_idx()
    out = b if parts is None else b % parts
    pipe = TPipe()
    q, o = Queue(VECIN, "q"), Queue(VECOUT, "o")
    pipe.init_buffer(q, 1, 128)
    pipe.init_buffer(o, 1, 128)
    t = q.alloc_tensor(np.float32)
    src = z[(1 - b) * 32:] if read_other else x[b * 32:]
    data_copy(t, src, 32)
    q.enque(t)
    t = q.deque()
    u = o.alloc_tensor(np.float32)
    lang.adds(u, t, 1.0, 32)
    q.free_tensor(t)
    o.enque(u)
    u = o.deque()
    data_copy(z[out * 32:] if offset_out else z, u, 32)
    o.free_tensor(u)


def test_blocks_writing_their_own_parts_are_fine():
    z = _run(_blocks, X, np.zeros(64, np.float32), block_dim=2).outputs[1]
    assert np.array_equal(z, X + 1)


def test_two_blocks_writing_the_same_bytes_is_a_race():
    # the classic slip: the output is not offset by get_block_idx(), so every block writes
    # z[0:32] and the last one to finish wins
    with pytest.raises(npulab.RaceError, match=r"race between blocks in GM:arg1 bytes \[0, 128\).*"
                                              r"block 1.*writes what.*block 0.*get_block_idx"):
        _run(_blocks, X, np.zeros(64, np.float32), False, block_dim=2)


def test_a_block_reading_what_another_block_writes_is_a_race():
    with pytest.raises(npulab.RaceError, match="race between blocks in GM:arg1"):
        _run(_blocks, X, np.zeros(64, np.float32), True, True, block_dim=2)


def test_blocks_sharing_a_core_still_race():
    # four blocks on the teach chip's two cores, block b writing part b % 2: blocks 0 and 2
    # run one after the other on core 0 here, but a kernel cannot count on which blocks share
    # a core
    with pytest.raises(npulab.RaceError, match=r"race between blocks.*block 2, core 0.*block 0, core 0"):
        _run(_blocks, np.arange(128, dtype=np.float32), np.zeros(64, np.float32), True, False, 2, block_dim=4)


def test_launch_caps_block_dim_as_ascend_c_does():
    with pytest.raises(ValueError, match=r"block_dim 65,536 .* 1 to 65,535"):
        lang.launch(lambda x: None, 65536, X, chip="teach", mode="timing")


# -- arguments that are not whole numbers -------------------------------------------------------
@pytest.mark.parametrize("count, ok", [(16, True), (16.0, True), (np.int64(16), True), ("16", False),
                                       (16.7, False), (True, False), (None, False)])
def test_counts_are_whole_numbers(count, ok):
    def kernel(x):
        _, _, t = _scratch()
        lang.adds(t, t, 1.0, count)
    if ok:
        _run(kernel, X)
    else:
        with pytest.raises(npulab.ShapeError, match="adds: count must be a whole number"):
            _run(kernel, X)


def test_scalar_of_a_scalar_op_is_a_number():
    def kernel(x):
        _, _, t = _scratch()
        lang.muls(t, t, "a", 16)
    with pytest.raises(npulab.ShapeError, match="muls: scalar must be a number, got 'a'"):
        _run(kernel, X)


def test_init_buffer_and_tbuf_get_take_whole_positive_numbers():
    def slots(x):
        TPipe().init_buffer(Queue(VECIN, "q"), 2.5, 64)

    def size(x):
        _, buf, _ = _scratch()
        buf.get(np.float32, -5)
    with pytest.raises(npulab.ShapeError, match=r"init_buffer\(q\): buffer_num must be a whole number, got 2.5"):
        _run(slots, X)
    with pytest.raises(npulab.ShapeError, match="size must be positive, got -5"):
        _run(size, X)


def test_star_import_leaves_pythons_min_max_abs_alone():
    names = {}
    exec("from npulab.lang import *", names)
    assert not {"min", "max", "abs"} & set(names)
    assert lang.min is not min and callable(lang.max)


# -- tools -----------------------------------------------------------------------------------------
def test_widgets_name_a_core_the_trace_does_not_have():
    pytest.importorskip("ipywidgets")
    from npulab import widgets
    trace = _run(_blocks, X, np.zeros(64, np.float32), block_dim=2).trace
    for make in (widgets.occupancy, widgets.gantt):
        for core in (5, -1):
            with pytest.raises(ValueError, match=rf"core={core} is out of range; this trace used cores 0-1"):
                make(trace, core=core)
