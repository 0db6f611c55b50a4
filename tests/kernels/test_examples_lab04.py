"""Lab 04's example kernels beside SiLU compute what they claim and use the slots they are given:
Mish (vector-heavy, eight fp16 steps in the output slot) and the gate of SwiGLU (two inputs),
each against a numpy construction of the same fp16 steps (the fp16 row of the tolerance table)
and against the exact function in float64 (a bound on what the fp16 steps lose)."""
from __future__ import annotations

import numpy as np
import pytest

from fixtures import assert_close, rand
from npulab.chips import get_chip
from npulab.kernels.examples import mish, silu, swiglu_gate
from npulab.plot import queue_slot_bytes, queue_slots

TEACH = get_chip("teach")
H = np.float16


def _fp32(fn, x):
    """What the vector unit's slow instructions do: compute in fp32, round to fp16."""
    return fn(x.astype(np.float32)).astype(H)


def _mish_steps(x):
    z = _fp32(np.exp, x)
    z = (z + H(1)).astype(H)
    z = (z * z).astype(H)
    z = (z + H(1)).astype(H)
    z = _fp32(lambda v: 1 / v, z)
    z = (z * H(-2)).astype(H)
    z = (z + H(1)).astype(H)
    return (z * x).astype(H)


def _gate_steps(a, b):
    z = (a * H(-1)).astype(H)
    z = _fp32(np.exp, z)
    z = (z + H(1)).astype(H)
    z = (a.astype(np.float32) / z.astype(np.float32)).astype(H)
    return (z * b).astype(H)


@pytest.mark.parametrize("buffer_num, tile", [(1, None), (2, None), (3, 1024), (2, 512)])
def test_mish_computes_mish_with_its_slots(buffer_num, tile):
    with np.errstate(over="ignore"):
        x = np.concatenate([rand(65536 - 16, H, "mish x", 3.0), np.array([-12, -6, -1, 0, 1, 6, 9, 12] * 2, H)])
        z, trace = silu.launch_silu(mish.mish_kernel(buffer_num, tile), x, "teach")
        assert_close(z, _mish_steps(x))
    xd = x.astype(np.float64)
    np.testing.assert_allclose(z.astype(np.float64), xd * np.tanh(np.log1p(np.exp(xd))), atol=2e-2, rtol=1e-2)
    assert np.array_equal(z[-2:], x[-2:])                 # u^2 overflows fp16: 2 / inf = 0, z = x
    want = tile or silu.ub_tile(TEACH.buffers.ub, buffer_num)
    assert queue_slots(trace) == {"in_x": buffer_num, "out_z": buffer_num}
    assert queue_slot_bytes(trace) == {"in_x": want * 2, "out_z": want * 2}


@pytest.mark.parametrize("cls, slots, tile", [(swiglu_gate.GateFirst, (1, 1, 1), swiglu_gate.FIRST_TILE),
                                              (swiglu_gate.gate_kernel(2, 1360), (2, 2, 2), 1360),
                                              (swiglu_gate.gate_kernel((2, 2, 1), 1024), (2, 2, 1), 1024)])
def test_gate_computes_silu_a_times_b_with_its_slots(cls, slots, tile):
    a, b = rand(65536, H, "gate a"), rand(65536, H, "gate b")
    z, trace = swiglu_gate.launch_gate(cls, a, b, "teach")
    assert_close(z, _gate_steps(a, b))
    ad, bd = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(z.astype(np.float64), ad / (1 + np.exp(-ad)) * bd, atol=1e-2, rtol=4e-3)
    assert queue_slots(trace) == dict(zip(("in_a", "in_b", "out_z"), slots))
    assert set(queue_slot_bytes(trace).values()) == {tile * 2}


def test_the_gate_pays_for_slots_only_with_a_long_tile():
    # what lab 04's challenge rests on: from the first version, neither a second slot alone nor
    # the longest tile alone comes within 150% of both together
    a, b = rand(65536, H, "gate a"), rand(65536, H, "gate b")
    cycles = {k: swiglu_gate.launch_gate(swiglu_gate.gate_kernel(bn, t), a, b, "teach", "timing")[1].cycles
              for k, (bn, t) in {"first": (1, 256), "slots": (2, 256), "tile": (1, 2720), "both": (2, 1360)}.items()}
    assert min(cycles["first"], cycles["slots"], cycles["tile"]) > 1.5 * cycles["both"], cycles
