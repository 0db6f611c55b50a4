"""The queue calls (npulab.lang.queue and their Cython twin npulab._queue): a kernel's
traces, outputs and errors are the same on both, and each queue is made with the calls of its
launch's side of npulab.twins."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures import trace_digest
from npulab import ArgumentError, lang, twins
from npulab.errors import DeadlockError, SyncError
from npulab.lang import pipe as P
from npulab.lang import queue as Q


def test_a_queue_takes_the_calls_of_its_side(side):
    """Inside a kernel, those of the launch's side; outside, the switch's."""
    made = []

    def kernel(x):
        made.append(lang.Queue(lang.VECIN, "q"))

    lang.launch(kernel, 1, np.zeros(8, np.float32), chip="teach", core_type="aiv")
    outside = lang.Queue(lang.VECIN, "outside")
    for q in (made[0], outside):
        assert isinstance(q, lang.Queue) and q.twins == side
        assert isinstance(q, Q.QueueOps) == (side == "python")
    assert P._QUEUES["cython"].alloc_tensor is not P._QUEUES["python"].alloc_tensor


def test_a_queue_made_for_one_side_is_refused_by_a_launch_on_the_other():
    with twins.use("python"):
        q = lang.Queue(lang.VECIN, "early")

    def kernel(x):
        lang.TPipe().init_buffer(q, 2, 256)

    with pytest.raises(ArgumentError, match="queue 'early' was made for the python twins and this "
                                            "launch runs the cython ones"), twins.use("cython"):
        lang.launch(kernel, 1, np.zeros(8, np.float32), chip="teach", core_type="aiv")


def _queue_kernel(steps, depth, dtypes):
    """A copy-in / compute / copy-out pipeline over two queues, with the
    deque(dtype) reinterpretation and a depth other than 2; block b writes its own 256 values
    of y (blocks writing the same GM bytes race)."""
    def kernel(x, y):
        from npulab.lang import pipe as P
        y = y[lang.get_block_idx() * 256:]
        pipe = P.TPipe()
        qi, qo = lang.Queue(lang.VECIN, "in"), lang.Queue(lang.VECOUT, "out")
        pipe.init_buffer(qi, depth, 512)
        pipe.init_buffer(qo, depth, 512)
        for s in range(steps):
            dt = dtypes[s % len(dtypes)]
            t = qi.alloc_tensor(np.float32)
            lang.data_copy(t, x[(s % 4) * 64:], 64)
            qi.enque(t)
            u = qi.deque(dt)
            o = qo.alloc_tensor(np.float32)
            lang.adds(o, u.reinterpret_cast(np.float32), 1.0, 64)
            qo.enque(o)
            qi.free_tensor(u)
            o = qo.deque()
            lang.data_copy(y[(s % 4) * 64:], o, 64)
            qo.free_tensor(o)
    return kernel


@settings(max_examples=15, deadline=None)
@given(steps=st.integers(1, 9), depth=st.integers(1, 3), blocks=st.integers(1, 3),
       dtypes=st.lists(st.sampled_from([None, np.float32, np.int32]), min_size=1, max_size=3))
def test_queue_calls_twins_agree(steps, depth, blocks, dtypes):
    """The compiled calls and the readable ones: the same trace and outputs, bit for bit."""
    x = np.arange(256, dtype=np.float32)
    runs = []
    for side in twins.SIDES:
        with twins.use(side):
            runs.append(lang.launch(_queue_kernel(steps, depth, dtypes), blocks, x,
                                    np.zeros(256 * blocks, np.float32), chip="teach", core_type="aiv"))
    assert trace_digest(runs[0].trace, runs[0].outputs) == trace_digest(runs[1].trace, runs[1].outputs)


@pytest.mark.parametrize("misuse", ["deque_empty", "all_held", "free_enqueued", "foreign", "no_init"])
def test_queue_calls_twins_raise_the_same_errors(misuse):
    from npulab.lang import pipe as P
    messages = []
    for side in twins.SIDES:
        def kernel(x):
            pipe = P.TPipe()
            q, other = P.Queue(lang.VECIN, "q"), P.Queue(lang.VECIN, "other")
            if misuse == "no_init":
                q.alloc_tensor(np.float32)
            pipe.init_buffer(q, 2, 256)
            pipe.init_buffer(other, 1, 256)
            if misuse == "deque_empty":
                q.deque()
            t = q.alloc_tensor(np.float32)
            if misuse == "all_held":
                q.alloc_tensor(np.float32)
                q.alloc_tensor(np.float32)
            if misuse == "free_enqueued":
                q.enque(t)
                q.free_tensor(t)
            if misuse == "foreign":
                other.enque(t)
        with pytest.raises((SyncError, DeadlockError)) as info, twins.use(side):
            lang.launch(kernel, 1, np.zeros(64, np.float32), chip="teach", core_type="aiv")
        messages.append((type(info.value), str(info.value)))
    assert messages[0] == messages[1]


def test_queue_tensors_are_one_object_per_slot_and_dtype(side):
    seen = {}

    def kernel(x):
        pipe = lang.TPipe()
        q = lang.Queue(lang.VECIN, "q")
        pipe.init_buffer(q, 2, 256)
        for i in range(4):
            t = q.alloc_tensor(np.float32 if i < 3 else np.float16)
            seen.setdefault((t.slot, t.dtype), set()).add(id(t))
            q.enque(t)
            q.free_tensor(q.deque())

    lang.launch(kernel, 1, np.zeros(8, np.float32), chip="teach", core_type="aiv")
    assert {k: len(v) for k, v in seen.items()} == {(0, np.dtype(np.float32)): 1,
                                                    (1, np.dtype(np.float32)): 1,
                                                    (1, np.dtype(np.float16)): 1}
