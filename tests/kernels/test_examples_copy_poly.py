"""The teaching kernels of labs 00 and 01's challenges compute what they claim: the GM copy
returns its input for any plan that fits, refuses plans that cannot run, and is limited by the
cores' pipes or by GM as the chip figures say; the polynomial kernel runs any Compute stage it is
given, and its textbook body matches the float64 polynomial within the fp16 tolerance."""
from __future__ import annotations

import math

import numpy as np
import pytest

from npulab import lang
from npulab.chips import get_chip
from npulab.errors import ShapeError
from npulab.kernels.examples import gm_copy, poly
from npulab.ops.tolerance import tol

C910 = get_chip("910")


@pytest.mark.parametrize("n, plan", [(4096, gm_copy.CopyPlan()), (70_000, gm_copy.CopyPlan(3, 2048)),
                                     (1 << 16, gm_copy.CopyPlan(32, 1024))])
def test_copy_returns_its_input(n, plan):
    x = (np.arange(n) % 2048).astype(np.float16)
    y, trace = gm_copy.launch_copy(x, plan, "910", mode="functional")
    assert np.array_equal(y, x)
    assert trace.block_dim <= plan.block_dim


@pytest.mark.parametrize("plan, words", [(gm_copy.CopyPlan(1, 128 * 1024), "UB"),
                                         (gm_copy.CopyPlan(1, 1000), "32"),
                                         (gm_copy.CopyPlan(33, 1024), "vector cores"),
                                         (gm_copy.CopyPlan(0, 1024), "block_dim")])
def test_copy_refuses_plans_that_cannot_run(plan, words):
    with pytest.raises(ShapeError, match=words):
        gm_copy.check_plan(plan, "910")


def test_copy_needs_cores_and_bytes_in_flight():
    x = np.zeros(4 * 2**20 // 2, np.float16)
    cycles = {p: gm_copy.launch_copy(x, gm_copy.CopyPlan(*p), "910")[1].cycles
              for p in [(1, 65536), (32, 1024), (32, 65536)]}
    best = cycles[(32, 65536)]
    floor = 2 * x.nbytes / C910.gm_sustained_bytes_per_cycle
    assert floor < best < 1.5 * floor + C910.launch.launch_cycles       # GM-bound, near its floor
    assert cycles[(1, 65536)] > 3 * best                                  # one core's pipes
    assert cycles[(32, 1024)] > 1.5 * best                                # too few bytes in flight


def test_poly_coefficients_are_exp_taylor():
    assert len(poly.COEFFS) == poly.DEGREE + 1
    assert all(math.isclose(c * math.factorial(k), 1.0) for k, c in enumerate(poly.COEFFS))


def _horner(y, x, work, consts, count):
    lang.duplicate(y, poly.COEFFS[-1], count)
    for c in poly.COEFFS[-2::-1]:
        lang.mul(y, y, x, count)
        lang.adds(y, y, c, count)


@pytest.mark.parametrize("body", [poly.power_form, _horner])
def test_poly_bodies_match_the_float64_polynomial(body):
    x = np.random.default_rng(3).uniform(-1, 1, 5008).astype(np.float16)
    y, _ = poly.launch_poly(body, x, "910")
    want = np.polynomial.polynomial.polyval(x.astype(np.float64), poly.COEFFS)
    np.testing.assert_allclose(y.astype(np.float64), want, **tol(np.float16))
    np.testing.assert_allclose(want, np.exp(x.astype(np.float64)), rtol=1e-12)


def test_poly_refuses_a_partial_block():
    with pytest.raises(ShapeError, match="multiple of 16"):
        poly.launch_poly(poly.power_form, np.zeros(40 + 3, np.float16), "910")


def test_poly_tiling_fits_the_ub_and_issues_the_bodys_passes():
    t = poly.poly_tiling(1 << 21, "910")
    used = (2 * poly.BUFFER_NUM + poly.WORK_TILES) * t.tile * 2 + len(poly.COEFFS) * C910.vector.repeat_bytes
    assert used <= C910.buffers.ub and t.block_dim == C910.vector_units
    _, slow = poly.launch_poly(poly.power_form, np.zeros(1 << 20, np.float16), "910", "timing")
    _, fast = poly.launch_poly(_horner, np.zeros(1 << 20, np.float16), "910", "timing")
    assert fast.cycles < slow.cycles                                      # 2 passes a degree, not 3
