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
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..chips import ChipSpec, chip_from_toml, chip_names, get_chip
from ..errors import ArgumentError, GraphError, NpuError, OfflineModelError
from ..kernels import search
from ..ops import registry
from . import memory, offline, serial
from .ir import Graph
from .lower import Task, lower


#: the seeds' fixed tilings (the naive build's): the matmul "seed" recipe (128 x 64 x 32 blocks,
#: npulab.kernels.matmul.tiling.TILINGS) and the conv's plain 128 x 128 tile, one channel block
#: per L1 step, with the buffer counts of the build
SEED_MATMUL = (128, 64, 32, 32)
CONV_KERNELS = ("Conv2D", "Conv3D", "Conv2DBNRelu", "Conv2DTranspose")


@dataclass(frozen=True)
class BuildOptions:
    """How a model is built, beyond its passes (ATC's options and the kernels' choices).

    tiling: "searched" (each problem's tuned tiling, else the default the tiling search finds)
    or "seed" (the seeds' fixed tilings, :data:`SEED_MATMUL` and the conv's plain tile);
    buffers: 2 (double buffering wherever a kernel takes a buffer count) or 1 (single);
    small_channel: ATC's ``--enable_small_channel 1``: a stem conv of at most 4 input channels
    runs in the C04 formats (off by default, as in ATC); memory_mode: GE_USE_STATIC_MEMORY's
    value (0 dynamic, 1 to 4 static: :func:`npulab.graph.memory.resolve_mode`), None to read
    ``NPULAB_STATIC_MEMORY``."""
    tiling: str = "searched"
    buffers: int = 2
    small_channel: bool = False
    memory_mode: int | None = None

    def __post_init__(self):
        if self.tiling not in ("searched", "seed"):
            raise ArgumentError(f"tiling must be 'searched' or 'seed', got {self.tiling!r}")
        if self.buffers not in (1, 2):
            raise ArgumentError(f"buffers must be 1 or 2, got {self.buffers!r}")

    def to_json(self) -> dict:
        return asdict(self)


def apply_options(tasks: list, chip: ChipSpec, options: BuildOptions) -> None:
    """Write the build's choices into its AI Core tasks' attributes: the C04 choice of every
    conv, the buffer count of every kernel that takes one, the seeds' matmul recipe."""
    b = options.buffers
    for t in tasks:
        if t.engine != "AiCore" or t.kernel is None:
            continue
        takes = registry.attributes(t.kernel)
        if t.kernel in CONV_KERNELS and "c04" in takes and not options.small_channel:
            t.attrs["c04"] = False
        if "buffer_num" in takes:
            t.attrs["buffer_num"] = b
        if options.tiling == "seed" and "tiling" in takes and t.kernel not in CONV_KERNELS:
            t.attrs["tiling"] = [*SEED_MATMUL, b, b, b]


def _seed_conv(kernel: str, specs, chip: ChipSpec, attrs: dict, buffers: int):
    """The seeds' conv tiling of a task: the plain tile over every core its tiles can fill."""
    tiles = search.family_named("conv").tiles(l1_buffers=buffers, l0_buffers=buffers, l0c_buffers=buffers)
    t = registry.dispatcher.tiling(registry.lookup(kernel), specs, chip, dict(attrs, tiling=tiles))
    return t.with_tiles(block_dim=min(chip.ai_cores, t.core_loops))


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

    def summary(self) -> str:
        """The compile report as aligned text (what ``npulab atc`` prints)."""
        r = self.report
        rows = [("model", self.name), ("chip", self.chip.name),
                ("nodes", f"{r['nodes_before']} before the passes, {r['nodes_after']} after"),
                ("tasks", ", ".join(f"{n} {e}" for e, n in r["engines"].items())),
                ("tilings", f"{r['tilings']} distinct"),
                ("memory", f"{r['feature_bytes']:,} B of intermediates planned (their sum {r['intermediate_bytes']:,} B), "
                           f"{r['weights_bytes']:,} B of weights; {r['memory_mode']}"),
                ("compile", f"{r['compile_s']:.2f} s")]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


# -- the offline model file --------------------------------------------------------------------
FORMAT = "npulab offline model"


def _chip_text(chip: ChipSpec) -> str:
    """The text of the chip file ``chip`` came from (an offline model carries it)."""
    if not chip.source:
        raise GraphError(f"chip '{chip.name}' has no chip file to store in the model (it was not read from one)")
    return Path(chip.source).read_text(encoding="utf-8")


def _chip_of(name: str, text: str) -> ChipSpec:
    """The chip an offline model names: the built-in one when its file is the same text, else
    the chip of the stored text."""
    if name in chip_names():
        builtin = get_chip(name)
        if _chip_text(builtin) == text:
            return builtin
    return chip_from_toml(text, f"the chip file stored in the model ('{name}')")


def save_model(model: "CompiledModel", path) -> Path:
    """Write ``model`` as one offline model file (:mod:`npulab.graph.offline`): the graph, its
    tasks with their tiles, the chip file it was compiled for, the report; the constants in the
    ``.npz``. Never pickled."""
    doc, arrays = serial.to_json(model.graph)
    manifest = {"format": FORMAT, "name": model.name,
                "chip": {"name": model.chip.name, "toml": _chip_text(model.chip)},
                "graph": doc, "tasks": [t.to_json() for t in model.tasks],
                "plan": None if model.plan is None else model.plan.to_json(),
                "report": json.loads(json.dumps(model.report))}
    return offline.write(path, manifest, arrays)


def load_model(path) -> "CompiledModel":
    """Read an offline model file written by :func:`save_model` (any damage is an
    OfflineModelError from :func:`npulab.graph.offline.read`; a file of another kind or a
    malformed manifest too)."""
    manifest, arrays = offline.read(path)
    if manifest.get("format") != FORMAT:
        raise OfflineModelError(f"offline model '{path}': its manifest is a {manifest.get('format')!r}, "
                                f"expected {FORMAT!r}")
    try:
        chip = _chip_of(manifest["chip"]["name"], manifest["chip"]["toml"])
        graph = serial.from_json(manifest["graph"], arrays)
        tasks = [Task.from_json(t) for t in manifest["tasks"]]
        plan = None if manifest["plan"] is None else memory.MemoryPlan.from_json(manifest["plan"])
        report = dict(manifest["report"])
    except (KeyError, TypeError, ValueError, NpuError) as exc:
        raise OfflineModelError(f"offline model '{path}': the manifest is malformed: {exc}") from None
    return CompiledModel(graph, chip, tasks, report, plan)


def task_key(task: Task) -> tuple:
    """What a launch's timing depends on: kernel, operand shapes and dtypes, attributes. Two
    tasks with one key run the same instructions (a model simulates each key once)."""
    return (task.kernel, tuple((tuple(o.shape), o.dtype) if o is not None else None for o in task.operands),
            json.dumps(task.attrs, sort_keys=True), task.engine, task.bytes_moved)


def pick_tilings(tasks: list, chip: ChipSpec, progress: bool = False, options: BuildOptions = BuildOptions()) -> int:
    """Pick the tiling of every distinct AI Core kernel task, through the dispatcher (the one
    tiling search and its cache). A cube task's tiles are written into its attributes
    (``tiles``: the family and its tiles as JSON), so the offline model carries them and a
    launch from it needs no search, as an ``.om`` carries each operator's tiling data. Returns
    how many distinct tilings there are. ``progress``: a bar over them (ATC's progress)."""
    distinct: dict = {}
    for t in tasks:
        if t.engine == "AiCore" and t.kernel is not None:
            distinct.setdefault(task_key(t), []).append(t)
    bar = search.progress_bar(len(distinct), "tilings") if progress else None
    try:
        for same in distinct.values():
            _pick(same, chip, options)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return len(distinct)


def _pick(same: list, chip: ChipSpec, options: BuildOptions) -> None:
    """The tiling of one distinct task, recorded in each task that repeats it."""
    t = same[0]
    if options.tiling == "seed" and t.kernel in CONV_KERNELS:
        tiling = _seed_conv(t.kernel, t.specs(), chip, t.kernel_attrs(), options.buffers)
    else:
        tiling = registry.dispatcher.tiling(registry.lookup(t.kernel), t.specs(), chip, t.kernel_attrs())
    fam = search.family_of(tiling.problem) if hasattr(tiling, "tiles") and hasattr(tiling, "problem") else None
    if fam is not None and "tiling" in registry.attributes(t.kernel):
        for each in same:
            each.attrs["tiles"] = {"family": fam.op, "tiles": fam.encode(tiling)}


def _best_plan(g: Graph, chip: ChipSpec, mode, tasks: list):
    """The static plan with the smaller arena of the best-fit and greedy-by-size planners (each
    wins on some graphs; both take milliseconds), or the dynamic plan."""
    plans = [memory.plan_memory(g, chip, planner=p, mode=mode, tasks=tasks) for p in ("best_fit", "greedy_by_size")]
    return min(plans, key=lambda p: p.peak) if plans[0].mode.static else plans[0]


def compile_graph(graph: Graph, chip, *, passes=None, options: BuildOptions = BuildOptions(),
                  progress: bool = False) -> CompiledModel:
    """Compile ``graph`` (typed: :meth:`~npulab.graph.ir.Graph.infer` first) for ``chip``.
    ``passes``: a callable Graph -> Graph applied first (the pass pipeline), or None;
    ``options``: the build's tiling, buffering and C04 choices."""
    chip = get_chip(chip)
    t0 = time.perf_counter()
    if any(v not in graph.types for n in graph.nodes for v in n.outputs):
        raise GraphError(f"graph '{graph.name}': not typed; call graph.infer() before compiling")
    nodes_before = len(graph.nodes)
    g = passes(graph) if passes is not None else graph
    tasks = lower(g, chip)
    apply_options(tasks, chip, options)
    distinct = pick_tilings(tasks, chip, progress, options)
    plan = _best_plan(g, chip, options.memory_mode, tasks)
    engines: dict[str, int] = {}
    for t in tasks:
        engines[t.engine] = engines.get(t.engine, 0) + 1
    report = {"options": options.to_json(), "nodes_before": nodes_before, "nodes_after": len(g.nodes), "engines": engines,
              "tilings": distinct, "memory_mode": str(plan.mode), "feature_bytes": plan.peak,
              "intermediate_bytes": plan.total_bytes, "weights_bytes": plan.weights_bytes,
              "compile_s": time.perf_counter() - t0}
    return CompiledModel(g, chip, tasks, report, plan)


__all__ = ["BuildOptions", "apply_options", "SEED_MATMUL", "CONV_KERNELS", "CompiledModel", "compile_graph", "load_model", "save_model", "pick_tilings", "task_key"]
