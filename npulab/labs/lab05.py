"""Lab 05 (matmul on the cube): the K-loop kernel its exercise completes, and the naive / tiled /
tuned comparison (the NZ picture is :func:`npulab.plot.plot_nz`).

* :func:`kloop_kernel`, :func:`run_kloop`: a one-core matmul whose K loop (L1 -> L0A/L0B ->
  mmad into L0C) is a function the learner writes; :func:`k_loop_reference` is one;
* :func:`see_it`: the package's matmul template on the teaching chip (a trace to look at);
* :func:`gm_to_l1_bytes`: the bytes a tiling copies from GM into L1, counted in a timing run
  (what exercise 3 predicts);
* :func:`mix_run`, :func:`plot_mix`, :func:`print_c_paths`, :func:`mix_counts`: the 910B's
  split AI core: the fused matmul (a mix kernel, one AIC and two AIVs per AI core) run in
  timing mode, its three cores' gantts one above the other, where the cube's output goes on
  the 910B and on the 910, and the cross-core flags and workspace bytes of a run (exercise 4);
* :func:`perf_explorer`: the tiling explorer on the challenge's problem (each setting a full
  timing-mode simulation, as the check runs);
* :func:`compare`: cycles and utilization of the naive, seed, default and autotuned tilings
  of one problem on the 910 (timing mode; long runs extrapolated by the bench), and
  :func:`print_extrapolation`: an extrapolated row against the same tiling simulated in full;
* :func:`print_published`: the 6144^3 GEMM measured on a real Ascend910B1 (C2 of data/FACTS.md)
  beside the same tiling simulated (``npulab bench calibrate``'s rows).
"""
from __future__ import annotations

import inspect
import textwrap

import numpy as np

from ..arch import ceil_div, round_up
from ..bench.matmul import measure
from ..kernels import search
from ..kernels.fused_matmul import FusedMatmulProblem, launch_fused_matmul, make_fused_tiling
from ..kernels.matmul import MatmulProblem, default_tiling, launch_matmul, make_tiling, simulate
from ..lang import A1, A2, B1, B2, CO1, Queue, TPipe, data_copy_nd2nz, fixpipe, launch, load_data, mmad
from ..sim.cost import lower_bound_cycles

SEED = 0
#: the K-loop exercise's problems: (M, N, K, K0) on the teaching chip, one core
KLOOP_CASES = ((40, 48, 256, 64), (16, 16, 16, 16), (20, 33, 200, 64))
#: the measure: one fp16 problem on the 910, four tilings
PERF_SHAPE = (2048, 2048, 2048)
PERF_CHIP = "910"
#: exercise 3: how many bytes a tiling copies from GM into L1 (fp16 on the 910)
BYTES_SHAPE = (2048, 512, 1024)
BYTES_TILES = (128, 256, 256, 64, 2, 2, 2)
#: the 910B's split core: the fused matmul (matmul + GELU, a mix kernel) shown, and exercise 4's
MIX_CHIP = "910b"
MIX_SEE_SHAPE = (1024, 1024, 512)
MIX_SHAPE = (448, 512, 256)
MIX_TILES = (128, 128, 256, 64, 2, 2, 2)
#: the challenge: an fp16 problem on the 910 whose default tiling leaves the cores idle
CHALLENGE_SHAPE = (384, 2816, 8192)


def show(obj) -> None:
    print(textwrap.dedent(inspect.getsource(obj)))


# -- the K loop ----------------------------------------------------------------------------------
def k_loop_reference(c, a1, b1, a2q, b2q, m, n, k, k0):
    """L0C (c) = A x B, K0 columns of A and rows of B at a time through L0A / L0B."""
    for k_off in range(0, k, k0):
        kk = min(k0, k - k_off)
        a2 = a2q.alloc_tensor(np.float16)
        load_data(a2, a1, m, kk, src_rows=round_up(m, 16), col_off=k_off)
        a2q.enque(a2)
        b2 = b2q.alloc_tensor(np.float16)
        load_data(b2, b1, kk, n, src_rows=round_up(k, 16), row_off=k_off)
        b2q.enque(b2)
        a2, b2 = a2q.deque(), b2q.deque()
        mmad(c, a2, b2, m, n, kk, init=(k_off == 0))
        a2q.free_tensor(a2)
        b2q.free_tensor(b2)


def kloop_kernel(k_loop):
    """The one-core kernel around ``k_loop``: A and B to L1 in NZ, then ``k_loop`` fills L0C,
    then FixPipe writes C to GM."""

    def kernel(a_gm, b_gm, c_gm, m, n, k, k0):
        pipe = TPipe()
        a1q, b1q = Queue(A1, "a_l1"), Queue(B1, "b_l1")               # GM -> L1 (MTE2)
        a2q, b2q = Queue(A2, "a_l0a"), Queue(B2, "b_l0b")             # L1 -> L0A / L0B (MTE1)
        cq = Queue(CO1, "c_l0c")                                      # L0C: cube -> FixPipe
        pipe.init_buffer(a1q, 1, round_up(m, 16) * round_up(k, 16) * 2)
        pipe.init_buffer(b1q, 1, round_up(k, 16) * round_up(n, 16) * 2)
        pipe.init_buffer(a2q, 2, round_up(m, 16) * round_up(k0, 16) * 2)
        pipe.init_buffer(b2q, 2, round_up(k0, 16) * round_up(n, 16) * 2)
        pipe.init_buffer(cq, 1, round_up(m, 16) * round_up(n, 16) * 4)
        a1 = a1q.alloc_tensor(np.float16)
        data_copy_nd2nz(a1, a_gm, m, k)                              # A (m, k) -> NZ in L1
        a1q.enque(a1)
        b1 = b1q.alloc_tensor(np.float16)
        data_copy_nd2nz(b1, b_gm, k, n)                              # B (k, n) -> NZ in L1
        b1q.enque(b1)
        a1, b1 = a1q.deque(), b1q.deque()
        c = cq.alloc_tensor(np.float32)
        k_loop(c, a1, b1, a2q, b2q, m, n, k, k0)                      # <- the exercise
        cq.enque(c)
        c = cq.deque()
        fixpipe(c_gm, c, m, n)                                       # L0C (NZ fp32) -> GM (ND fp32)
        cq.free_tensor(c)
        a1q.free_tensor(a1)
        b1q.free_tensor(b1)

    return kernel


def kloop_inputs(m: int, n: int, k: int, seed: int = SEED):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)


def run_kloop(k_loop, m: int, n: int, k: int, k0: int, chip: str = "teach"):
    """Run the kernel around ``k_loop`` on one core; returns (C fp32 (m, n), trace, a, b)."""
    a, b = kloop_inputs(m, n, k)
    (_, _, c, *_), trace = launch(kloop_kernel(k_loop), 1, a.reshape(-1), b.reshape(-1),
                                  np.zeros(m * n, np.float32), m, n, k, k0, chip=chip)
    return c.reshape(m, n), trace, a, b


# -- the template on the teaching chip, and the comparison on the 910 ---------------------------
def see_it(shape=(128, 128, 256), chip: str = "teach"):
    """The matmul template with the default tiling: (tiling, C, trace, A, B)."""
    m, n, k = shape
    rng = np.random.default_rng(SEED)
    a = rng.standard_normal((1, m, k)).astype(np.float16)
    b = rng.standard_normal((1, k, n)).astype(np.float16)
    t = default_tiling(MatmulProblem(1, m, n, k, "float16"), chip)
    c, trace = launch_matmul(a, b, t, chip=chip)
    return t, c[0], trace, a[0], b[0]


def perf_tiling(recipe, shape=CHALLENGE_SHAPE, chip=PERF_CHIP):
    """make_tiling for an fp16 problem (default: the challenge's), tiles as given, not shrunk."""
    return make_tiling(MatmulProblem.of(shape, np.float16), chip, tuple(recipe), clamp=False)


def gm_to_l1_bytes(shape=BYTES_SHAPE, recipe=BYTES_TILES, chip: str = PERF_CHIP) -> int:
    """Bytes MTE2 copies from GM into L1 for an fp16 matmul of ``shape`` with tiling ``recipe``,
    counted in a timing-mode run (the trace's ``GM->L1`` route: every copy of A and B tiles)."""
    return simulate(perf_tiling(recipe, shape, chip), chip).bytes_by_route().get("GM->L1", 0)


# -- the 910B: a split AI core, one AIC and two AIVs, and the mix kernel that uses all three ----
def mix_tiling(shape=MIX_SEE_SHAPE, recipe=MIX_TILES, chip: str = MIX_CHIP):
    """The fused matmul's tiling (y = GELU(A @ B), fp16) with the cube's tiles ``recipe``."""
    m, n, k = shape
    mm = make_tiling(MatmulProblem(1, m, n, k, "float16"), chip, tuple(recipe), clamp=False)
    return make_fused_tiling(FusedMatmulProblem(m, n, k), chip, mm)


def mix_run(shape=MIX_SEE_SHAPE, recipe=MIX_TILES, chip: str = MIX_CHIP):
    """The fused matmul as a mix kernel in timing mode: (tiling, trace). Each block runs on an
    AIC (the K loop, FixPipe into a GM workspace slot) and its two AIVs (GELU on half of the
    tile's rows each), ordered by cross-core flags only."""
    t = mix_tiling(shape, recipe, chip)
    return t, launch_fused_matmul(None, None, t, chip=chip, mode="timing")[1]


def mix_cores(trace, ai_core: int = 0) -> list[int]:
    """Trace core indices of AI core ``ai_core``'s AIC and its two AIVs (labels "AIC c", "AIV c.s")."""
    want = [f"AIC {ai_core}", f"AIV {ai_core}.0", f"AIV {ai_core}.1"]
    return [trace.core_labels.index(w) for w in want]


def plot_mix(trace, ai_core: int = 0):
    """The gantts of one AI core of a mix run, its AIC above its two AIVs, on one time axis.
    Triangles on a row: a set_flag of that pipe fired (cross-core ones included); hatched
    bars: a pipe stalled on a flag, labelled with it. Returns the figure."""
    import matplotlib.pyplot as plt

    from ..plot import gantt
    cores = mix_cores(trace, ai_core)
    fig, axes = plt.subplots(3, 1, figsize=(10, 7.5), sharex=True, layout="constrained")
    end = max(int(trace.core_cycles[c]) for c in cores)
    for ax, c in zip(axes, cores):
        gantt(trace, core=c, ax=ax, start=0, end=end)
        ax.set_title(trace.core_labels[c], loc="left", fontsize=9)
    return fig


def print_c_paths(shape=MIX_SEE_SHAPE, recipe=MIX_TILES) -> None:
    """Where the block tiles of C go on their way to the vector unit, as bytes per route: the
    910B's fused matmul (L0C -> GM workspace -> UB of an AIV) beside the 910's matmul with the
    same tiles, whose cube and vector unit share one core (L0C -> UB -> GM)."""
    m, n, k = shape
    _, mix = mix_run(shape, recipe)
    coupled = simulate(perf_tiling(recipe, shape, "910"), "910")
    print(f"C = A @ B, {m} x {n} x {k} fp16, tiles {recipe[:2]}: bytes by route")
    for chip, tr in ((f"{MIX_CHIP} (fused, mix)", mix), ("910 (matmul)", coupled)):
        routes = tr.bytes_by_route()
        shown = {r: b for r, b in routes.items() if r.startswith("L0C") or r.endswith("UB") or r == "UB->GM"}
        print(f"  {chip:<20} " + ", ".join(f"{r} {b:,}" for r, b in shown.items()))


def mix_counts(shape=MIX_SHAPE, recipe=MIX_TILES) -> dict:
    """Counted in a timing run of the fused matmul: every cross_core_set_flag the kernel issued
    (all AICs and AIVs), and the bytes that crossed GM between the AICs and their AIVs (FixPipe's
    writes into the workspace plus the AIVs' reads of it)."""
    from ..sim.isa import Kind
    _, tr = mix_run(shape, recipe)
    routes = tr.bytes_by_route()
    return {"flags_set": int((tr.kind == Kind.CROSS_SET).sum()),
            "workspace_bytes": routes.get("L0C->GM", 0) + routes.get("GM->UB", 0)}


#: the explorer's smallest block tile: a full simulation of smaller tiles at this size issues
#: millions of instructions
EXPLORE_MIN_TILE = 64


def _perf_case(start):
    from ..widgets.tiling_cases import MatMulCase, Param

    class PerfCase(MatMulCase):
        """MatMulCase on the challenge's problem, starting at ``start``, block tiles from
        EXPLORE_MIN_TILE (each move is a full timing-mode simulation, as the check runs)."""

        def __init__(self):
            super().__init__(*CHALLENGE_SHAPE, dtype=np.float16, chip=PERF_CHIP)
            tm, tn, tk, k0, l1, l0, l0c = start
            tiles = tuple(range(EXPLORE_MIN_TILE, 256 + 1, 16))
            self.params = [Param("tile_m", tiles, tm), Param("tile_n", tiles, tn),
                           Param("tile_k0", self.params[2].values, k0),
                           Param("k_steps", (1, 2, 4, 8), tk // k0, "TILE_K / TILE_K0"),
                           Param("l1_buffers", (1, 2), l1), Param("l0_buffers", (1, 2), l0),
                           Param("l0c_buffers", (1, 2), l0c)]

    return PerfCase()


def perf_explorer(start=None):
    """The tiling explorer on ``CHALLENGE_SHAPE`` fp16 on ``PERF_CHIP``, the problem the
    challenge grades, starting at ``start`` (a 7-tuple recipe; default: the default tiling).
    Each setting that fits is simulated in full in timing mode, as the check does; the verdict
    adds the utilization (lower bound / cycles)."""
    from ..widgets.tiling import TilingExplorer

    problem = MatmulProblem.of(CHALLENGE_SHAPE, np.float16)
    lb = lower_bound_cycles(PERF_CHIP, problem.macs, np.float16)

    class PerfExplorer(TilingExplorer):
        def update(self):
            res = super().update()
            if res.fits:
                self.status.value += (f"<p>utilization: lower bound {lb:,.0f} / {res.cycles:,} cycles = "
                                      f"<b>{lb / res.cycles:.1%}</b></p>")
            return res

    if start is None:
        s = default_tiling(problem, PERF_CHIP).tiles
        start = (s.tile_m, s.tile_n, s.tile_k, s.tile_k0, s.l1_buffers, s.l0_buffers, s.l0c_buffers)
    return PerfExplorer(_perf_case(tuple(start)))


def compare(shape=PERF_SHAPE, chip: str = PERF_CHIP, tune_limit: int = 4) -> list[dict]:
    """Bench rows (cycles, lower bound, utilization) of the naive, seed, default and autotuned
    tilings of ``shape`` fp16 on ``chip``. The autotuner searches ``tune_limit`` candidates
    without its cache (so the lab's numbers never depend on earlier runs). Each row also holds
    ``tile_m``, ``tile_n`` and how often the kernel copies each byte of A (``loads_a`` = N /
    TILE_N block-tile columns) and of B (``loads_b`` = M / TILE_M rows) from GM into L1."""
    m, n, _ = shape
    problem = MatmulProblem.of(shape, np.float16)
    tilings = [make_tiling(problem, chip, name) for name in ("naive", "seed")]
    tilings.append(default_tiling(problem, chip))
    tilings.append(search.tune(problem, chip, limit=tune_limit, use_cache=False, progress=False).tiling)
    rows = []
    for t in tilings:
        r = measure(t, chip, full=False)
        s = t.tiles
        r.update(tile_m=s.tile_m, tile_n=s.tile_n, loads_a=ceil_div(n, s.tile_n), loads_b=ceil_div(m, s.tile_m),
                 tiling_object=t)
        rows.append(r)
    best = min(r["cycles"] for r in rows)
    for r in rows:
        r["vs_best"] = r["cycles"] / best
    return rows


def print_compare(rows) -> None:
    print(f"{'tiling':<8} {'TILE_M x N x K / K0, buffers L1/L0/L0C':<44} {'loads of A, B':>13} {'cycles':>12} "
          f"{'utilization':>11} {'vs best':>8}")
    for r in rows:
        loads = f"{r['loads_a']}x, {r['loads_b']}x"
        print(f"{r['tiling']:<8} {r['recipe']:<44} {loads:>13} {r['cycles']:>12,} {r['utilization']:>11.1%} "
              f"{r['vs_best']:>7.1f}x{'  (extrapolated)' if r.get('estimated') else ''}")
    print(f"lower bound (MACs / (cores x MACs a cycle)): {rows[0]['lower_bound_cycles']:,} cycles")
    print("loads of A, B: how many times each byte of A (N / TILE_N) and of B (M / TILE_M) is copied "
          "from GM into L1")


def print_extrapolation(rows, name: str = "seed", chip: str = PERF_CHIP) -> None:
    """The extrapolated row ``name`` of :func:`compare` beside the same tiling simulated in full."""
    r = next(r for r in rows if r["tiling"] == name)
    if not r.get("estimated"):
        print(f"{name}: simulated in full ({r['cycles']:,} cycles), nothing extrapolated")
        return
    full = measure(r["tiling_object"], chip, full=True)
    print(f"{name} ({r['method']}):")
    print(f"  extrapolated      {r['cycles']:>10,} cycles, utilization {r['utilization']:.1%}")
    print(f"  simulated in full {full['cycles']:>10,} cycles, utilization {full['utilization']:.1%}")
    print(f"  the estimate is off by {r['cycles'] / full['cycles'] - 1:+.1%} in cycles")


def print_published(rows=None) -> None:
    """The published 6144^3 fp16 GEMM (pto-isa's baseline on an Ascend910B1, its own tiling)
    beside npulab's simulation of the same tiling: time, utilization of the peak and the two
    pipe ratios msprof reported. ``rows``: :func:`npulab.bench.calibrate.gemm_rows` (run here
    when None; a full timing-mode simulation of 1,152 block tiles)."""
    from ..bench.calibrate import gemm_rows
    time_row, mac_row = rows or gemm_rows()
    print(f"{time_row['measurement'].split(':')[0]}, tiling {time_row['tiling']}")
    print(f"{'':<28} {'published':>10} {'simulated':>10}")
    print(f"{'time, ms':<28} {time_row['published_ms']:>10.3f} {time_row['simulated_ms']:>10.3f}")
    print(f"{'utilization of the peak':<28} {time_row['published']:>10.1%} {time_row['simulated']:>10.1%}")
    print(f"{'cube busy (aic_mac_ratio)':<28} {mac_row['published']:>10.1%} {mac_row['simulated']:>10.1%}")
    print(f"{'MTE2 busy (aic_mte2_ratio)':<28} {time_row['published_mte2_ratio']:>10.1%} "
          f"{time_row['simulated_mte2_ratio']:>10.1%}")
    print(f"{'MTE2 issue to end':<28} {'':>10} {time_row['simulated_mte2_span_ratio']:>10.1%}")
