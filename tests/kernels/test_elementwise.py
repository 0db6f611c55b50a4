"""Vector Add, the first operator: numerics bit for bit, tiling, and what double buffering buys."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import npulab
import npulab.ops as ops
from npulab.kernels.elementwise import add_tiling, launch_add


def _xy(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * 100).astype(dtype), (rng.standard_normal(n) * 100).astype(dtype)


def test_add_1000003_fp16_bit_exact_on_910():
    x, y = _xy(1_000_003, np.float16)
    z = ops.add(x, y, chip="910")
    assert z.dtype == np.float16 and z.shape == x.shape
    assert np.array_equal(z.view(np.uint16), (x + y).view(np.uint16))


@pytest.mark.parametrize("chip", ["teach", "310", "910", "910b"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_add_on_every_chip_and_dtype(chip, dtype):
    x, y = _xy(12_345, dtype, seed=1)
    z = ops.add(x, y, chip=chip)
    assert np.array_equal(z, x + y)        # one rounding, as numpy: exact equality


@settings(max_examples=40, deadline=None, derandomize=True)
@given(n=st.integers(1, 5000), dtype=st.sampled_from([np.float16, np.float32]),
       chip=st.sampled_from(["teach", "910"]))
def test_add_any_length_including_tails(n, dtype, chip):
    x, y = _xy(n, dtype, seed=n)
    assert np.array_equal(ops.add(x, y, chip=chip), x + y)


def test_add_keeps_shape_and_does_not_touch_inputs():
    x, y = _xy(6 * 7 * 5, np.float32)
    x3, y3 = x.reshape(6, 7, 5), y.reshape(6, 7, 5)
    xc, yc = x3.copy(), y3.copy()
    z = ops.add(x3, y3, chip="teach")
    assert z.shape == (6, 7, 5) and np.array_equal(z, x3 + y3)
    assert np.array_equal(x3, xc) and np.array_equal(y3, yc)


def test_add_rejects_bad_input():
    with pytest.raises(npulab.ShapeError, match=r"shape \(3,\) and y has \(4,\)"):
        ops.add(np.ones(3, np.float16), np.ones(4, np.float16))
    with pytest.raises(npulab.ShapeError, match="float16 or both float32"):
        ops.add(np.ones(3, np.float64), np.ones(3, np.float64))
    with pytest.raises(npulab.ShapeError, match="float16 or both float32"):
        ops.add(np.ones(3, np.float16), np.ones(3, np.float32))


def test_tiling_fits_ub_and_covers_every_element():
    for chip in npulab.chips():
        for n in (1, 17, 4096, 1_000_003):
            for bn in (1, 2):
                t = add_tiling(n, np.float16, chip, bn)
                assert 3 * bn * t.tile * 2 <= chip.buffers.ub             # 2 in + 1 out, bn slots each
                assert t.tile * 2 % 32 == 0 and t.block_factor * 2 % 32 == 0
                assert (t.block_dim - 1) * t.block_factor < n <= t.block_dim * t.block_factor
                assert t.block_dim <= chip.cores_for("aiv")      # Add is a vector kernel


def test_double_buffering_keeps_mte2_busy_on_910():
    x, y = _xy(1_000_003, np.float16)
    _, trace = launch_add(x, y, add_tiling(x.size, x.dtype, "910"), "910")
    s = trace.summary()
    assert s["mte2_ratio"] >= 0.80, s
    assert s["cores_used"] == 32


@pytest.mark.parametrize("chip", ["910", "teach"])
def test_single_buffering_takes_more_cycles(chip):
    x, y = _xy(200_000, np.float16)
    tile = add_tiling(x.size, x.dtype, chip, buffer_num=2).tile
    _, double = launch_add(x, y, add_tiling(x.size, x.dtype, chip, 2, tile), chip, "timing")
    _, single = launch_add(x, y, add_tiling(x.size, x.dtype, chip, 1, tile), chip, "timing")
    _, default_single = launch_add(x, y, add_tiling(x.size, x.dtype, "910", 1), "910", "timing")
    _, default_double = launch_add(x, y, add_tiling(x.size, x.dtype, "910"), "910", "timing")
    assert single.cycles > double.cycles
    assert default_single.cycles > default_double.cycles


def test_timing_mode_gives_the_same_trace_as_functional():
    x, y = _xy(50_001, np.float16)
    zf, tf = launch_add(x, y, add_tiling(x.size, x.dtype, "teach"), "teach", "functional")
    zt, tt = launch_add(x, y, add_tiling(x.size, x.dtype, "teach"), "teach", "timing")
    assert zt is None and zf is not None
    assert np.array_equal(tf.start, tt.start) and np.array_equal(tf.end, tt.end)
    assert tf.summary() == {**tt.summary(), "mode": "functional"}


def test_more_cores_do_not_scale_a_memory_bound_kernel_linearly():
    """Cores share GM bandwidth: 4x the cores buys far less than 4x the speed once GM is full."""
    x, y = _xy(400_000, np.float16)
    chip = npulab.get_chip("910")
    cycles = {}
    for cores in (8, 32):
        variant = dataclasses.replace(chip, ai_cores=cores)
        _, trace = launch_add(x, y, add_tiling(x.size, x.dtype, variant), variant, "timing")
        assert trace.summary()["cores_used"] == cores
        cycles[cores] = trace.cycles
    assert cycles[8] / cycles[32] < 2.0, cycles
    assert cycles[8] > cycles[32]


@pytest.mark.parametrize("chip", ["teach", "310", "910", "910b"])
@pytest.mark.parametrize("cores", [1, 4, None])
def test_add_never_beats_the_gm_roofline(chip, cores):
    """Reads and writes of a core share its part of GM: bytes / cycles stays under the roof."""
    spec = npulab.get_chip(chip)
    if cores is not None:
        spec = dataclasses.replace(spec, ai_cores=min(cores, spec.ai_cores),
                                   vector_cores=min(cores, spec.vector_cores))
    x, y = _xy(300_000, np.float16)
    _, trace = launch_add(x, y, add_tiling(x.size, x.dtype, spec), spec, "timing")
    s = trace.summary()
    moved = s["gm_read_bytes"] + s["gm_write_bytes"]
    assert moved / s["cycles"] <= spec.memory.gm_bytes_per_cycle
    assert s["hbm_read_bytes"] >= s["gm_read_bytes"]        # each range read once: no L2 hits


def test_add_tiling_over_fewer_cores_and_a_core_count_out_of_range():
    # a core sweep (lab 03): the same rules as over all the cores, with n / cores per block
    full = add_tiling(1 << 20, np.float16, "910")
    assert add_tiling(1 << 20, np.float16, "910", cores=32) == full
    four = add_tiling(1 << 20, np.float16, "910", cores=4)
    assert (four.block_dim, four.block_factor) == (4, 1 << 18)
    ub = npulab.get_chip("910").buffers.ub
    assert (full.tile, four.tile) == ((1 << 15) // 8, ub // (3 * 2) // 32 * 32 // 2)   # 8 a block; UB's limit
    for bad in (0, 33):
        with pytest.raises(npulab.ShapeError, match=rf"cores={bad} must be 1 to the 32 vector cores of chip '910'"):
            add_tiling(1 << 20, np.float16, "910", cores=bad)
