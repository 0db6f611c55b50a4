"""A short tour: one vector add at every layer of npulab, all giving the same answer.

numpy (the golden) -> the kernel language launched by hand, on each side of the twins ->
the ops-nn style kernel with its host tiling -> the public interface ``npulab.ops.add``.
"""
import numpy as np

import npulab.ops as ops
from npulab import lang, twins
from npulab.kernels.elementwise import add_kernel, add_tiling


def test_one_add_at_every_layer():
    rng = np.random.default_rng(2024)
    x = rng.standard_normal(4099).astype(np.float16)
    y = rng.standard_normal(4099).astype(np.float16)
    golden = x + y                                                  # layer 0: numpy

    tiling = add_tiling(x.size, x.dtype, "teach")                   # layer 1: host tiling + kernel
    answers, cycles = [], []
    for side in ("python", "cython"):                               # both sides of the twins
        with twins.use(side):
            (_, _, z, _), trace = lang.launch(add_kernel, tiling.block_dim, x, y, np.zeros_like(x), tiling,
                                              chip="teach")
        answers.append(z)
        cycles.append(trace.cycles)
    answers.append(ops.add(x, y, chip="teach"))                     # layer 2: the public op

    for z in answers:
        assert np.array_equal(z, golden)
    assert cycles[0] == cycles[1] > 0
