"""Errors that teach: each is triggered by a small kernel, raised quickly, and names its parts."""
import time

import numpy as np
import pytest

import npulab
from npulab import lang
from npulab.lang import (PIPE_MTE2, PIPE_MTE3, PIPE_V, VECCALC, VECIN, VECOUT, TPipe, Queue, TBuf,
                         data_copy, set_flag, wait_flag)

X = np.arange(64, dtype=np.float16)


def scratch(nbytes=128):
    """A TBuf in UB, as a float16 tensor: scratch space with no queue, so no flags."""
    pipe = TPipe()
    buf = TBuf(VECCALC, "work")
    pipe.init_buffer(buf, nbytes)
    return buf.get(np.float16)


def raises_fast(exc, kernel, *args, chip="teach", **kw):
    t0 = time.perf_counter()
    with pytest.raises(exc) as info:
        lang.launch(kernel, 1, *args, chip=chip, **kw)
    assert time.perf_counter() - t0 < 1.0          # never a hang: the error comes at once
    return str(info.value)


def test_wait_that_is_never_set_is_a_deadlock():
    def kernel(x):
        t = scratch()
        data_copy(t, x, 64)
        wait_flag(PIPE_MTE2, PIPE_V, 0)           # nobody sets MTE2->V 0
        lang.adds(t, t, 1.0, 64)
    msg = raises_fast(npulab.DeadlockError, kernel, X)
    for part in ("core 0", "pipe V", "MTE2->V event 0", "wait_flag MTE2->V #0"):
        assert part in msg, msg


def test_deque_of_an_empty_queue_is_a_deadlock():
    def kernel(x):
        pipe = TPipe()
        q = Queue(VECIN, "in_x")
        pipe.init_buffer(q, 2, 128)
        q.deque()
    msg = raises_fast(npulab.DeadlockError, kernel, X)
    assert "in_x" in msg and "pipe V" in msg and "MTE2->V" in msg


def test_read_without_sync_is_a_race():
    def kernel(x):
        t = scratch()
        data_copy(t, x, 64)                        # MTE2 writes UB
        lang.adds(t, t, 1.0, 64)                   # V reads it: nothing orders them
    msg = raises_fast(npulab.RaceError, kernel, X)
    for part in ("UB bytes [0, 128)", "MTE2 'data_copy GM->UB 128 B'", "V 'adds 64'", "set_flag(MTE2, V"):
        assert part in msg, msg


def test_the_same_kernel_with_flags_is_race_free_and_correct():
    def kernel(x):
        t = scratch()
        data_copy(t, x, 64)
        set_flag(PIPE_MTE2, PIPE_V, 0)
        wait_flag(PIPE_MTE2, PIPE_V, 0)
        lang.adds(t, t, 1.0, 64)
        set_flag(PIPE_V, PIPE_MTE3, 0)
        wait_flag(PIPE_V, PIPE_MTE3, 0)
        data_copy(x, t, 64)
    (out,), _ = lang.launch(kernel, 1, X, chip="teach")
    assert np.array_equal(out, X + np.float16(1))


def test_overwrite_while_another_pipe_reads_is_a_race():
    def kernel(x, y):
        t = scratch()
        lang.duplicate(t, 2.0, 64)
        set_flag(PIPE_V, PIPE_MTE3, 0)
        wait_flag(PIPE_V, PIPE_MTE3, 0)
        data_copy(y, t, 64)                        # MTE3 reads UB
        lang.duplicate(t, 3.0, 64)                 # V overwrites it: write-after-read
    msg = raises_fast(npulab.RaceError, kernel, X, np.zeros_like(X))
    assert "overwrites what" in msg and "MTE3" in msg


def test_buffer_overflow_names_buffer_request_capacity_and_holders():
    def kernel(x):
        pipe = TPipe()
        pipe.init_buffer(Queue(VECIN, "in_x"), 2, 4096)
        pipe.init_buffer(Queue(VECOUT, "out_z"), 2, 8192)    # 8 + 16 KiB > 16 KiB of UB
    msg = raises_fast(npulab.BufferOverflowError, kernel, X)
    for part in ("UB overflow", "'out_z' asks for 16 KiB", "holds 16 KiB", "8 KiB", "'in_x' 8 KiB"):
        assert part in msg, msg


def test_copy_length_must_be_whole_blocks():
    def kernel(x):
        pipe = TPipe()
        q = Queue(VECIN, "in_x")
        pipe.init_buffer(q, 1, 128)
        t = q.alloc_tensor(np.float16)
        data_copy(t, x, 7)                          # 14 bytes
    msg = raises_fast(npulab.AlignmentError, kernel, X)
    assert "14 bytes" in msg and "32-byte block" in msg and "data_copy_pad" in msg


def test_misaligned_local_address_names_the_rule():
    def kernel(x):
        pipe = TPipe()
        q = Queue(VECIN, "in_x")
        pipe.init_buffer(q, 1, 128)
        q.alloc_tensor(np.float16)[3:]               # 6 bytes in
    msg = raises_fast(npulab.AlignmentError, kernel, X)
    assert "not 32-byte aligned" in msg and "in_x" in msg


def test_runaway_kernel_hits_the_instruction_budget():
    def kernel(x):
        t = scratch()
        while True:
            lang.adds(t, t, 1.0, 64)
    msg = raises_fast(npulab.InstructionBudgetError, kernel, X, budget=10_000)
    assert "10,000 instructions" in msg and "budget=" in msg


def test_event_ids_follow_the_chip():
    def kernel(x):
        set_flag(PIPE_MTE2, PIPE_V, 5)              # 910 has ids 0-3
    msg = raises_fast(ValueError, kernel, X, chip="910")
    assert "event id 5" in msg and "0-3" in msg


def test_queue_event_ids_are_not_for_hand_use():
    def kernel(x):
        pipe = TPipe()
        pipe.init_buffer(Queue(VECIN, "in_x"), 2, 128)
        set_flag(PIPE_MTE2, PIPE_V, 0)
    msg = raises_fast(npulab.SyncError, kernel, X)
    assert "held by queue 'in_x'" in msg


def test_allocating_more_than_buffer_num_is_an_error():
    def kernel(x):
        pipe = TPipe()
        q = Queue(VECIN, "in_x")
        pipe.init_buffer(q, 2, 128)
        q.alloc_tensor(np.float16)
        q.alloc_tensor(np.float16)
        q.alloc_tensor(np.float16)
    msg = raises_fast(npulab.SyncError, kernel, X)
    assert "all 2 buffers are held" in msg


def test_vector_op_checks_dtype_and_count():
    def kernel(x):
        pipe = TPipe()
        a, b = TBuf(VECCALC, "a"), TBuf(VECCALC, "b")
        pipe.init_buffer(a, 128)
        pipe.init_buffer(b, 128)
        lang.add(a.get(np.float16), a.get(np.float16), b.get(np.float32), 16)
    assert "must match" in raises_fast(npulab.ShapeError, kernel, X)

    def too_many(x):
        pipe = TPipe()
        a = TBuf(VECCALC, "a")
        pipe.init_buffer(a, 128)
        lang.adds(a.get(np.float16), a.get(np.float16), 1.0, 65)
    assert "count 65 is larger" in raises_fast(npulab.ShapeError, too_many, X)


def test_a_full_barrier_also_orders_the_pipes():
    def kernel(x):
        t = scratch()
        data_copy(t, x, 64)
        lang.pipe_barrier(lang.PIPE_ALL)            # everything before it finishes first
        lang.adds(t, t, 1.0, 64)
        lang.pipe_barrier(lang.PIPE_ALL)
        data_copy(x, t, 64)
    (out,), trace = lang.launch(kernel, 1, X, chip="teach")
    assert np.array_equal(out, X + np.float16(1))
    adds = trace.name.index("adds 64")
    copy_in = trace.name.index("data_copy GM->UB 128 B")
    assert trace.start[adds] >= trace.end[copy_in]


# -- the interface layer: a bad call is an npulab error that opens with the op or module ---------
def _bad_calls():
    import torch

    from npulab import ops
    from npulab.ops import nn
    x = np.ones((1, 2, 5, 5), np.float32)
    w = np.ones((3, 2, 3, 3), np.float32)
    return [
        (lambda: ops.max_pool2d(x, 2.5), "max_pool2d"),
        (lambda: ops.avg_pool2d(x, 2, stride="1"), "avg_pool2d"),
        (lambda: ops.conv2d(x, w, dilation=True), "conv2d"),
        (lambda: ops.conv2d(x, np.ones((3, 2, 7, 7), np.float32)), "conv2d"),
        (lambda: ops.conv_transpose2d(np.ones((1, 4, 1, 1), np.float32), np.ones((4, 2, 1, 1), np.float32),
                                      padding=2), "conv_transpose2d"),
        (lambda: ops.layer_norm(np.zeros((3, 0), np.float32), 0), "layer_norm"),
        (lambda: ops.batch_norm(np.ones((4, 3), np.float32), np.zeros(3, np.float32), np.ones(3, np.float32),
                                None, np.zeros(4, np.float32)), "batch_norm"),
        (lambda: ops.add(np.ones((3, 4), np.float32), np.ones(5, np.float32)), "add"),
        (lambda: ops.softmax(np.float32(1.0), 2), "softmax"),
        (lambda: ops.dispatch("Add", x), "Add"),
        (lambda: ops.dispatch("Gelu", x, approximate="erf"), "Gelu"),
        (lambda: nn.Conv2d.from_torch(torch.nn.Conv2d(2, 3, 3, padding_mode="circular")), "Conv2d.from_torch"),
        (lambda: nn.Conv2d.from_torch(torch.nn.ConvTranspose2d(2, 3, 3)), "Conv2d.from_torch"),
        (lambda: nn.Conv2d.from_torch(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3, track_running_stats=False)),
         "Conv2d.from_torch"),
        (lambda: nn.ConvTranspose2d(4, 6, 3, groups=4), "ConvTranspose2d"),
        (lambda: nn.LayerNorm(()), "LayerNorm"),
        (lambda: nn.Softmax.from_torch(torch.nn.Softmax()), "Softmax.from_torch"),
    ]


@pytest.mark.parametrize("i", range(len(_bad_calls())))
def test_bad_op_calls_raise_npulab_errors_that_name_the_op(i):
    call, op = _bad_calls()[i]
    with pytest.raises(npulab.NpuError) as info:
        call()
    assert isinstance(info.value, npulab.ShapeError)
    assert str(info.value).startswith(op + ":"), str(info.value)


def test_every_error_npulab_raises_is_an_npu_error():
    """errors.py promises it: a raise of a built-in error in the package is a bug, except the
    internal checks (AssertionError), the abstract methods (NotImplementedError) and a module's
    ``__getattr__`` (AttributeError, as the protocol asks)."""
    import ast
    from pathlib import Path
    import builtins
    root = Path(npulab.__file__).parent
    bad = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                name = getattr(exc, "id", None)
                builtin = getattr(builtins, name, None) if name else None
                if isinstance(builtin, type) and issubclass(builtin, BaseException) and \
                        builtin not in (AssertionError, NotImplementedError, AttributeError):
                    bad.append(f"{path.relative_to(root)}:{node.lineno} raises {name}")
    assert not bad, bad
