"""Lab 01's exercise cases (see labcases/__init__.py), written from the lab's specs and the 910's
figures, independently of the checkers; 01.bound is still in tests/labs/test_exercises.py."""
import npulab
from npulab import lang
from npulab.kernels.examples import poly

C910 = npulab.get_chip("910")
R, C = 4096, 1024                      # LayerNorm's rows x columns


def intensity(m, n, k):
    return 2 * m * n * k / (2 * (m * k + k * n + m * n))


def intensity_one_flop(m, n, k):
    return m * n * k / (2 * (m * k + k * n + m * n))


def intensity_no_c(m, n, k):
    return 2 * m * n * k / (2 * (m * k + k * n))


def intensity_elements(m, n, k):
    return 2 * m * n * k / (m * k + k * n + m * n)


def blank3(m, n, k):
    ...


def smallest_m(ridge, flop_per_byte=intensity):
    return next(m for m in range(1, 100_000) if flop_per_byte(m, 4096, 4096) >= ridge)


CUBE_RIDGE = 256 * 1000 / 1200          # 256 TFLOPS over 1200 GB/s
VECTOR_RIDGE = 8 * 1000 / 1200          # the fp16 vector peak, 8 TFLOPS
MIN_M = smallest_m(CUBE_RIDGE)
assert MIN_M == 239

# LayerNorm in fp32: widen, sum, centre, square, sum, normalise, gamma, beta, round: 9 passes of
# 64 fp32 values a repeat, over a 32nd of the rows
LN_CYCLES = 9 * R * C / 32 / 64


def horner_fused(y, x, work, consts, count):
    lang.muls(y, x, poly.COEFFS[poly.DEGREE], count)
    lang.adds(y, y, poly.COEFFS[poly.DEGREE - 1], count)
    for k in range(poly.DEGREE - 2, -1, -1):
        lang.fused_mul_add_const(y, x, consts[k], count)


def horner_upside_down(y, x, work, consts, count):
    """Horner's steps with the coefficients in the wrong order."""
    lang.duplicate(y, poly.COEFFS[0], count)
    for c in poly.COEFFS[1:]:
        lang.mul(y, y, x, count)
        lang.adds(y, y, c, count)


def powers_from_scratch(y, x, work, consts, count):
    """y += c[k] * x**k with x**k recomputed for every k: right, and slow."""
    p, t = work
    lang.duplicate(y, poly.COEFFS[0], count)
    for k in range(1, poly.DEGREE + 1):
        lang.muls(p, x, 1.0, count)
        for _ in range(k - 1):
            lang.mul(p, p, x, count)
        lang.muls(t, p, poly.COEFFS[k], count)
        lang.add(y, y, t, count)


def wrong_arguments(y, x, work, consts, count):
    lang.mul(y, x, count)


def blank5(y, x, work, consts, count):
    ...


CASES: dict = {
    "01.matmul_intensity": (intensity, [(intensity_one_flop, "two FLOPs"), (intensity_no_c, "bytes of C"),
                                        (intensity_elements, "2 bytes"), (3.0, "function")], blank3),
    "01.min_tokens": (MIN_M, [(smallest_m(VECTOR_RIDGE), "vector unit's ridge"), (MIN_M - 1, "still below"),
                              (smallest_m(CUBE_RIDGE / 1000), "units"),
                              (smallest_m(CUBE_RIDGE, intensity_no_c), "output's bytes"),
                              (16, "below the cube's ridge"), (float(MIN_M), "whole number")], ...),
    "01.ln_vector_cycles": (LN_CYCLES, [(LN_CYCLES / 2, "fp32"), (8 * R * C / 32 / 256, "fp16 peak"),
                                        (LN_CYCLES * 32, "one core's cycles"), (3 * R * C / 32 / 64, "count every step"),
                                        ("18432", "a number")], ...),
    "01.ln_bound": ({"910": "vector", "910b": "memory-bound"},
                    [({"910": "memory", "910b": "memory"}, "vector floor of exercise 4"),
                     ({"910": "vector", "910b": "vector"}, "AIV cores"),
                     ({"910": "compute", "910b": "memory"}, "'vector' or 'memory'"),
                     (["vector", "memory"], "dict")], ...),
    "01.poly_body": (horner_fused, [(poly.power_form, "Fewer passes"), (powers_from_scratch, "Fewer passes"),
                                    (horner_upside_down, "highest coefficient"), (wrong_arguments, "each lang call"),
                                    (poly, "body function")], blank5),
}
