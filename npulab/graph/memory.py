"""The static memory plan of a graph: where each intermediate tensor lives in one arena of device
memory, fixed when the graph is compiled, as GE assigns the feature memory of a model.

A model needs memory of three kinds, kept apart (GE's ``GetCompiledGraphSummary`` reports a
const memory size and a feature memory size):

* **weights** (the graph's constants): live for the whole run, laid end to end in their own
  region (:attr:`MemoryPlan.weights`, :attr:`MemoryPlan.weights_bytes`);
* **inputs**: the caller's buffers, fed to each run; not planned, only counted;
* **feature memory**: every tensor a node writes, and each node's scratch. This is what the
  plan packs, reusing the bytes of tensors that are dead.

How it is planned, step by step:

1. **Liveness.** Node i of the graph (its nodes are in topological order) runs at step i. A
   tensor lives from the step that writes it to the last step that reads it, both included: the
   half-open ``[write, last read + 1)``; a graph output lives to the end, a tensor nobody reads
   for its own step. Two tensors whose lifetimes meet may not share a byte.
2. **In-place reuse** (``inplace=True``), two rules after GE's (which takes the second only for
   ops that declare they can run in place; npulab takes it for every op of :data:`ELEMENTWISE`):

   * a *relabel* (Identity, Reshape, Flatten, Squeeze, Unsqueeze: :data:`~.lower.RELABELS`)
     writes nothing: its output *is* its input's bytes under another shape, one buffer;
   * an *element-wise* op (:data:`ELEMENTWISE`: each output element depends only on the input
     elements of the same index, so a kernel reads a tile before it writes it) may write its
     output over one of its inputs when that input (with every relabel of it) is read by no later
     node and is no graph output, is an intermediate (never a graph input or a weight: GE's
     read-only symbols), and has the output's byte size (GE's ``RemoveSizeNotEqual``); an input
     is taken over by one output at most (hicann/ge ``compiler/graph/build/memory/mem_inplace.cc``).

   The values that share a buffer are its :attr:`Placement.values`, in the order written.
3. **Scratch.** A node's tasks (:func:`npulab.graph.lower.lower_node`, when a chip is given) may
   need GM workspace beside their operands: the figure a kernel's tiling reports as
   ``workspace_bytes`` (the fused matmul's handover tiles; :func:`task_workspace` is the hook,
   0 for a tiling that reports none). A node lowered to two tasks keeps the tensor between them
   ("fc/pre_gelu") as scratch too. Scratch lives during its node's step only.
4. **Alignment.** Every size is rounded up to :data:`MEM_ALIGN` bytes, GE's ``MEM_ALIGN_SIZE``
   (512, hicann/ge ``compiler/graph/build/memory/mem_assigner.h``; ``MemReuseUtils::AlignMemOffset``
   rounds block sizes to it), so every offset, a sum of sizes, is aligned too.
5. **Offsets**, by a planner of :mod:`~.offsets`: ``best_fit`` (the order the graph makes them,
   each into the smallest gap that fits), ``greedy_by_size`` (largest first) or ``optimal``
   (exact, small graphs).

Static or dynamic, as GE_USE_STATIC_MEMORY chooses (data/FACTS.md, source S10: 0
allocates dynamically by actual size, 2 expands static-shape memory, 3 dynamic-shape memory, 4
both, 1 is treated as 2): here ``NPULAB_STATIC_MEMORY`` or the ``mode`` argument
(:func:`resolve_mode`).

* **static** (2, 3, 4): the compile-time plan above; the runtime allocates one arena of
  :attr:`MemoryPlan.peak` bytes and every tensor's address is fixed. npulab's graphs have static
  shapes, so the three give the same plan; what tells them apart on the real stack (growing one
  arena across a session's graphs, dynamic-shape graphs) has no counterpart here;
* **dynamic** (0, the default), as npulab models it: nothing is planned. The runtime asks its allocator for each
  tensor when its node writes it and gives it back after its last read. The bytes held at the
  worst step are the lower bound (the plan's :attr:`~MemoryPlan.peak`), but where they sit is
  the allocator's affair: here it takes the lowest free address (first fit), and the highest
  address it reaches (:attr:`~MemoryPlan.span`) may exceed the peak: fragmentation, which no
  allocator working one request at a time rules out. It also pays an allocation per tensor per
  run, which a static plan does not.

    plan = plan_memory(graph, "910", mode=2)
    plan.check()                     # no two live tensors on common bytes
    print(plan.summary())
    npulab.plot.memplan.memory_plan(plan.tensors(), time_unit="node")
"""
from __future__ import annotations

import dataclasses

import os
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..arch import round_up
from ..chips import get_chip
from ..errors import ArgumentError, PlanError
from ..ops import registry
from ..sim.memory import fmt_bytes
from .ir import Graph
from .lower import RELABELS, Task, lower_node
from .offsets import EXACT_LIMIT, PLANNERS, Block, first_fit, max_live, meets, peak as top_edge

#: GE's MEM_ALIGN_SIZE: block sizes (and so offsets) in the feature memory are multiples of it
MEM_ALIGN = 512
#: the environment variable that picks static or dynamic memory (GE_USE_STATIC_MEMORY's analog)
ENV = "NPULAB_STATIC_MEMORY"
#: the modes GE_USE_STATIC_MEMORY takes (1 is taken as 2)
MODES = {0: "dynamic: each tensor allocated when written, freed after its last read",
         2: "static: one arena planned at compile time (static-shape memory expansion)",
         3: "static: one arena planned at compile time (dynamic-shape memory expansion)",
         4: "static: one arena planned at compile time (static- and dynamic-shape expansion)"}
#: element-wise op types: output element i reads input elements i only (and broadcast operands)
ELEMENTWISE = ("Relu", "Swish", "SiLU", "Gelu", "Add", "AddRelu", "AddBroadcast", "Mul", "Sub", "RealDiv",
               "Pow", "Maximum", "Minimum", "Neg", "Exp", "Log", "Sqrt", "Rsqrt", "Reciprocal", "Abs",
               "Tanh", "Sigmoid", "Erf", "BatchNorm")
#: op types whose output may take over only some of their inputs (BatchNorm: x, not its stats)
INPLACE_INPUTS = {"BatchNorm": (0,)}


class MemoryMode(NamedTuple):
    """A resolved memory mode: ``value`` in effect (0, 2, 3 or 4), the ``requested`` one (1 for
    a 1 taken as 2) and where it came from."""
    value: int
    requested: int
    source: str

    @property
    def static(self) -> bool:
        return self.value != 0

    def __str__(self) -> str:
        asked = f", {self.requested} taken as {self.value}" if self.requested != self.value else ""
        return f"{ENV}={self.value} ({self.source}{asked}): {MODES[self.value]}"


def resolve_mode(mode=None) -> MemoryMode:
    """The memory mode: ``mode`` if given (0 to 4, as a number or a string), else the
    environment variable :data:`ENV`, else 0 (dynamic, GE's default). 1 is taken as 2, as GE
    does; any other value raises ArgumentError."""
    source = "argument"
    if mode is None:
        raw = os.environ.get(ENV, "").strip()
        source = f"environment variable {ENV}" if raw else "default"
        mode = raw or 0
    value = int(mode) if not isinstance(mode, bool) and str(mode).strip().isdigit() else None
    if value not in (0, 1, 2, 3, 4):
        raise ArgumentError(f"memory mode {mode!r} ({source}): expected 0 (dynamic, the default), 2, 3 "
                            f"or 4 (static), or 1 (taken as 2), as GE_USE_STATIC_MEMORY takes")
    return MemoryMode(2 if value == 1 else value, value, source)


# -- liveness and in-place reuse ------------------------------------------------------------
@dataclass
class Buffer:
    """Bytes of the feature memory that one or more values use in turn: ``values`` in the order
    written (the first wrote it, relabels name it, in-place writes overwrite it) or a node's
    scratch (``kind`` "workspace" or "internal")."""
    name: str
    start: int
    end: int
    nbytes: int
    size: int                 # nbytes rounded up to the alignment
    values: list
    kind: str = "tensor"


@dataclass
class Liveness:
    """What the planner packs: the buffers, and how values map onto them."""
    steps: int
    buffers: list             # [Buffer]
    buffer_of: dict           # feature value -> its buffer's name
    aliases: dict             # relabel output -> the value whose bytes it names
    inplace: list             # [(node, output, input it overwrote)]
    region: dict              # every value -> "input", "weights" or "feature"


def _inplace_victim(g: Graph, node, i: int, root: dict, members: dict, last: dict, outputs: set):
    """The input whose buffer ``node``'s output may overwrite (the rule in the module docstring),
    as (buffer root, input value), or None. An element-wise op has one output, so an input is
    taken over once at most."""
    if node.op_type not in ELEMENTWISE or len(node.outputs) != 1:
        return None
    want = g.type_of(node.outputs[0]).nbytes
    allowed = INPLACE_INPUTS.get(node.op_type)
    for k, v in enumerate(node.inputs):
        if not v or (allowed is not None and k not in allowed):
            continue
        r = root.get(v, v)
        if r not in members or g.type_of(v).nbytes != want:
            continue                     # a graph input or a weight (read-only), or another size
        if any(m in outputs or last.get(m, -1) > i for m in members[r]):
            continue                     # still read later, or a graph output
        return r, v
    return None


def _last_reads(graph: Graph) -> tuple[dict, dict]:
    """({value: step that writes it}, {value: last step that reads it})."""
    produced, last = {}, {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v:
                last[v] = i
        for v in node.outputs:
            produced[v] = i
    return produced, last


def liveness(graph: Graph, scratch: dict | None = None, inplace: bool = True,
             alignment: int = MEM_ALIGN) -> Liveness:
    """The buffers of ``graph``'s feature memory with their lifetimes (steps = node indices).

    scratch: {node name: [(name, nbytes, kind)]} of each node's scratch (:func:`node_scratch`);
    inplace: apply the in-place rules; alignment: bytes each size is rounded up to."""
    if alignment < 1:
        raise ArgumentError(f"memory plan: alignment={alignment} must be a whole number of bytes >= 1")
    n, outputs = len(graph.nodes), set(graph.outputs)
    produced, last = _last_reads(graph)
    region = {v: "input" for v in graph.inputs} | {v: "weights" for v in graph.constants}
    root, members, aliases, done = {}, {}, {}, []      # value -> its buffer's first value, ...
    for i, node in enumerate(graph.nodes):
        if node.op_type in RELABELS:
            out, src = node.outputs[0], node.inputs[0]
            root[out], aliases[out] = root.get(src, src), src
            region[out] = region.get(root[out], "feature")
            if root[out] in members:     # (a relabel of a graph input or a weight stays there)
                members[root[out]].append(out)
            continue
        for out in node.outputs:
            region[out] = "feature"
            victim = _inplace_victim(graph, node, i, root, members, last, outputs) if inplace else None
            root[out] = victim[0] if victim else out
            members.setdefault(root[out], []).append(out)
            if victim:
                done.append((node.name, out, victim[1]))
    buffers = []
    for r, vals in members.items():
        nbytes = max(graph.type_of(m).nbytes for m in vals)     # (equal, by the in-place rule)
        end = n if outputs.intersection(vals) else max(last.get(m, produced[m]) for m in vals) + 1
        buffers.append(Buffer(r, produced[r], end, nbytes, round_up(nbytes, alignment), list(vals)))
    for i, node in enumerate(graph.nodes):
        for name, nbytes, kind in (scratch or {}).get(node.name, []):
            if nbytes > 0:
                buffers.append(Buffer(name, i, i + 1, nbytes, round_up(nbytes, alignment), [name], kind))
    buffer_of = {m: b.name for b in buffers for m in b.values}
    return Liveness(n, buffers, buffer_of, aliases, done, region)


# -- scratch from the lowered tasks ---------------------------------------------------------
def task_workspace(task: Task, chip) -> int:
    """Bytes of GM workspace ``task``'s kernel needs beside its operands: the ``workspace_bytes``
    its tiling reports (the tiles the compile step recorded in it, else the tiling the
    dispatcher picks for these operands), 0 for a task with no kernel or a tiling that reports
    none."""
    if task.engine != "AiCore" or task.kernel is None or task.kernel not in registry.op_types():
        return 0
    op = registry.lookup(task.kernel)
    tiling = registry.dispatcher.tiling(op, task.specs(), get_chip(chip), task.launch_attrs())
    return int(getattr(tiling, "workspace_bytes", 0))


def _operand_bytes(tasks: list, value: str) -> int:
    for t in tasks:
        for o in t.operands:
            if o is not None and o.value == value:
                return int(np.prod(o.shape, dtype=np.int64)) * np.dtype(o.dtype).itemsize
    return 0


def node_scratch(graph: Graph, chip, tasks: list | None = None) -> dict:
    """{node name: [(name, nbytes, kind)]}: each node's workspace (the largest of its tasks':
    they run one after another) and the tensors between its own tasks ("internal"). ``tasks``:
    the compiled tasks (with the build's tiles and options), used in place of a fresh lowering."""
    chip = get_chip(chip)
    given = {t.name: t for t in tasks or ()}
    out = {}
    for node in graph.nodes:
        tasks = [given.get(t.name, t) for t in lower_node(graph, node, chip)]
        items = [(v, _operand_bytes(tasks, v), "internal") for t in tasks for v in t.outputs
                 if v not in node.outputs]
        ws = max((task_workspace(t, chip) for t in tasks), default=0)
        if ws:
            items.append((f"{node.name}/workspace", ws, "workspace"))
        if items:
            out[node.name] = items
    return out


# -- the plan -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Placement:
    """One buffer of the plan: live over steps ``[start, end)`` at bytes ``[offset, offset +
    size)``; the form :func:`npulab.plot.memplan.memory_plan` draws."""
    name: str
    start: int
    end: int
    offset: int
    size: int
    values: tuple = ()
    kind: str = "tensor"


@dataclass
class MemoryPlan:
    """A graph's memory: the feature-memory placements, the weights region, and the figures.

    peak: static, the arena's size (the highest end of any placement); dynamic, the most bytes
    held at one step. span: the highest address any placement reaches (static: the peak).
    total_bytes: the sum of every buffer's size before reuse (each written tensor and each scratch
    its own memory). lower_bound: the most bytes live at one step, which no plan beats."""
    graph: str
    mode: MemoryMode
    planner: str
    alignment: int
    steps: int
    placements: list
    offsets: dict              # feature value -> offset of its buffer
    weights: dict              # constant -> offset in the weights region
    weights_bytes: int
    input_bytes: int
    total_bytes: int
    lower_bound: int
    peak: int
    span: int
    inplace: list = field(default_factory=list)   # [(node, output, input it overwrote)]
    aliases: dict = field(default_factory=dict)   # relabel output -> the value it names
    inputs: tuple = ()         # the graph inputs (and relabels of them): the caller's buffers

    def offset(self, value: str) -> int:
        """The feature-memory offset of ``value`` (its buffer's); ArgumentError for a value that
        lives elsewhere (a graph input, a weight) or is not in the graph."""
        if value in self.offsets:
            return self.offsets[value]
        where = ("a weight: see .weights" if value in self.weights else
                 "a graph input: the caller's buffer" if value in self.inputs else "not a value of the graph")
        raise ArgumentError(f"memory plan of '{self.graph}': '{value}' has no feature-memory offset ({where})")

    def tensors(self) -> list[tuple]:
        """The placements as (name, start, end, offset, size), the items
        :func:`npulab.plot.memplan.plan_tensors` takes (zero-byte tensors left out)."""
        return [(p.name, p.start, p.end, p.offset, p.size) for p in self.placements if p.size > 0]

    def check(self) -> "MemoryPlan":
        """Raise PlanError unless every placement is aligned and no two placements live at a
        common step share a byte, and the peak is what the placements give. Returns the plan."""
        ps = sorted((p for p in self.placements if p.size > 0), key=lambda p: p.offset)
        for p in ps:
            if p.offset % self.alignment or p.size % self.alignment:
                raise PlanError(f"memory plan of '{self.graph}': {p.name} at offset {p.offset}, {p.size} B "
                                f"is off the {self.alignment}-byte alignment")
        for i, a in enumerate(ps):
            for b in ps[i + 1:]:
                if b.offset >= a.offset + a.size:
                    break
                if meets(Block(a.name, a.start, a.end, a.size), Block(b.name, b.start, b.end, b.size)):
                    raise PlanError(
                        f"memory plan of '{self.graph}': {a.name} (steps {a.start}-{a.end}, bytes "
                        f"{a.offset}-{a.offset + a.size}) and {b.name} (steps {b.start}-{b.end}, bytes "
                        f"{b.offset}-{b.offset + b.size}) are live at once on common bytes")
        top = max((p.offset + p.size for p in ps), default=0)
        want = top if self.mode.static else self.lower_bound
        if self.span != top or self.peak != want:
            raise PlanError(f"memory plan of '{self.graph}': peak {self.peak} / span {self.span}, but the "
                            f"placements reach {top} and hold at most {self.lower_bound} at once")
        return self

    def summary(self) -> str:
        """The plan as a few lines of text: mode, planner, the figures, what reuse did."""
        kinds = [p.kind for p in self.placements]
        shared = sum(len(p.values) - 1 for p in self.placements if p.kind == "tensor")
        share = f"{100 * self.peak / self.total_bytes:.1f}%" if self.total_bytes else "-"
        rows = [("feature memory (peak)", self.peak,
                 "one arena, fixed at compile time" if self.mode.static else "most bytes held at one step"),
                ("sum of intermediates", self.total_bytes, f"each its own memory; the peak is {share} of it"),
                ("lower bound", self.lower_bound, "most bytes live at one step"),
                ("weights", self.weights_bytes, f"own region, {len(self.weights)} constants"),
                ("inputs", self.input_bytes, "the caller's buffers, not planned")]
        if not self.mode.static:
            rows.insert(1, ("address span", self.span, "where a first-fit allocator put them"))
        lines = [f"memory plan of graph '{self.graph}': {self.mode}",
                 f"  planner {self.planner}, sizes aligned to {self.alignment} B, {self.steps} steps"]
        lines += [f"  {label:<22} {fmt_bytes(v):>10}   {note}" for label, v, note in rows]
        lines.append(f"  {kinds.count('tensor')} buffers hold {len(self.offsets)} values: {len(self.inplace)} "
                     f"written in place, {len(self.aliases)} relabels ({shared} reuse the bytes of another); "
                     f"{kinds.count('workspace')} workspaces, {kinds.count('internal')} tensors inside a node")
        return "\n".join(lines)

    def to_json(self) -> dict:
        """The plan as JSON values (an offline model carries it)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["mode"] = list(self.mode)
        d["placements"] = [dataclasses.asdict(p) | {"values": list(p.values)} for p in self.placements]
        d["inplace"] = [list(t) for t in self.inplace]
        d["inputs"] = list(self.inputs)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "MemoryPlan":
        """The plan of :meth:`to_json`'s values."""
        d = dict(d)
        d["mode"] = MemoryMode(*d["mode"])
        d["placements"] = [Placement(**(p | {"values": tuple(p["values"])})) for p in d["placements"]]
        d["inplace"] = [tuple(t) for t in d["inplace"]]
        d["inputs"] = tuple(d["inputs"])
        return cls(**d)

    def __repr__(self) -> str:
        return (f"MemoryPlan('{self.graph}', {'static' if self.mode.static else 'dynamic'}, {self.planner}: "
                f"peak {fmt_bytes(self.peak)} of {fmt_bytes(self.total_bytes)})")


def _weights(graph: Graph, live: Liveness, alignment: int) -> tuple[dict, int]:
    """Each constant's offset in the weights region (end to end, aligned; a relabel of one at
    its offset) and the region's size."""
    offsets, top = {}, 0
    for name in graph.constants:
        offsets[name] = top
        top += round_up(graph.type_of(name).nbytes, alignment)
    for v in live.aliases:
        if live.region[v] == "weights":
            src = v
            while src in live.aliases:
                src = live.aliases[src]
            offsets[v] = offsets[src]
    return offsets, top


def _without_reuse(graph: Graph, live: Liveness, alignment: int) -> int:
    """Bytes with every written tensor and every scratch in its own memory (relabels write none)."""
    tensors = [m for b in live.buffers if b.kind == "tensor" for m in b.values if m not in live.aliases]
    return (sum(round_up(graph.type_of(m).nbytes, alignment) for m in tensors) +
            sum(b.size for b in live.buffers if b.kind != "tensor"))


def plan_memory(graph: Graph, chip=None, *, planner: str = "best_fit", mode=None, inplace: bool = True,
                alignment: int = MEM_ALIGN, limit: int = EXACT_LIMIT, tasks: list | None = None) -> MemoryPlan:
    """The memory plan of a typed graph (see the module docstring). ``tasks``: the graph's
    compiled tasks, whose recorded tiles size the workspaces (None: the dispatcher's tilings).

    chip: lower each node for it to find its scratch (None: no scratch); planner: "best_fit",
    "greedy_by_size" or "optimal" (a static mode's compile-time planner; ``limit`` bounds the
    exact search); mode: 0 to 4 or None for :func:`resolve_mode`'s choice; inplace: apply the
    in-place rules; alignment: bytes sizes are rounded up to."""
    if planner not in PLANNERS:
        raise ArgumentError(f"memory plan: planner {planner!r} is not one of {', '.join(PLANNERS)}")
    memory_mode = resolve_mode(mode)
    graph.validate()
    live = liveness(graph, node_scratch(graph, chip, tasks) if chip is not None else None, inplace, alignment)
    blocks = [Block(b.name, b.start, b.end, b.size) for b in live.buffers if b.size > 0]
    if not memory_mode.static:
        offsets, name = first_fit(blocks), "first_fit at run time (nothing planned)"
    elif planner == "optimal":
        offsets, name = PLANNERS[planner](blocks, limit), planner
    else:
        offsets, name = PLANNERS[planner](blocks), planner
    placements = [Placement(b.name, b.start, b.end, offsets.get(b.name, 0), b.size, tuple(b.values), b.kind)
                  for b in live.buffers]
    feature = {m: offsets.get(b.name, 0) for b in live.buffers if b.kind == "tensor" for m in b.values}
    weights, weights_bytes = _weights(graph, live, alignment)
    bound, span = max_live(blocks), top_edge(blocks, offsets)
    return MemoryPlan(graph.name, memory_mode, name, alignment, live.steps, placements, feature, weights,
                      weights_bytes, sum(graph.type_of(v).nbytes for v in graph.inputs),
                      _without_reuse(graph, live, alignment), bound,
                      span if memory_mode.static else bound, span, live.inplace, live.aliases,
                      tuple(v for v, where in live.region.items() if where == "input"))


__all__ = ["ELEMENTWISE", "ENV", "MEM_ALIGN", "MODES", "Buffer", "Liveness", "MemoryMode", "MemoryPlan",
           "Placement", "liveness", "node_scratch", "plan_memory", "resolve_mode", "task_workspace"]
