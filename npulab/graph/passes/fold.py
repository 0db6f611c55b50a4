"""GE's clean-up passes: constant folding and pruning.

**ConstantFoldingPass** (GE's graph pass of that name, ``compiler/graph/passes/
constant_folding_pass``): a node whose inputs are all constants (or that has none: Range,
Fill) is computed at compile time with the reference executor
(:func:`npulab.graph.reference.run_node`) and becomes a constant of the same name, format and
type. This is how a TransData of a weight (to FRACTAL_Z for a conv, FRACTAL_NZ for a matmul)
costs nothing at run time: ATC stores the weight already in the kernel's format.

**PrunePass** (GE's ``prune_pass``): nodes whose outputs reach no graph output are removed (the
graph is walked back from its outputs), and constants no node reads are dropped when the graph
is rebuilt.
"""
from __future__ import annotations

from .. import reference
from .draft import Draft, PassRecord
from .rules import rule

#: the largest constant folding may write, in elements: a Fill or Expand of a huge shape is
#: cheaper to compute on the chip than to store in the model file
MAX_FOLDED_ELEMENTS = 1 << 24


@rule("ConstantFoldingPass", "GE", "a node whose inputs are all constants -> a constant")
def fold_constants(d: Draft, rec: PassRecord, chip) -> None:
    for node in list(d.nodes):
        ins = [v for v in node.inputs if v]
        if not all(v in d.constants for v in ins):
            continue
        types = [d.type_of(v) for v in node.outputs]
        if any(t is None for t in types) or sum(t.size for t in types) > MAX_FOLDED_ELEMENTS:
            continue
        arrays = [d.constants[v][0] if v else None for v in node.inputs]
        while arrays and arrays[-1] is None:
            arrays.pop()
        values = reference.run_node(node, arrays, types)
        for v, a, t in zip(node.outputs, values, types):
            d.constants[v] = (a, t.format)
        d.nodes.remove(node)
        rec.did(f"{node.name} ({node.op_type}) -> constant {', '.join(node.outputs)}")


@rule("PrunePass", "GE", "nodes whose outputs reach no graph output are removed")
def prune(d: Draft, rec: PassRecord, chip) -> None:
    live = set(d.src.outputs)
    for node in reversed(d.nodes):
        if any(v in live for v in node.outputs):
            live.update(v for v in node.inputs if v)
    for node in [n for n in d.nodes if not any(v in live for v in n.outputs)]:
        d.nodes.remove(node)
        rec.did(f"{node.name} ({node.op_type}): no graph output reads it")
