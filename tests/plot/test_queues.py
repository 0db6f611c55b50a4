"""What npulab.plot.queues reads off a trace is what the kernel asked for: the slots each queue
used and their size, its GM -> UB copies, and one buffer's allocations as a memory plan cut at a
cycle."""
import numpy as np
import pytest

import npulab.plot as P
from npulab import lang

TILES = 5


def _kernel(x, z):
    """in_x: 2 slots of 512 B, out_z: 3 slots of 1 KiB, a TBuf (no slots), a queue in L1; TILES
    tiles of 256 fp16 copied in and out, each block its own part of x and z."""
    base = lang.get_block_idx() * TILES * 256
    x, z = x[base:], z[base:]
    pipe = lang.TPipe()
    in_x, out_z = lang.Queue(lang.VECIN, "in_x"), lang.Queue(lang.VECOUT, "out_z")
    pipe.init_buffer(in_x, 2, 512)
    pipe.init_buffer(out_z, 3, 1024)
    scratch = lang.TBuf(lang.VECCALC, "scratch")
    pipe.init_buffer(scratch, 256)
    l1 = lang.Queue(lang.A1, "l1")
    pipe.init_buffer(l1, 1, 2048)
    t = l1.alloc_tensor(np.float16)
    lang.data_copy(t, x, 256)                             # GM -> L1: not a copy into UB
    l1.free_tensor(t)
    for i in range(TILES):
        v = in_x.alloc_tensor(np.float16)
        lang.data_copy(v, x[i * 256:], 256)
        in_x.enque(v)
        v = in_x.deque()
        o = out_z.alloc_tensor(np.float16)
        lang.muls(o, v, 2.0, 256)
        out_z.enque(o)
        in_x.free_tensor(v)
        o = out_z.deque()
        lang.data_copy(z[i * 256:], o, 256)
        out_z.free_tensor(o)
    scratch.get(np.float16)


@pytest.fixture(scope="module")
def trace():
    x = (np.arange(2 * TILES * 256) % 1000).astype(np.float16)
    (_, z), tr = lang.launch(_kernel, 2, x, np.zeros_like(x), chip="teach")
    assert np.array_equal(z, 2 * x)
    return tr


@pytest.mark.parametrize("core", [0, 1])
def test_queue_slots_and_their_bytes(trace, core):
    assert P.queue_slots(trace, core) == {"in_x": 2, "l1": 1, "out_z": 3}
    assert P.queue_slot_bytes(trace, core) == {"in_x": 512, "l1": 2048, "out_z": 1024}
    assert P.copies_in(trace, core) == TILES
    assert P.copies_in(trace, 2) == 0                     # a core that did not run


def test_buffer_plan_is_the_buffers_allocations_cut_at_a_cycle(trace):
    ub = [a for a in trace.allocations if a.core == 0 and a.buffer == "UB"]
    plan = P.buffer_plan(trace, "UB")
    assert plan == [(a.owner, a.start, a.end, a.offset, a.size) for a in ub]
    assert {name for name, *_ in plan} >= {"in_x[0]", "in_x[1]", "out_z[2]", "scratch"}
    assert [p[0] for p in P.buffer_plan(trace, "L1", core=1)] == ["l1[0]"]
    cut = trace.cycles // 3
    early = P.buffer_plan(trace, "UB", until=cut)
    assert early == [(a.owner, a.start, min(a.end, cut), a.offset, a.size) for a in ub if a.start < cut]
    assert 0 < len(early) < len(plan) and all(end <= cut for _, _, end, _, _ in early)
    P.plan_tensors(plan)                                  # what memory_plan draws: a valid plan
