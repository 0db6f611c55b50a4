"""Lab 01 (architecture and the roofline): the exercises' shapes and the reference arithmetic.

Arithmetic intensity = FLOPs / bytes moved between GM and the chip. A kernel whose intensity is
below the roof's ridge point (peak FLOPs / GM bandwidth) cannot keep its compute unit busy: it is
memory-bound. The shapes below are the ones the lab's exercises ask about.
"""
from __future__ import annotations

from ..arch import DEFAULT_CHIP
from ..chips import ChipSpec, get_chip
from ..kernels.examples import poly
from ..sim.cost import attainable, peak_tflops, ridge

FP16 = 2                                  # bytes per element
ADD_N = 1 << 20                           # z = x + y over this many fp16 elements
MATMUL_MNK = (1024, 1024, 1024)           # C[M,N] = A[M,K] @ B[K,N], all fp16
LAYERNORM_RC = (4096, 1024)               # rows x columns, fp16, normalised over each row
LAYERNORM_FLOPS_PER_ELEMENT = 8           # mean 1, variance 3, normalise + scale + shift 4
DECODE_MNK = (16, 4096, 4096)             # an LLM decode step: 16 tokens (M) through a 4096 x 4096 weight
POLY_DEGREE = poly.DEGREE                 # y = p(x) element-wise, Horner's rule: a multiply and an add a degree
POLY_N = 1 << 21                          # the challenge's polynomial: this many fp16 elements on the 910
#: Which unit each operator of exercise 3 runs on: its roof is that unit's peak.
UNIT = {"add": "vector", "matmul": "cube", "decode_matmul": "cube", "polynomial": "vector"}


def intensity_add(n: int = ADD_N) -> float:
    """n additions; read x and y, write z."""
    return n / (3 * n * FP16)


def intensity_matmul(m: int, n: int, k: int) -> float:
    """2mnk FLOPs (a MAC is two); read A and B once, write C once."""
    return 2 * m * n * k / (FP16 * (m * k + k * n + m * n))


def intensity_layernorm(rows: int, cols: int) -> float:
    """8 FLOPs an element; read x, write y, read gamma and beta once."""
    return LAYERNORM_FLOPS_PER_ELEMENT * rows * cols / (FP16 * (2 * rows * cols + 2 * cols))


def intensity_polynomial(degree: int = POLY_DEGREE) -> float:
    """2 x degree FLOPs an element (Horner's rule); read x, write y."""
    return 2 * degree / (2 * FP16)


def reference_intensities() -> dict[str, float]:
    """FLOP/B of every operator of exercise 3, by name (the keys of UNIT)."""
    return {"add": intensity_add(), "matmul": intensity_matmul(*MATMUL_MNK),
            "decode_matmul": intensity_matmul(*DECODE_MNK), "polynomial": intensity_polynomial()}


def attainable_tflops(intensity: float, peak: float, bandwidth_gbs: float) -> float:
    """The roofline as exercise 1 asks for it (:func:`npulab.sim.cost.attainable`, a float)."""
    return float(attainable(intensity, peak, bandwidth_gbs))


def bound(chip: "ChipSpec | str", op: str, intensity: float) -> str:
    """'memory' when the op's intensity is below its unit's ridge point, else 'compute'."""
    return "memory" if intensity < ridge(chip, UNIT[op]) else "compute"


def roofline_table(chip: "ChipSpec | str" = DEFAULT_CHIP) -> list[tuple]:
    """(op, unit, intensity, ridge, attainable TFLOPS, bound) for the operators of exercise 3."""
    chip = get_chip(chip)
    rows = []
    for op, ai in reference_intensities().items():
        unit = UNIT[op]
        rows.append((op, unit, ai, ridge(chip, unit),
                     attainable_tflops(ai, peak_tflops(chip, unit), chip.gm_bandwidth_gbs),
                     bound(chip, op, ai)))
    return rows


def print_roofline_table(chip: "ChipSpec | str" = DEFAULT_CHIP) -> None:
    chip = get_chip(chip)
    print(f"{chip.name}: GM {chip.gm_bandwidth_gbs:g} GB/s, cube {chip.peak_fp16_tflops:.1f} TFLOPS, "
          f"vector {chip.peak_vector_tflops_fp16:.2f} TFLOPS")
    print(f"{'op':<14} {'unit':<6} {'FLOP/B':>8} {'ridge':>8} {'of ridge':>8} {'TFLOPS':>8}  bound")
    for op, unit, ai, r, att, b in roofline_table(chip):
        print(f"{op:<14} {unit:<6} {ai:>8.2f} {r:>8.2f} {ai / r:>8.0%} {att:>8.2f}  {b}")


def print_core(chip: "ChipSpec | str" = DEFAULT_CHIP) -> None:
    """The buffers and data paths of one AI core of ``chip``, from its chip file."""
    chip = get_chip(chip)
    print(f"{chip.title}: {chip.ai_cores} AI cores at {chip.clock_ghz:g} GHz")
    print(f"{'buffer':7} {'bytes':>9}  {'align':>5}  holds")
    holds = {"l1": "tiles of A and B on their way to the cube", "l0a": "the cube's left operand",
             "l0b": "the cube's right operand", "l0c": "the cube's accumulators (fp32)",
             "ub": "everything the vector unit reads and writes"}
    for b, what in holds.items():
        print(f"{b.upper():7} {chip.buffer_bytes(b):>9,}  {chip.buffer_align(b):>5}  {what}")
    p = chip.pipes
    print(f"\n{'pipe':6} {'bytes/cycle':>11} {'start-up':>8}  moves")
    for name, bw, start, what in [
            ("MTE2", p.mte2_bytes_per_cycle, p.mte2_startup_cycles, "GM -> L1 or UB"),
            ("MTE1", p.mte1_bytes_per_cycle, p.mte1_startup_cycles, "L1 -> L0A / L0B"),
            ("MTE3", p.mte3_bytes_per_cycle, p.mte3_startup_cycles, "UB -> GM"),
            ("FIXP", p.fix_bytes_per_cycle, p.fix_startup_cycles, "L0C -> GM or L1")]:
        if name == "FIXP" and chip.cube.output_path != "fixpipe":
            print(f"{name:6} {'-':>11} {'-':>8}  none on this chip (*)")
            continue
        print(f"{name:6} {bw:>11g} {start:>8}  {what}")
    if chip.cube.output_path != "fixpipe":
        print(f"(*) the {chip.name} has no FixPipe: L0C drains through the vector unit into UB (at "
              f"{chip.vector.bytes_per_cycle} bytes a\n    cycle, the vector pipe), the epilogue runs on "
              f"the vector unit, and MTE3 writes the result to GM.")
    print(f"\nGM: {chip.memory.gm_bytes_per_cycle:g} bytes a cycle for the whole chip at its pins "
          f"({chip.gm_bandwidth_gbs:g} GB/s), of which the DRAM sustains {chip.memory.gm_efficiency:.0%} "
          f"({chip.gm_sustained_bytes_per_cycle:.0f} B a cycle),\n    shared by the cores that copy at once")
    print(f"cube: {chip.cube.macs_per_cycle_fp16} fp16 MACs a cycle; vector: "
          f"{chip.vector.bytes_per_cycle} bytes a cycle ({chip.vector.bytes_per_cycle // 2} fp16 ops)")
    if chip.arch == "split":
        print(f"split cores: {chip.ai_cores} AIC (cube, L1, L0A, L0B, L0C) and {chip.vector_units} AIV (vector "
              f"unit, UB), {chip.vector_units // chip.ai_cores} AIV for each AIC")


def measure_add(sizes=(1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22), chip: "ChipSpec | str" = DEFAULT_CHIP,
                seed: int = 0) -> list[dict]:
    """Run Add (timing mode) at each size: cycles, achieved TFLOPS and the share of the
    roofline's attainable rate it reaches."""
    import numpy as np

    from ..kernels.elementwise import add_tiling, launch_add
    chip = get_chip(chip)
    roof = attainable_tflops(intensity_add(), chip.peak_vector_tflops_fp16, chip.gm_bandwidth_gbs)
    rows = []
    for n in sizes:
        x = np.random.default_rng(seed).standard_normal(n).astype(np.float16)
        _, trace = launch_add(x, x, add_tiling(n, x.dtype, chip), chip, "timing")
        tflops = n / (trace.us(trace.cycles) * 1e-6) / 1e12
        rows.append({"n": n, "cycles": trace.cycles, "us": trace.us(trace.cycles), "tflops": tflops,
                     "of_roof": tflops / roof, "mte2_ratio": trace.pipe_ratios()["mte2_ratio"]})
    return rows


def layernorm_passes(chip: "ChipSpec | str" = DEFAULT_CHIP, shape=LAYERNORM_RC) -> dict:
    """fp16 LayerNorm of ``shape`` as the vector unit computes it, counted from a timing run of
    the package's kernel (the one lab 07 takes apart). The kernel widens x to fp32 and computes
    there, so a repeat holds 256 / 4 = 64 elements, not 128, and some of its passes (the casts,
    the reductions' folds) are no FLOPs at all; counting FLOPs at the fp16 peak misses both.

    ``passes``: the vector cycles of every core times the fp32 elements of a repeat, per element
    of x; ``vector_cycles``: the floor those passes set, spread over the cores;
    ``gm_cycles``: the floor of its GM bytes (x, y, gamma, beta) at the rate the chip's DRAM sustains;
    ``fp32_roof_tflops``: the 8 FLOPs an element at the rate the passes allow (the vector roof
    for this kernel); ``bound``: "vector" when the passes' floor is the higher, else "memory";
    ``cycles``: what the simulator measured."""
    import numpy as np

    from ..kernels.norm import launch_layer_norm, layer_norm_tiling
    from ..sim.isa import Pipe
    chip = get_chip(chip)
    rows, cols = shape
    x, g = np.zeros(shape, np.float16), np.zeros(cols, np.float16)
    _, tr = launch_layer_norm(x, g, g, layer_norm_tiling(rows, cols, np.float16, chip), 1e-5, chip, "timing")
    cores = len(tr.core_cycles)
    vec = sum(int(tr.busy_cycles(c)[Pipe.V]) for c in range(cores))
    per_repeat = chip.vector.repeat_bytes // 4
    passes = vec * per_repeat / x.size
    vector_cycles = vec / cores
    gm_cycles = (2 * x.nbytes + 2 * g.nbytes) / chip.gm_sustained_bytes_per_cycle
    flops = LAYERNORM_FLOPS_PER_ELEMENT * x.size
    return {"passes": passes, "vector_cycles": vector_cycles, "gm_cycles": gm_cycles, "cycles": int(tr.cycles),
            "fp32_roof_tflops": flops / (vector_cycles / (chip.clock_ghz * 1e9)) / 1e12,
            "fp16_roof_tflops": chip.peak_vector_tflops_fp16,
            "bound": "vector" if vector_cycles > gm_cycles else "memory"}


def passes_per_element(chip: "ChipSpec | str" = DEFAULT_CHIP) -> float:
    """The fp32 vector passes an element of fp16 LayerNorm takes on ``chip``, measured
    (:func:`layernorm_passes`)."""
    return layernorm_passes(chip)["passes"]


def print_layernorm_passes(chips=("910", "910b")) -> None:
    """fp16 LayerNorm (LAYERNORM_RC) on each chip: its passes, the floors they and its GM bytes
    set (cycles of one vector core), what the simulator measured, and the bound."""
    print(f"{'chip':6} {'vector cores':>12} {'passes':>6} {'vector floor':>12} {'GM floor':>9} "
          f"{'simulated':>9}  {'vector roof':>11}  bound")
    for name in chips:
        r, c = layernorm_passes(name), get_chip(name)
        print(f"{name:6} {c.vector_units:>12} {r['passes']:>6.2f} {r['vector_cycles']:>12,.0f} {r['gm_cycles']:>9,.0f} "
              f"{r['cycles']:>9,}  {r['fp32_roof_tflops']:>5.2f} of {r['fp16_roof_tflops']:<5.2f} {r['bound']}")


def poly_input(n: int = POLY_N) -> "np.ndarray":
    """The challenge's input: ``n`` fp16 values in [-1, 1] (seeded)."""
    import numpy as np
    return np.random.default_rng(1).uniform(-1, 1, n).astype(np.float16)


def poly_run(body, chip: "ChipSpec | str" = DEFAULT_CHIP):
    """Time ``body`` as the Compute stage of y = p(x) over :func:`poly_input`: (trace, vector
    instructions it issues on one tile of core 0)."""
    from ..sim.isa import Pipe
    _, tr = poly.launch_poly(body, poly_input(), chip, "timing")
    t = poly.poly_tiling(POLY_N, chip)
    core0 = ((tr.core == 0) & (tr.pipe == int(Pipe.V))).nonzero()[0]
    whole = sum(1 for i in core0 if str(tr.name[i]).endswith(f" {t.tile}"))
    return tr, whole / (t.block_factor // t.tile)


def run_poly(body, chip: "ChipSpec | str" = DEFAULT_CHIP) -> None:
    """Print what :func:`poly_run` measured: cycles, core 0's vector and MTE2 busy shares, and
    the vector instructions a tile."""
    tr, per_tile = poly_run(body, chip)
    r = tr.pipe_ratios(0)
    print(f"{getattr(body, '__name__', 'body')}: {tr.cycles:,} cycles; core 0: vector busy {r['vec_ratio']:.0%}, "
          f"MTE2 busy {r['mte2_ratio']:.0%}; {per_tile:g} vector instructions a tile")


def print_measure_add(rows: list[dict]) -> None:
    print(f"{'elements':>10} {'cycles':>8} {'us':>8} {'TFLOPS':>7} {'of roofline':>11} {'mte2_ratio':>10}")
    for r in rows:
        print(f"{r['n']:>10,} {r['cycles']:>8,} {r['us']:>8.2f} {r['tflops']:>7.3f} "
              f"{r['of_roof']:>11.0%} {r['mte2_ratio']:>10.0%}")
