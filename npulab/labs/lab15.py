"""Lab 15 (capstone): three whole networks built naive and optimised on the simulated 910, the
gain taken apart build by build and read off the traces.

* :func:`model_graph`: ResNet-50, BERT-base or GPT-2 small from the zoo at batch 1, fp16 (the
  transformers at sequence length :data:`SEQ`, weights as shapes only: timing needs no values);
* :func:`run`: one build of a model (:class:`npulab.bench.model.Build`; :func:`alone` makes the
  naive build with one optimisation on), compiled and simulated in timing-only mode, kept for
  the process (a launch two builds share is simulated once): its compiled model and its
  :class:`~npulab.runtime.model.ModelTrace`; :func:`figures`: the figures ``npulab bench --model``
  prints for it;
* :func:`print_models`, :func:`ablation`, :func:`print_ablation`, :func:`print_claim`: the tables
  of the lab and the seeds' 3x claim against the batch-1 builds;
* :func:`time_by_op`, :func:`plot_time_by_op`: where each build's time goes, by op type;
  :func:`launch_us`, :func:`print_launches`: how much of it is launch start-up;
* :func:`relu_time_by_producer`: the ReLU launches of a build, by the op type that feeds them
  (which ones a Conv+BN+ReLU fusion can absorb);
* :func:`layer_task`, :func:`run_layer`: one conv task of a build, launched alone with the
  learner's :class:`~npulab.kernels.conv.ConvTiles` (the challenge) or its own tiling.
"""
from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from ..bench.model import NAIVE, OPTIMISATIONS, OPTIMISED, Build, pass_pipeline
from ..chips import get_chip
from ..errors import GraphError
from ..graph import zoo
from ..graph.compile import compile_graph
from ..ops import registry
from ..runtime.model import Executor, timing_operands

CHIP = "910"
BATCH = 1
SEQ = 128
MODELS = {"resnet50": "ResNet-50", "bert-base": "BERT-base", "gpt2": "GPT-2 small"}
#: the course seeds' benchmark: ``benchmark.py --model resnet50 --batch_size 32 --num_iterations 100``
SEED_CLAIM = {"model": "resnet50", "batch_size": 32, "speedup": 3.0}
#: exercise 2: the toolchain allows this many of the five optimisations
ALLOWED = 2


@functools.lru_cache(maxsize=None)
def model_graph(model: str, batch: int = BATCH):
    """The typed graph of a zoo model at ``batch``, fp16."""
    config = {} if model == "resnet50" else {"seq": SEQ, "materialize": False}
    return zoo.build(model, batch=batch, dtype="float16", **config).infer()


#: the timing-only trace of every distinct launch simulated so far, by (chip, batch) and launch key:
#: two builds that launch the same kernel on the same operands with the same attributes and tiles
#: (the naive build and the one with only the static plan, say) run the same instructions
_LAUNCHES: dict = {}


@functools.lru_cache(maxsize=None)
def run(model: str, build: Build = OPTIMISED, chip: str = CHIP, batch: int = BATCH):
    """(compiled model, ModelTrace) of one build, timing-only; each build runs once a process,
    and a launch another build has simulated already is not simulated again."""
    c = get_chip(chip)
    cm = compile_graph(model_graph(model, batch), c, passes=pass_pipeline(build, c), options=build.options())
    ex = Executor(cm, _LAUNCHES.setdefault((c.name, batch), {}))   # launches two builds share run once
    return cm, ex.run(None, "timing")[1]


def figures(model: str, build: Build = OPTIMISED) -> dict:
    """The bench's figures of a build (:func:`npulab.bench.model.run_build`): latency,
    throughput, utilization, power, energy per sample."""
    cm, trace = run(model, build)
    s = trace.summary()
    seconds = s["latency_us"] * 1e-6
    return {"latency_ms": s["latency_us"] / 1000, "samples_per_s": BATCH / seconds,
            "cube": s["cube_utilization"], "vector": s["vector_utilization"], "power_w": s["power_w"],
            "samples_per_j": BATCH / (s["power_w"] * seconds), "tasks": len(trace.records),
            "nodes": cm.report["nodes_after"]}


def print_models(models=tuple(MODELS)) -> None:
    """Naive against optimised for every model: the table ``npulab bench --model`` prints."""
    print(f"{'model':<12} {'build':<10} {'tasks':>5} {'latency':>11} {'samples/s':>10} {'cube':>6} "
          f"{'vector':>7} {'W':>5} {'samples/J':>10}")
    for m in models:
        rows = {k: figures(m, b) for k, b in (("naive", NAIVE), ("optimised", OPTIMISED))}
        for k, f in rows.items():
            print(f"{MODELS[m]:<12} {k:<10} {f['tasks']:>5} {f['latency_ms']:>8.3f} ms {f['samples_per_s']:>10,.0f} "
                  f"{f['cube']:>6.1%} {f['vector']:>7.1%} {f['power_w']:>5.0f} {f['samples_per_j']:>10,.1f}")
        print(f"{'':<12} speed-up {rows['naive']['latency_ms'] / rows['optimised']['latency_ms']:.2f}x")


def alone(optimisation: str) -> Build:
    """The naive build with one optimisation on."""
    return replace(NAIVE, **{optimisation: True})


def ablation(model: str = "resnet50") -> dict:
    """{optimisation: latency in ms} of the naive build with each optimisation alone."""
    return {k: figures(model, alone(k))["latency_ms"] for k in OPTIMISATIONS}


def print_ablation(model: str = "resnet50") -> None:
    naive = figures(model, NAIVE)["latency_ms"]
    print(f"{MODELS[model]}, batch {BATCH}: naive {naive:.3f} ms")
    for k, ms in ablation(model).items():
        print(f"  {k:<17} alone {ms:.3f} ms, {naive / ms:.2f}x")
    print(f"  all five          {figures(model, OPTIMISED)['latency_ms']:.3f} ms, "
          f"{naive / figures(model, OPTIMISED)['latency_ms']:.2f}x")


def print_claim(model: str = "resnet50") -> None:
    """The seeds' claim against the batch-1 builds: the speed-up, and the energy per sample."""
    naive, opt = figures(model, NAIVE), figures(model, OPTIMISED)
    print(f"{MODELS[model]}, batch {BATCH}: optimised {naive['latency_ms'] / opt['latency_ms']:.2f}x faster "
          f"than naive (the seeds claim {SEED_CLAIM['speedup']:.0f}x at batch {SEED_CLAIM['batch_size']}); "
          f"energy per sample {1000 / naive['samples_per_j']:.1f} mJ naive, {1000 / opt['samples_per_j']:.1f} mJ "
          f"optimised, at {naive['power_w']:.0f} W and {opt['power_w']:.0f} W")


# -- reading the traces ----------------------------------------------------------------------------
def time_by_op(model: str, build: Build) -> dict:
    """Microseconds of a build's tasks by op type, largest first."""
    return run(model, build)[1].time_by("op_type")


#: one colour per op type in every picture of the lab (others grey)
OP_COLORS = {"Conv2D": "tab:blue", "BatchNorm": "tab:orange", "Relu": "tab:green", "Add": "tab:purple",
             "AddRelu": "tab:red", "MatMul": "tab:brown", "MaxPool": "tab:pink", "ReduceMean": "tab:olive",
             "TransData": "tab:cyan"}


def plot_time_by_op(model: str, builds: dict, ax=None):
    """A stacked bar per build ({label: Build}) of its time by op type."""
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.6 * len(builds) + 1.6), layout="constrained")
    times = {label: time_by_op(model, b) for label, b in builds.items()}
    ops = sorted({op for t in times.values() for op in t}, key=lambda op: -max(t.get(op, 0) for t in times.values()))
    bottom = np.zeros(len(times))
    for op in ops:
        ms = np.array([t.get(op, 0.0) / 1000 for t in times.values()])
        ax.barh(list(times), ms, left=bottom, label=op, color=OP_COLORS.get(op, "tab:gray"))
        bottom += ms
    ax.invert_yaxis()
    ax.set_xlabel("ms (the stream's tasks one after another)")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.set_title(f"{MODELS[model]}, batch {BATCH}, on the {CHIP}: time by op type")
    return ax


def launch_us(model: str, build: Build) -> float:
    """Microseconds of a build's run that are launch start-up: what each AI Core launch (and each
    data move) paid before its cores started."""
    _, trace = run(model, build)
    c = trace.chip
    cycles = sum(r.trace.launch_cycles if r.trace is not None else c.launch.launch_cycles
                 for r in trace.records if r.engine in ("AiCore", "DataMove"))
    return cycles / (c.clock_ghz * 1000)


def print_launches(model: str = "resnet50") -> None:
    """Each build's tasks and the share of its latency that is launch start-up."""
    for label, b in (("naive", NAIVE), ("optimised", OPTIMISED)):
        trace, us = run(model, b)[1], launch_us(model, b)
        print(f"{MODELS[model]} {label:<10} {len(trace.records):>4} tasks, {us:6,.0f} us of launch start-up: "
              f"{us / trace.latency_us:.0%} of its {trace.latency_us:,.0f} us")


def relu_time_by_producer(model: str = "resnet50", build: Build = NAIVE) -> dict:
    """{op type feeding the ReLU: (launches, microseconds)} over a build's ReLU tasks."""
    cm, trace = run(model, build)
    producer = {v: n.op_type for n in cm.graph.nodes for v in n.outputs}
    inputs = {n.name: n.inputs[0] for n in cm.graph.nodes}
    out: dict = {}
    for r in trace.records:
        if r.op_type == "Relu":
            n, us = out.get(producer[inputs[r.name]], (0, 0.0))
            out[producer[inputs[r.name]]] = (n + 1, us + r.dur_us)
    return out


# -- one layer alone: the challenge ------------------------------------------------------------------
def layer_task(name: str, model: str = "resnet50", build: Build = NAIVE):
    """The compiled task of layer ``name`` in a build (a GraphError names some of its tasks)."""
    cm, _ = run(model, build)
    tasks = {t.name: t for t in cm.tasks}
    if name not in tasks:
        raise GraphError(f"no task {name!r} in {model}'s build; tasks are named after the graph's nodes, "
                       f"e.g. {', '.join(list(tasks)[:4])}")
    return tasks[name]


def run_layer(name: str, tiles=None, model: str = "resnet50", build: Build = NAIVE):
    """The timing-only trace of layer ``name`` launched alone: with ``tiles`` (ConvTiles), else
    with the tiling its build recorded; ``tiles="default"``: the tiling search's default."""
    task = layer_task(name, model, build)
    attrs = task.launch_attrs()
    if tiles == "default":
        attrs.pop("tiling")
    elif tiles is not None:
        attrs["tiling"] = tiles
    return registry.dispatch(task.kernel, *timing_operands(task), chip=CHIP, mode="timing", **attrs)[1]


__all__ = ["ALLOWED", "BATCH", "CHIP", "MODELS", "SEED_CLAIM", "SEQ", "ablation", "alone", "figures", "layer_task",
           "model_graph", "plot_time_by_op", "print_ablation", "print_claim", "print_launches", "print_models",
           "relu_time_by_producer", "run", "run_layer", "time_by_op"]
