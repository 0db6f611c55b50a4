"""Pinned traces: a few launches whose whole trace (every column, name, route, allocation and
the GM statistics) and outputs must not change when the simulator is made faster.

These are regression pins, not figures: the digests were recorded from the simulator before its
speed work (issue 4) and any optimisation must reproduce them bit for bit. If the *model* is
changed on purpose (new costs, new instructions), record the new digests and say so in the
commit: ``PYTHONPATH=tests python tests/sim/test_trace_pins.py`` prints them (the digest is
``fixtures.trace_digest``). Re-recorded when copies began to pay their start-up as latency
instead of occupancy (the ``busy_end`` column came in then), and when mmads did too and a core's
GM reads and writes began to split its share only while they overlap, and when vector
instructions did too (the two Add pins: the same cycles, 629 and 2675, since each tile's one Add
still completes when it did; the vector pipe is busy for its repeats only), and when every GM
copy, a read issued before the core's first write included, was charged for the writes it really
overlaps, with a core's reads and writes splitting its share in proportion to all the bytes each
moves (the two Add pins: 629 -> 625 and 2,675 -> 2,670 cycles; the matmul pins did not change),
and when the energy figures were re-reasoned (E1, E2 of data/FACTS.md), an mmad began to pay for
the operands it streams and L2 hits L2's energy: only the energy column changed (the digests
without it are the same),
and when the 910's cube output began to leave L0C through UB, as on the real chip (L0C -> UB on the
vector pipe, the bias, cast and ReLU on the vector unit, MTE3 writing NZ -> ND; no FixPipe): the
four 910 matmul pins, 974 -> 1,298 (bias + ReLU), 1,026 -> 1,290 (int8), 70,789 -> 72,019 (4096^3
sampled) and 4,146 -> 4,603 cycles (seed tiling); the teaching chip keeps FixPipe and its pin,
and when the calibrated model came in (issue 15: issue cost, cube fill and drain, L1's shared
port, UB banks, launch and block-start costs, sustained HBM, a line-level L2): every pin, in
cycles with the launch (the cores' time in brackets) 625 -> 637 (teach Add), 2,670 -> 5,968
(2,968), 1,298 -> 4,596 (1,596), 1,290 -> 4,443 (1,443), 2,544 -> 2,665 (teach matmul),
72,019 -> 75,911 (72,911) and 4,603 -> 7,868 (4,868).
"""
from __future__ import annotations

import numpy as np
import pytest

from fixtures import trace_digest
from npulab.kernels.elementwise import add_tiling, launch_add
from npulab.kernels.matmul import MatmulProblem, default_tiling, launch_matmul, make_tiling, simulate


def _operands(m, n, k, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.int8:
        return (rng.integers(-128, 128, (1, m, k)).astype(np.int8),
                rng.integers(-128, 128, (1, k, n)).astype(np.int8))
    return (rng.standard_normal((1, m, k)).astype(dtype), rng.standard_normal((1, k, n)).astype(dtype))


def add_teach():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(5000).astype(np.float16)
    y = rng.standard_normal(5000).astype(np.float16)
    z, tr = launch_add(x, y, add_tiling(x.size, x.dtype, "teach"), "teach", "functional")
    return tr, [z]


def add_910_single_buffer():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(70_000).astype(np.float32)
    y = rng.standard_normal(70_000).astype(np.float32)
    z, tr = launch_add(x, y, add_tiling(x.size, x.dtype, "910", 1), "910", "functional")
    return tr, [z]


def matmul_910_bias_relu():
    a, b = _operands(300, 200, 150, np.float16, seed=3)
    bias = np.random.default_rng(4).standard_normal(200).astype(np.float32)
    t = default_tiling(MatmulProblem(1, 300, 200, 150, "float16", has_bias=True, relu=True), "910")
    c, tr = launch_matmul(a, b, t, bias, chip="910")       # functional, race-checked
    return tr, [c]


def matmul_910_int8_trans():
    a, b = _operands(70, 90, 130, np.int8, seed=5)
    t = make_tiling(MatmulProblem(1, 70, 90, 130, "int8", trans_a=True, trans_b=True), "910", "seed")
    c, tr = launch_matmul(a.transpose(0, 2, 1).copy(), b.transpose(0, 2, 1).copy(), t, chip="910")
    return tr, [c]


def matmul_teach_fp32_tails():
    a, b = _operands(67, 45, 131, np.float32, seed=6)
    t = default_tiling(MatmulProblem(1, 67, 45, 131, "float32"), "teach")
    c, tr = launch_matmul(a, b, t, chip="teach")
    return tr, [c]


def matmul_910_timing_4096_sampled():
    t = default_tiling(MatmulProblem(1, 4096, 4096, 4096, "float16"), "910")
    return simulate(t, "910", sample_loops=2), []


def matmul_910_timing_seed():
    t = make_tiling(MatmulProblem(1, 512, 384, 640, "float16"), "910", "seed")
    return simulate(t, "910"), []


CASES = {
    "add_teach": (add_teach, "61eb8ad5ed057edd5f96d94e"),
    "add_910_single_buffer": (add_910_single_buffer, "e168288edab00920fc57068f"),
    "matmul_910_bias_relu": (matmul_910_bias_relu, "fc0773c21d92086427637b3d"),
    "matmul_910_int8_trans": (matmul_910_int8_trans, "b4deb305d225d020b17a7403"),
    "matmul_teach_fp32_tails": (matmul_teach_fp32_tails, "e4469407ddb6e1d8cf06d34c"),
    "matmul_910_timing_4096_sampled": (matmul_910_timing_4096_sampled, "64cb96feb8dec84e5cd3fd38"),
    "matmul_910_timing_seed": (matmul_910_timing_seed, "fa09ed07340a94962a728526"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_trace_is_pinned(case):
    make, digest = CASES[case]
    tr, outputs = make()
    assert len(tr) > 0
    assert trace_digest(tr, outputs) == digest, f"the trace of {case} changed"


def test_digest_sees_a_one_cycle_change():
    tr, outputs = add_teach()
    before = trace_digest(tr, outputs)
    tr.end = tr.end.copy()
    tr.end[len(tr.end) // 2] += 1
    assert trace_digest(tr, outputs) != before


if __name__ == "__main__":
    for name in sorted(CASES):
        tr, outputs = CASES[name][0]()
        print(f'    "{name}": ({CASES[name][0].__name__}, "{trace_digest(tr, outputs)}"),')


def test_block_column_follows_the_blocks():
    """Blocks are recorded as runs when they start (not per instruction): each block's
    instructions carry its index and end with its 'end of block' barrier."""
    t = make_tiling(MatmulProblem(1, 96, 64, 48, "float16"), "teach", "naive", block_dim=5)
    tr = simulate(t, "teach")
    for core in range(len(tr.core_cycles)):
        blocks = tr.block[tr.core == core]
        names = [n for n, c in zip(tr.name, tr.core) if c == core]
        assert list(np.unique(blocks)) == list(range(core, 5, len(tr.core_cycles)))
        assert np.all(np.diff(blocks) >= 0)
        ends = [i for i, n in enumerate(names) if n.startswith("end of block")]
        assert [names[i] for i in ends] == [f"end of block {b}" for b in np.unique(blocks)]
        assert [int(blocks[i]) for i in ends] == list(np.unique(blocks))


def test_allocations_are_built_on_first_use_and_kept():
    tr, _ = add_teach()
    first = tr.allocations
    assert first and tr.allocations is first
    assert all(0 <= a.start <= a.end <= tr.cycles for a in first)
