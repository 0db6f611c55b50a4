"""Compile: a graph to a model for one chip, the analog of ATC (``atc --framework ... --output
... --soc_version ...``), which runs the graph engine's passes, places every node on an engine,
picks every operator's tiling and plans device memory, then writes an offline model (``.om``).

Here :func:`compile_graph` does the same steps on an npulab :class:`~npulab.graph.ir.Graph`:

1. **passes** (:mod:`npulab.graph.passes`, switchable as ATC's ``--fusion_switch_file``);
2. **lowering** (:func:`npulab.graph.lower.lower`): each node a task for the AI Core, the AI
   CPU, or none (a relabel);
3. **tiling**: every AI Core task's tiling, through the one tiling search and its cache
   (:mod:`npulab.kernels.search`: searched once per distinct problem, stored on disk and shared
   by later compiles; ``NPULAB_PARALLEL_COMPILER`` workers, TE_PARALLEL_COMPILER's analog). The
   tiling-cache entries the model's tilings came from travel inside the model, so loading it
   elsewhere needs no search;
4. **memory plan** (:mod:`npulab.graph.memory`): offsets of every intermediate in one
   device-memory region (static) or allocation at run time (dynamic), as GE_USE_STATIC_MEMORY
   chooses.

The result, a :class:`CompiledModel`, is saved as one offline model file
(:mod:`npulab.graph.offline`: a zip of JSON and ``.npz``, never pickled) and run by
:mod:`npulab.runtime`.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import numpy as np

from ..chips import ChipSpec, get_chip
from ..errors import GraphError
from ..kernels import search
from ..ops import registry
from .ir import Graph
from .lower import Task, lower


@dataclass
class CompiledModel:
    """A graph compiled for one chip: the graph after the passes (with its constants), its
    tasks in launch order (each cube task with its tiles), the memory plan and the compile
    report (see :meth:`summary`)."""
    graph: Graph
    chip: ChipSpec
    tasks: list
    report: dict = field(default_factory=dict)
    plan: object = None

    @property
    def name(self) -> str:
        return self.graph.name

    def aicore_tasks(self) -> list[Task]:
        return [t for t in self.tasks if t.engine == "AiCore"]

    def summary(self) -> str:
        """The compile report as aligned text (what ``npulab atc`` prints)."""
        r = self.report
        rows = [("model", self.name), ("chip", self.chip.name),
                ("nodes", f"{r['nodes_before']} before the passes, {r['nodes_after']} after"),
                ("tasks", ", ".join(f"{n} {e}" for e, n in r["engines"].items())),
                ("tilings", f"{r['tilings']} distinct"),
                ("compile", f"{r['compile_s']:.2f} s")]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def task_specs(task: Task) -> list:
    """The kernel's input specs (shape, dtype) of an AI Core task, in its operand order."""
    return [registry.TensorSpec(tuple(o.shape), np.dtype(o.dtype)) for o in task.operands if o is not None]


def task_key(task: Task) -> tuple:
    """What a launch's timing depends on: kernel, operand shapes and dtypes, attributes. Two
    tasks with one key run the same instructions (a model simulates each key once)."""
    return (task.kernel, tuple((tuple(o.shape), o.dtype) if o is not None else None for o in task.operands),
            json.dumps(task.attrs, sort_keys=True), task.engine, task.bytes_moved)


def pick_tilings(tasks: list, chip: ChipSpec, progress=None) -> int:
    """Pick the tiling of every distinct AI Core kernel task, through the dispatcher (the one
    tiling search and its cache). A cube task's tiles are written into its attributes
    (``tiles``: the family and its tiles as JSON), so the offline model carries them and a
    launch from it needs no search, as an ``.om`` carries each operator's tiling data. Returns
    how many distinct tilings there are."""
    distinct: dict = {}
    for t in tasks:
        if t.engine == "AiCore" and t.kernel is not None:
            distinct.setdefault(task_key(t), []).append(t)
    for same in distinct.values():
        t = same[0]
        tiling = registry.dispatcher.tiling(registry.lookup(t.kernel), task_specs(t), chip, t.kernel_attrs())
        fam = search.family_of(tiling.problem) if hasattr(tiling, "tiles") and hasattr(tiling, "problem") else None
        if fam is not None and "tiling" in registry.attributes(t.kernel):
            for each in same:
                each.attrs["tiles"] = {"family": fam.op, "tiles": fam.encode(tiling)}
        if progress is not None:
            progress.update(1)
    return len(distinct)


def launch_attrs(task: Task) -> dict:
    """A task's attributes as its kernel takes them: the recorded tiles (:func:`pick_tilings`)
    become the kernel's ``tiling`` argument."""
    attrs = task.kernel_attrs()
    rec = attrs.pop("tiles", None)
    if rec is not None:
        fam = search.family_named(rec["family"])
        attrs["tiling"] = fam.tiles(**{k: v for k, v in task.attrs["tiles"]["tiles"].items()})
    return attrs


def compile_graph(graph: Graph, chip, *, passes=None, progress=None) -> CompiledModel:
    """Compile ``graph`` (typed: :meth:`~npulab.graph.ir.Graph.infer` first) for ``chip``.
    ``passes``: a callable Graph -> Graph applied first (the pass pipeline), or None."""
    chip = get_chip(chip)
    t0 = time.perf_counter()
    if any(v not in graph.types for n in graph.nodes for v in n.outputs):
        raise GraphError(f"graph '{graph.name}': not typed; call graph.infer() before compiling")
    nodes_before = len(graph.nodes)
    g = passes(graph) if passes is not None else graph
    tasks = lower(g, chip)
    distinct = pick_tilings(tasks, chip, progress)
    engines: dict[str, int] = {}
    for t in tasks:
        engines[t.engine] = engines.get(t.engine, 0) + 1
    report = {"nodes_before": nodes_before, "nodes_after": len(g.nodes), "engines": engines,
              "tilings": distinct, "compile_s": time.perf_counter() - t0}
    return CompiledModel(g, chip, tasks, report)


__all__ = ["CompiledModel", "compile_graph", "launch_attrs", "pick_tilings", "task_key", "task_specs"]
