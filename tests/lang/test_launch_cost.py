"""What starting a launch and its blocks costs (the chip's [launch] figures, lang.launch)."""
import numpy as np

from npulab import get_chip, lang
from npulab.sim.isa import Op


def _touch(x):
    """A kernel that does almost nothing: one 32-byte copy in and out per block."""
    pipe = lang.TPipe()
    q = lang.Queue(lang.VECIN, "x")
    pipe.init_buffer(q, 1, 32)
    t = q.alloc_tensor(np.float16)
    lang.data_copy(t, x[lang.get_block_idx() * 16:], 16)
    q.enque(t)
    q.free_tensor(q.deque())


def test_a_launch_pays_its_start_and_each_block_its_own():
    chip = get_chip("910")
    spec = chip.launch
    assert spec.launch_cycles > 0 and spec.block_start_cycles > 0
    one = lang.launch(_touch, 1, np.zeros(16 * 64, np.float16), chip="910", mode="timing").trace
    starts = np.flatnonzero(one.op == Op.SCALAR)
    assert len(starts) == 1 and (one.start[starts[0]], one.end[starts[0]]) == (0, spec.block_start_cycles)
    # the first copy waits for it: nothing of the body runs before the block has started
    assert one.start[one.op == Op.COPY_GM_TO_UB].min() >= spec.block_start_cycles
    # the launch comes before the cores' time, and is part of the launch's
    assert one.launch_cycles == spec.launch_cycles and one.cycles == spec.launch_cycles + one.core_time
    # two blocks a core: each pays its block start, the launch is paid once
    two = lang.launch(_touch, 2 * chip.ai_cores, np.zeros(16 * 64, np.float16), chip="910", mode="timing").trace
    assert (two.op == Op.SCALAR).sum() == 2 * chip.ai_cores
    assert two.launch_cycles == spec.launch_cycles
    assert two.core_time > one.core_time + spec.block_start_cycles


def test_a_hundred_small_launches_are_mostly_launch_cost():
    """At batch 1 a network is a hundred small launches: for a tiny kernel the launch's own
    cost is most of the time."""
    chip = get_chip("910")
    tr = lang.launch(_touch, 1, np.zeros(16, np.float16), chip="910", mode="timing").trace
    assert chip.launch.launch_cycles > tr.cycles / 2
