"""``npulab bench calibrate``: the calibration set of data/FACTS.md, simulated beside the
published figures.

Each row runs one published measurement on the simulator the way it was measured on the real
chip and reports ``published``, ``simulated``, their ``error`` (in the row's ``error_unit``:
percentage points of utilization, or percent of the published figure) and whether that error is
within the row's ``tolerance``. The rows check the mechanisms of the timing model; nothing in
the model is fitted to them (FACTS.md, "Calibration set"), so a row outside its tolerance is
reported as it is, with the pipe ratios that say where the cycles went.

* ``C1-cube``: AIBench's cube microbenchmark on the 910 (:func:`npulab.bench.micro.cube`),
  utilization against 216 of 256 TFLOPS;
* ``C1-vector``: its vector microbenchmark (:func:`npulab.bench.micro.vector`), GFLOPS against
  3,390;
* ``C2-time`` and ``C2-mac``: pto-isa's 6144^3 fp16 GEMM on the Ascend910B1 as its README
  describes it: its tiling (base block 128 x 256 x 64, four K steps in L1, B stored N x K), its
  fp32 C (L0C written out unconverted: twice the bytes of an fp16 C) and its static split of
  the cores (4 rows of 6, each core one 1536 x 1024 block of C); the utilization its 1.504 ms
  means on this chip's peak, and the cube busy ratio msprof reported (86%). Beside msprof's MTE2
  ratio (95%) the row gives the simulated MTE2's busy ratio and its span ratio (issue to end,
  a copy's latency included: :meth:`npulab.sim.trace.Trace.span_ratios`), the two readings of
  what msprof counts.
"""
from __future__ import annotations

from ..chips import get_chip
from ..kernels.matmul import MatmulProblem, make_tiling, simulate
from ..sim.cost import lower_bound_cycles
from . import micro

#: C2: 6144^3 fp16 on the Ascend910B1 in 1.504 ms, cube (mac) 86% and MTE2 95% busy
C2_SHAPE = (6144, 6144, 6144)
C2_MS = 1.504
C2_MAC_RATIO = 0.86
C2_MTE2_RATIO = 0.95
#: C2's tiling: L1 block 128 x 256 with K 256 (four 64-deep L0 steps), L1 and L0 double
#: buffered; one 128 x 256 fp32 accumulator fills the 910B's L0C, so one L0C buffer
C2_TILES = (128, 256, 256, 64, 2, 2, 1)
#: C2's C is float32, and its cores form a static grid of 4 rows (M) by 6 (N)
C2_C_DTYPE = "float32"
C2_CORE_ROWS = 4
#: C1: AIBench on the 910
C1_CUBE_TFLOPS, C1_CUBE_PEAK_TFLOPS = 216.0, 256.0
C1_VECTOR_GFLOPS = 3390.0

PP_TOLERANCE = 5.0        # the acceptance: utilization within 5 percentage points
VECTOR_TOLERANCE = 10.0   # and the vector microbenchmark within 10 %


def _pp_row(row_id, what, source, chip, published, simulated, **extra) -> dict:
    error = (simulated - published) * 100
    return {"id": row_id, "measurement": what, "source": source, "chip": chip, "unit": "utilization",
            "published": published, "simulated": simulated, "error": error, "error_unit": "pp",
            "tolerance": PP_TOLERANCE, "within_tolerance": abs(error) <= PP_TOLERANCE, **extra}


def cube_row() -> dict:
    r = micro.cube("910")
    return _pp_row("C1-cube", "Ascend 910 cube unit, fp16 microbenchmark", "C1", "910",
                   C1_CUBE_TFLOPS / C1_CUBE_PEAK_TFLOPS, r["utilization"],
                   published_tflops=C1_CUBE_TFLOPS, simulated_tflops=r["tflops"], run=r)


def vector_row() -> dict:
    r = micro.vector("910")
    error = (r["gflops"] / C1_VECTOR_GFLOPS - 1) * 100
    return {"id": "C1-vector", "measurement": "Ascend 910 vector unit, fp16 microbenchmark", "source": "C1",
            "chip": "910", "unit": "GFLOPS", "published": C1_VECTOR_GFLOPS, "simulated": r["gflops"],
            "error": error, "error_unit": "%", "tolerance": VECTOR_TOLERANCE,
            "within_tolerance": abs(error) <= VECTOR_TOLERANCE, "run": r}


def gemm_rows(chip: str = "910b") -> list[dict]:
    """C2 on the simulator: the published kernel's tiling, C dtype and core split, simulated in
    full (timing-only)."""
    spec = get_chip(chip)
    m, n, k = C2_SHAPE
    p = MatmulProblem(1, m, n, k, "float16", trans_b=True, c_dtype=C2_C_DTYPE)
    t = make_tiling(p, spec, C2_TILES, name="pto-isa")
    t = t.with_tiles(swizzle_offset=C2_CORE_ROWS, swizzle_direction=2)
    tr = simulate(t, spec)
    lb = lower_bound_cycles(spec, p.macs, p.np_dtype)
    ratios = tr.pipe_ratios()
    ms = tr.cycles / (spec.clock_ghz * 1e6)
    published_util = lb / (C2_MS * spec.clock_ghz * 1e6)
    common = {"shape": list(C2_SHAPE), "tiling": t.recipe(), "cycles": int(tr.cycles),
              "published_ms": C2_MS, "simulated_ms": ms,
              "published_mte2_ratio": C2_MTE2_RATIO, "simulated_mte2_ratio": ratios["mte2_ratio"],
              "simulated_mte2_span_ratio": tr.span_ratios()["mte2_ratio"],
              "pipe_ratios": ratios}
    what = f"GEMM {m} x {n} x {k} fp16, {spec.sku}, {t.tiles.block_dim} cube cores"
    return [_pp_row("C2-time", what + ": time as utilization of the chip's peak", "C2", spec.name,
                    published_util, lb / tr.cycles, **common),
            _pp_row("C2-mac", what + ": cube busy ratio (msprof aic_mac_ratio)", "C2", spec.name,
                    C2_MAC_RATIO, ratios["mac_ratio"], **common)]


def calibrate() -> list[dict]:
    """Every row of the calibration set, simulated."""
    return [cube_row(), vector_row(), *gemm_rows()]


def format_rows(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        if r["error_unit"] == "pp":
            pub, sim = f"{r['published']:.1%}", f"{r['simulated']:.1%}"
            err = f"{r['error']:+.1f} pp"
        else:
            pub, sim = f"{r['published']:,.0f}", f"{r['simulated']:,.0f}"
            err = f"{r['error']:+.1f} %"
        tol = f"{r['tolerance']:g} {r['error_unit']}"
        lines.append(f"{r['id']:<10} published {pub:>8}  simulated {sim:>8}  error {err:>9} (tolerance {tol}) "
                     f"{'ok' if r['within_tolerance'] else 'OUTSIDE':<7}  {r['measurement']}")
    return "\n".join(lines)


__all__ = ["calibrate", "cube_row", "vector_row", "gemm_rows", "format_rows"]
