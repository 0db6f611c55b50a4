"""``npulab bench --model resnet50|bert-base|gpt2 --batch-size B --iterations N --chip C``: a whole
network built naive and optimised, timed on the simulated chip, as the seeds' ``benchmark.py
--model resnet50 --batch_size 32 --num_iterations 100`` does on a real one.

* the **naive** build: no fusion passes, the seeds' fixed tilings, single buffering, dynamic
  memory, no C04 stem;
* the **optimised** build: GE's fusion passes, every problem's searched tiling, double
  buffering, the static memory plan, the C04 stem (ATC's ``--enable_small_channel 1``);
* the **ablation**: the naive build with each optimisation alone, so each one's share of the
  gain is measured, not assumed.

Each build is compiled (the tiling searches, cached on disk: ``compile_s``) and then simulated
in timing-only mode (``simulate_s``): each distinct launch once per build, its trace reused by
every task that repeats it. The simulator is deterministic, so every iteration of a build takes
the same simulated time; ``--iterations`` runs them (an input copied host to device and the
output back each time, as an inference loop does) and reports their mean.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from dataclasses import dataclass, replace

from ..chips import get_chip
from ..errors import ArgumentError
from ..graph import passes, zoo
from ..graph.compile import BuildOptions, compile_graph
from ..kernels.search import CACHE
from ..runtime.model import Executor

#: the models and their zoo names and default inputs
MODELS = {"resnet50": ("resnet50", {}), "bert-base": ("bert-base", {"seq": 128}),
          "gpt2": ("gpt2", {"seq": 128})}


@dataclass(frozen=True)
class Build:
    """One build of a model: which optimisations are on."""
    fusion: bool = False
    tiling: bool = False          # the searched tilings (off: the seeds' fixed ones)
    double_buffering: bool = False
    static_memory: bool = False
    small_channel: bool = False

    def options(self) -> BuildOptions:
        return BuildOptions(tiling="searched" if self.tiling else "seed", buffers=2 if self.double_buffering else 1,
                            small_channel=self.small_channel, memory_mode=2 if self.static_memory else 0)


NAIVE = Build()
OPTIMISED = Build(True, True, True, True, True)
OPTIMISATIONS = ("fusion", "tiling", "double_buffering", "static_memory", "small_channel")


def pass_pipeline(build: Build, chip):
    """The pass pipeline of a build (all of GE's passes, or none)."""
    if not build.fusion:
        return None
    return lambda g: passes.optimize(g, chip=chip)[0]


def run_build(graph, chip, build: Build, iterations: int = 1) -> dict:
    """Compile ``graph`` as ``build`` says and time it: the figures of one build."""
    t0 = time.perf_counter()
    cm = compile_graph(graph, chip, passes=pass_pipeline(build, chip), options=build.options())
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ex = Executor(cm)
    runs = [ex.run(None, "timing")[1] for _ in range(iterations)]
    simulate_s = time.perf_counter() - t0
    trace = runs[-1]
    s = trace.summary()
    batch = graph.type_of(graph.inputs[0]).shape[0]
    latency_s = s["latency_us"] * 1e-6
    energy_j = s["power_w"] * latency_s                     # static power included
    return {"build": {k: getattr(build, k) for k in OPTIMISATIONS}, "nodes": cm.report["nodes_after"],
            "tasks": len(trace.records), "latency_ms": s["latency_us"] / 1000,
            "throughput_samples_per_s": batch / latency_s, "cube_utilization": s["cube_utilization"],
            "vector_utilization": s["vector_utilization"], "power_w": s["power_w"],
            "energy_per_sample_j": energy_j / batch, "samples_per_j": batch / energy_j,
            "time_by_engine_ms": {k: v / 1000 for k, v in s["time_by_engine_us"].items()},
            "time_by_op_ms": {k: v / 1000 for k, v in list(trace.time_by("op_type").items())[:8]},
            "compile_s": compile_s, "simulate_s": simulate_s / iterations}


def bench_model(model: str, batch_size: int = 1, iterations: int = 1, chip="910", *, ablation: bool = True,
                seq_len: int | None = None, cold: bool = False) -> dict:
    """The naive and optimised builds of ``model``, their ratio, and the ablation. ``cold``: run
    against an empty tiling cache (a fresh machine), so ``compile_s`` is the cold compile and
    ``compile_warm_s`` the same compile again with its tilings cached."""
    if cold:
        with tempfile.TemporaryDirectory() as d, CACHE.isolated(Path(d) / "tilings.json"):
            return dict(bench_model(model, batch_size, iterations, chip, ablation=ablation, seq_len=seq_len),
                        cold=True)
    if model not in MODELS:
        raise ArgumentError(f"bench --model: no model {model!r}; models are {', '.join(MODELS)}")
    name, config = MODELS[model]
    if seq_len is not None and "seq" in config:
        config = dict(config, seq=seq_len)
    chip = get_chip(chip)
    t0 = time.perf_counter()
    graph = zoo.build(name, batch=batch_size, dtype="float16", **config).infer()
    build_s = time.perf_counter() - t0
    naive = run_build(graph, chip, NAIVE, iterations)
    opt = run_build(graph, chip, OPTIMISED, iterations)
    warm = run_build(graph, chip, OPTIMISED, 1)              # the same compile, its tilings cached
    out = {"model": model, "chip": chip.name, "batch_size": batch_size, "iterations": iterations,
           "dtype": "float16", **({"seq_len": config["seq"]} if "seq" in config else {}),
           "naive": naive, "optimised": opt, "speedup": naive["latency_ms"] / opt["latency_ms"],
           "build_graph_s": build_s, "compile_s": opt["compile_s"], "compile_warm_s": warm["compile_s"],
           "simulate_s": opt["simulate_s"], "cold": False}
    if ablation:
        rows = []
        for k in OPTIMISATIONS:
            r = run_build(graph, chip, replace(NAIVE, **{k: True}), 1)
            rows.append({"optimisation": k, "latency_ms": r["latency_ms"],
                         "speedup_over_naive": naive["latency_ms"] / r["latency_ms"]})
        out["ablation"] = rows
    return out


def format_model(r: dict) -> str:
    """The bench's figures as a table (what ``npulab bench --model`` prints without --json)."""
    lines = [f"{r['model']} batch {r['batch_size']} on {r['chip']} ({r['dtype']}), timing-only simulation"]
    head = f"{'build':<10} {'latency':>11} {'samples/s':>11} {'cube':>6} {'vector':>7} {'W':>6} {'samples/J':>10}"
    lines.append(head)
    for key in ("naive", "optimised"):
        b = r[key]
        lines.append(f"{key:<10} {b['latency_ms']:>8.3f} ms {b['throughput_samples_per_s']:>11,.1f} "
                     f"{b['cube_utilization']:>6.1%} {b['vector_utilization']:>7.1%} {b['power_w']:>6.0f} "
                     f"{b['samples_per_j']:>10,.2f}")
    lines.append(f"speedup (naive / optimised latency): {r['speedup']:.2f}x")
    for row in r.get("ablation", []):
        lines.append(f"  {row['optimisation']:<17} alone: {row['latency_ms']:.3f} ms, {row['speedup_over_naive']:.2f}x over naive")
    lines.append(f"compile {r['compile_s']:.1f} s ({'cold' if r['cold'] else 'as cached'}; warm "
                 f"{r['compile_warm_s']:.1f} s), simulate {r['simulate_s']:.2f} s")
    return "\n".join(lines)


__all__ = ["pass_pipeline", "Build", "NAIVE", "OPTIMISED", "OPTIMISATIONS", "MODELS", "bench_model", "format_model", "run_build"]
