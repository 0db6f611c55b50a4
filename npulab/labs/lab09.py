"""Lab 09 (graph compile and memory): the passes on a small ResNet, its memory plan, a device
that runs out of memory, and the exercise material.

* :func:`small_resnet`, :func:`print_passes`, :func:`switch_files`, :func:`first_lines`: the
  passes' report, their GM bytes, both forms of the fusion switch file, an error's head;
* :func:`liveness_graph`, :func:`intervals`: exercise 1's graph and its lifetimes
  (:func:`npulab.graph.memory.liveness`, in-place reuse off);
* :func:`blocks_of`, :func:`planner_cases`, :func:`plan_problem`, :func:`planned_peak`:
  exercise 2's block sets, what is wrong with a plan, its peak; :func:`adversarial_blocks` and
  :func:`multi_order_planner`: the challenge's blocks and its reference;
* :func:`scale_graph`, :func:`apply_rule`, :func:`fold_channel_scale_reference`: exercise 3's
  graph, running a learner's rule the way :func:`npulab.graph.passes.run_rule` runs a registered
  one, and the reference rule;
* :func:`batch_graph`, :func:`loadable`, :func:`crowded_device`, :func:`try_load`: exercise 4's
  model at a batch, the model a loader needs (graph, plan) without the tiling search, a 910 that
  another process has nearly filled, and loading on it;
* :func:`measure_rows`, :func:`print_measure`: what the passes and the plan buy on three models.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

from ..errors import DeviceMemoryError
from ..graph import Graph, zoo
from ..graph.compile import CompiledModel
from ..graph.lower import lower
from ..graph.memory import MEM_ALIGN, liveness, plan_memory
from ..graph.offsets import Block, meets, optimal, peak, place_in_order
from ..graph.passes import Draft, PassRecord, gm_bytes, optimize
from ..runtime import Device
from ..runtime.model import Model
from ..sim.memory import fmt_bytes

SEED = 0
CHIP = "910"
#: the ResNet-50 of the pictures: every stage one bottleneck, narrow, on 32 x 32 images (30
#: nodes after the passes: a plan one can read)
SMALL = dict(image=32, widths=(8, 16, 32, 64), blocks=(1, 1, 1, 1), num_classes=10, dtype="float16")
#: exercise 4's model: the same shape on 224 x 224 images, a quarter of ResNet-50's widths
BATCH_MODEL = dict(image=224, widths=(16, 32, 64, 128), blocks=(1, 1, 1, 1), num_classes=100, dtype="float16")
#: exercise 4: the bytes another process leaves free on the 910
FREE_BYTES = 48 << 20
#: the transformers of the measure: two layers, 64 tokens, a small vocabulary
TRANSFORMER = dict(layers=2, seq=64, vocab=1000, dtype="float16")


def show(obj) -> None:
    import inspect
    import textwrap
    print(textwrap.dedent(inspect.getsource(obj)))


def first_lines(err: Exception, n: int = 3) -> str:
    """The first ``n`` lines of an error's message, with its type."""
    return f"{type(err).__name__}: " + "\n".join(str(err).splitlines()[:n])


# -- the passes ------------------------------------------------------------------------------------
def small_resnet(batch: int = 1) -> Graph:
    return zoo.build("resnet50", batch=batch, **SMALL)


def print_passes(before: Graph, after: Graph, chip=CHIP) -> None:
    """Node counts by op type and GM bytes, before and after the passes."""
    print(f"nodes: {len(before.nodes)} before, {len(after.nodes)} after")
    for label, g in (("before", before), ("after", after)):
        print(f"  {label:6}: " + ", ".join(f"{k} {v}" for k, v in g.op_counts().items()))
    b0, b1 = gm_bytes(before, chip), gm_bytes(after, chip)
    print(f"GM traffic of the lowered tasks: {b0:,} B before, {b1:,} B after ({b1 / b0:.0%})")


def switch_files(off: str = "ConvReluFusionPass") -> dict:
    """The two forms of a fusion switch file turning ``off`` off, written to a temporary
    directory: {"lines": path, "json": path}."""
    d = tempfile.mkdtemp(prefix="npulab-lab09-")
    texts = {"lines": f"# one rule a line\n{off}:off\n",
             "json": '{"Switch": {"GraphFusion": {},\n            "UBFusion": {"%s": "off"}}}\n' % off}
    paths = {}
    for form, text in texts.items():
        paths[form] = os.path.join(d, "fusion_switch.cfg" if form == "lines" else "fusion_switch.json")
        with open(paths[form], "w", encoding="utf-8") as f:
            f.write(text)
    return paths


# -- exercise 1: liveness --------------------------------------------------------------------------
def liveness_graph() -> Graph:
    """Seven nodes over float32 vectors, ``a`` and ``b`` read again later, two outputs (``y``, ``d``)."""
    g = Graph("seven")
    x = g.input("x", (1, 256), "float32")
    w = g.constant("w", np.linspace(0.5, 1.5, 256, dtype=np.float32).reshape(1, 256))
    a = g.node("Relu", [x], name="a")
    b = g.node("Mul", [a, w], name="b")
    c = g.node("Tanh", [b], name="c")
    d = g.node("Add", [c, a], name="d")
    e = g.node("Sigmoid", [d], name="e")
    f = g.node("Concat", [e, b], name="f", axis=1)
    g.output(g.node("Relu", [f], name="y"), d)
    return g.infer()


def intervals(g: Graph) -> dict:
    """{value: (start, end)} of every value a node writes: the half-open steps it lives."""
    live = liveness(g, inplace=False, alignment=1)
    return {b.name: (b.start, b.end) for b in live.buffers if b.kind == "tensor"}


# -- exercise 2 and the challenge: offset planners ----------------------------------------------------
def blocks_of(g: Graph) -> list:
    """The blocks a planner places for ``g``: one per written value (in-place reuse off), sizes
    aligned to 512 bytes."""
    return [Block(b.name, b.start, b.end, b.size) for b in liveness(g, inplace=False).buffers if b.size]


def random_blocks(seed: int, n: int = 8) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        s = int(rng.integers(0, 8))
        out.append(Block(f"t{i}", s, s + int(rng.integers(1, 5)), MEM_ALIGN * int(rng.integers(1, 5))))
    return sorted(out, key=lambda b: (b.start, b.name))


def planner_cases() -> dict:
    """Exercise 2's problems: {name: blocks}, exercise 1's graph and three seeded sets."""
    return {"graph 'seven'": blocks_of(liveness_graph()),
            **{f"random set {s}": random_blocks(s) for s in (1, 2, 3)}}


#: the challenge: six tensors (start, end, size in 512-byte units), found by a seeded search of
#: random lifetimes for a set on which every single order fails: best fit, greedy-by-size, first
#: fit and the lowest-gap placement by start, size, lifetime, end or area all need 13 units, the
#: optimum 9 (it puts t1 above where t0 and t2 will be, so t3 and t4 fit beside it)
_ADVERSARIAL = [(0, 2, 4), (1, 4, 5), (3, 7, 4), (4, 5, 3), (6, 11, 4), (7, 9, 5)]


def adversarial_blocks() -> list:
    return [Block(f"t{i}", s, e, MEM_ALIGN * u) for i, (s, e, u) in enumerate(_ADVERSARIAL)]


def plan_problem(blocks, offsets) -> str | None:
    """What is wrong with ``offsets`` ({name: offset}) as a plan of ``blocks``, or None."""
    if not isinstance(offsets, dict):
        return f"the planner returned a {type(offsets).__name__}, not a dict {{name: offset}}"
    missing = [b.name for b in blocks if b.name not in offsets]
    if missing:
        return f"no offset for {', '.join(missing[:4])}"
    for b in blocks:
        o = offsets[b.name]
        if isinstance(o, bool) or not isinstance(o, (int, np.integer)) or o < 0:
            return f"{b.name}: offset {o!r} is not a whole number of bytes >= 0"
        if o % MEM_ALIGN:
            return f"{b.name}: offset {o} is off the {MEM_ALIGN}-byte alignment"
    for i, a in enumerate(blocks):
        for b in blocks[i + 1:]:
            oa, ob = offsets[a.name], offsets[b.name]
            if meets(a, b) and oa < ob + b.size and ob < oa + a.size:
                return (f"{a.name} (steps {a.start}-{a.end}, bytes {oa}-{oa + a.size}) and {b.name} (steps "
                        f"{b.start}-{b.end}, bytes {ob}-{ob + b.size}) are live at once on common bytes")
    return None


def planned_peak(blocks, offsets) -> int:
    return peak(blocks, {k: int(v) for k, v in offsets.items()})


def optimum(blocks) -> int:
    """The least peak of any plan (the exact planner)."""
    return peak(blocks, optimal(blocks, limit=len(blocks)))


def first_fit_reference(blocks) -> dict:
    """Exercise 2's reference: in the order they start, each block at the lowest offset where it
    meets no placed block that is live at a common step."""
    offsets = {}
    for b in sorted(blocks, key=lambda b: (b.start, b.name)):
        off, moved = 0, True
        while moved:
            moved = False
            for o in blocks:
                if o.name in offsets and meets(b, o) and off < offsets[o.name] + o.size and offsets[o.name] < off + b.size:
                    off, moved = offsets[o.name] + o.size, True
        offsets[b.name] = off
    return offsets


def multi_order_planner(blocks, tries: int = 300, seed: int = SEED) -> dict:
    """The challenge's reference: the lowest-gap placement over many orders (by start, by size,
    by lifetime, by area, and ``tries`` seeded shuffles), keeping the best plan."""
    rng = np.random.default_rng(seed)
    keys = [lambda b: (b.start, -b.size), lambda b: -b.size, lambda b: -(b.end - b.start),
            lambda b: -b.size * (b.end - b.start), lambda b: b.end]
    orders = [sorted(blocks, key=k) for k in keys]
    orders += [[blocks[i] for i in rng.permutation(len(blocks))] for _ in range(tries)]
    plans = [place_in_order(o, False) for o in orders]
    return min(plans, key=lambda p: peak(blocks, p))


# -- exercise 3: a fusion rule ------------------------------------------------------------------------
def scale_graph(seed: int = SEED) -> Graph:
    """Three convs, each followed by a Mul: by a per-channel constant (foldable), by a
    per-channel constant while the conv's output has a second reader (not foldable), by a
    constant of the whole output's shape (not per channel)."""
    rng = np.random.default_rng(seed)
    g = Graph("scaled_convs")
    x = g.input("x", (1, 8, 8, 8), "float32", "NCHW")

    def conv(name, inp, cout):
        w = g.constant(f"{name}.weight", (rng.standard_normal((cout, 8, 3, 3)) * 0.2).astype(np.float32))
        b = g.constant(f"{name}.bias", rng.standard_normal(cout).astype(np.float32))
        return g.node("Conv2D", [inp, w, b], name=name, stride=1, padding=1, dilation=1, groups=1)

    def const(name, shape):
        return g.constant(name, rng.uniform(0.5, 2.0, shape).astype(np.float32))

    y1 = g.node("Relu", [g.node("Mul", [conv("conv1", x, 8), const("scale1", (1, 8, 1, 1))], name="mul1")],
                name="relu1")
    c2 = conv("conv2", y1, 8)
    y2 = g.node("Add", [g.node("Mul", [c2, const("scale2", (1, 8, 1, 1))], name="mul2"), c2], name="add2")
    y3 = g.node("Mul", [conv("conv3", y2, 8), const("scale3", (1, 8, 8, 8))], name="mul3")
    g.output(y3)
    return g.infer()


def apply_rule(fn, graph: Graph, chip=None):
    """Run a rule ``fn(draft, record, chip)`` on ``graph`` as the pipeline runs a registered one:
    on a Draft, then build. Returns (the new graph, the record)."""
    rec = PassRecord(getattr(fn, "__name__", "rule"), "GraphFusion", nodes_before=len(graph.nodes))
    d = Draft(graph)
    fn(d, rec, chip)
    out = d.build(chip)
    rec.nodes_after = len(out.nodes)
    return out, rec


def fold_channel_scale_reference(d, rec, chip) -> None:
    """Conv2D (with a bias) then Mul by a (1, Cout, 1, 1) constant -> one Conv2D whose weights
    and bias are scaled per output channel."""
    for mul in [n for n in d.nodes if n.op_type == "Mul"]:
        conv, s = d.producer(mul.inputs[0]), d.const(mul.inputs[1])
        if conv is None or conv.op_type != "Conv2D" or s is None or not d.only_use(conv.outputs[0], mul):
            continue
        w, b = d.const(conv.inputs[1]), d.const(conv.inputs[2])
        if s.shape != (1, w.shape[0], 1, 1):
            continue
        wn = d.add_constant(f"{conv.name}.weight_scaled", w * s.reshape(-1, 1, 1, 1))
        bn = d.add_constant(f"{conv.name}.bias_scaled", b * s.reshape(-1))
        d.replace([conv, mul], [d.new_node("Conv2D", [conv.inputs[0], wn, bn], mul.outputs, conv.name, **conv.attrs)])
        rec.did(f"{conv.name} + {mul.name} -> {conv.name} (scale folded)")


def scale_inputs(seed: int = SEED) -> dict:
    return {"x": np.random.default_rng(seed + 1).standard_normal((1, 8, 8, 8)).astype(np.float32)}


# -- exercise 4: the largest batch that fits ----------------------------------------------------------
def batch_graph(batch: int) -> Graph:
    """Exercise 4's model at ``batch``, after the passes for the 910."""
    return optimize(zoo.build("resnet50", batch=batch, **BATCH_MODEL), None, CHIP)[0]


def plan_at(batch: int):
    """The static memory plan (mode 2, best fit) of exercise 4's model at ``batch``."""
    return plan_memory(batch_graph(batch), mode=2)


def loadable(batch: int) -> CompiledModel:
    """Exercise 4's model at ``batch`` as a loader sees it: the graph after the passes, its tasks
    and its static plan. compile_graph would also search every conv's tiling (far longer than the
    load at these shapes); loading reads only the weights and the plan, so this skips the search."""
    g = batch_graph(batch)
    return CompiledModel(g, Device(CHIP).chip, lower(g, CHIP), {}, plan_memory(g, mode=2))


def crowded_device(free_bytes: int = FREE_BYTES) -> Device:
    """A 910 on which another process holds all but ``free_bytes`` (in 2 MB huge pages)."""
    dev = Device(CHIP, 0)
    total = dev.get_mem_info()[1]
    dev.malloc(total - free_bytes - 64, "HUGE_ONLY")
    return dev


def try_load(batch: int, free_bytes: int = FREE_BYTES) -> tuple[bool, str]:
    """Load exercise 4's model at ``batch`` on a crowded device: (loaded, what happened)."""
    dev = crowded_device(free_bytes)
    try:
        m = Model(loadable(batch), dev)
    except DeviceMemoryError as exc:
        return False, str(exc)
    need = m.memory()
    return True, f"loaded: {need['weights_bytes']:,} B of weights and a {need['arena_bytes']:,} B arena"


# -- measure ----------------------------------------------------------------------------------------
def measure_rows(chip=CHIP) -> list[dict]:
    """Per model: nodes and GM bytes before and after the passes, and the memory the optimised
    graph's intermediates take: their sum, best fit's and greedy-by-size's peaks, the lower bound."""
    models = [("ResNet-50 (small)", zoo.build("resnet50", **SMALL)),
              ("BERT (2 layers)", zoo.build("bert-base", **TRANSFORMER)),
              ("GPT-2 (2 layers)", zoo.build("gpt2", **TRANSFORMER))]
    rows = []
    for name, g in models:
        g2, _ = optimize(g, None, chip)
        bf, gs = (plan_memory(g2, mode=2, planner=p) for p in ("best_fit", "greedy_by_size"))
        rows.append({"model": name, "nodes": (len(g.nodes), len(g2.nodes)),
                     "gm_bytes": (gm_bytes(g, chip), gm_bytes(g2, chip)), "sum": bf.total_bytes,
                     "best_fit": bf.peak, "greedy_by_size": gs.peak, "lower_bound": bf.lower_bound})
    return rows


def print_measure(rows) -> None:
    print(f"{'':18} {'nodes':>9} {'GM bytes after':>15} {'sum':>10} {'best fit':>10} {'greedy':>10} {'bound':>10}")
    for r in rows:
        (n0, n1), (b0, b1) = r["nodes"], r["gm_bytes"]
        print(f"{r['model']:18} {n0:>4}->{n1:<4} {b1 / b0:>14.1%} {fmt_bytes(r['sum']):>10} "
              f"{fmt_bytes(r['best_fit']):>10} {fmt_bytes(r['greedy_by_size']):>10} {fmt_bytes(r['lower_bound']):>10}")
