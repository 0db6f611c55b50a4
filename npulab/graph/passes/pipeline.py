"""The optimisation pipeline: every rule in GE's order, each one skipped when the switch file
turns it off, and the report of what each changed.

GE's order, as npulab models it (ATC's compile of a graph):

1. graph preparation: ConstantFoldingPass;
2. graph fusion, on the whole graph: ConvBatchnormFusionPass, MatMulBiasAddFusionPass,
   FlashAttentionFusionPass, AvgPoolScaleFusionPass, SwishFusionPass;
3. format settling: TransDataInsertPass, then TransOpSymmetryEliminationPass;
4. UB fusion, on the kernels that will run: ConvReluFusionPass, ATbeMatMulElemwiseFusionPass
   (after BN folding, so a conv's BN is gone and its ReLU follows it directly);
5. clean-up: ConstantFoldingPass again (it folds the TransData of every weight: ATC stores
   weights in the kernel's format), then PrunePass.

Each step is a function Graph -> Graph: the input graph is never changed.

    g2, report = optimize(resnet50(image=32))
    print(report.summary())
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import GraphError
from ..ir import Graph
from ..lower import lower
from ..types import TensorType
from . import conv, fold, layout, matmul, vector  # noqa: F401 (each registers its rules)
from .draft import Draft, PassRecord
from .rules import RULES
from .switches import FusionSwitches

ORDER = ("ConstantFoldingPass",
         "ConvBatchnormFusionPass", "MatMulBiasAddFusionPass", "FlashAttentionFusionPass",
         "AvgPoolScaleFusionPass", "SwishFusionPass",
         "TransDataInsertPass", "TransOpSymmetryEliminationPass",
         "ConvReluFusionPass", "ATbeMatMulElemwiseFusionPass", "TbeEltwiseFusionPass",
         "ConstantFoldingPass", "PrunePass")
assert set(ORDER) == set(RULES), sorted(set(RULES) ^ set(ORDER))


@dataclass
class PassReport:
    """The records of one pipeline run, in the order the rules ran."""
    records: list = field(default_factory=list)

    def __getitem__(self, rule: str) -> PassRecord:
        """The record of ``rule`` (its runs merged, for a rule that runs twice)."""
        runs = [r for r in self.records if r.rule == rule]
        if not runs:
            raise GraphError(f"rule {rule!r} is not in this report; it holds {', '.join(r.rule for r in self.records)}")
        if len(runs) == 1:
            return runs[0]
        out = PassRecord(rule, runs[0].kind, any(r.enabled for r in runs), sum(r.matched for r in runs),
                         sum(r.effected for r in runs), [c for r in runs for c in r.changes],
                         runs[0].nodes_before, runs[-1].nodes_after)
        return out

    def effected(self) -> dict:
        """{rule: how many rewrites it made} for the rules that made any."""
        out: dict = {}
        for r in self.records:
            if r.effected:
                out[r.rule] = out.get(r.rule, 0) + r.effected
        return out

    def summary(self) -> str:
        """One line a rule run: name, kind, matched / effected, node count before -> after."""
        lines = [f"{'rule':32s} {'kind':11s} {'matched':>7s} {'effected':>8s}  nodes"]
        for r in self.records:
            state = f"{r.matched:7d} {r.effected:8d}  {r.nodes_before} -> {r.nodes_after}" if r.enabled else \
                f"{'off':>7s} {'':8s}"
            lines.append(f"{r.rule:32s} {r.kind:11s} {state}")
        return "\n".join(lines)


def run_rule(graph: Graph, rule: str, chip=None) -> tuple[Graph, PassRecord]:
    """One rule on ``graph``: (a new graph, its record; the new graph is a copy when the rule
    changed nothing). The graph given is left as it is."""
    r = RULES[rule]
    rec = PassRecord(rule, r.kind, nodes_before=len(graph.nodes))
    d = Draft(graph)
    r.run(d, rec, chip)
    out = d.build(chip)
    rec.nodes_after = len(out.nodes)
    return out, rec


def optimize(graph: Graph, switches: FusionSwitches | str | None = None, chip=None) -> tuple[Graph, PassReport]:
    """Every rule of :data:`ORDER` that ``switches`` leaves on (a :class:`FusionSwitches`, or
    the path of a switch file; None: all on), in order; returns (the optimised graph, its
    report). ``graph`` must be inferred; it is not changed."""
    if isinstance(switches, (str, bytes)) or hasattr(switches, "__fspath__"):
        switches = FusionSwitches.load(switches)
    switches = switches or FusionSwitches()
    report = PassReport()
    for name in ORDER:
        if not switches.enabled(name):
            report.records.append(PassRecord(name, RULES[name].kind, enabled=False,
                                             nodes_before=len(graph.nodes), nodes_after=len(graph.nodes)))
            continue
        graph, rec = run_rule(graph, name, chip)
        report.records.append(rec)
    return graph, report


def gm_bytes(graph: Graph, chip) -> int:
    """Bytes the lowered graph moves through GM: for each task on an engine (AiCore, AiCpu),
    its operands' bytes (in the kernel's shape and dtype) plus its outputs' bytes. Relabels
    (engine None) move nothing. The first-order figure fusion lowers: every value a fused
    node keeps in UB or L0C is one write and one read of GM fewer."""
    tasks = lower(graph, chip)
    seen = {o.value: _nbytes(o.shape, o.dtype) for t in tasks for o in t.operands if o is not None}
    total = 0
    for t in tasks:
        if t.engine == "None":
            continue
        total += sum(_nbytes(o.shape, o.dtype) for o in t.operands if o is not None)
        total += sum(graph.types[v].nbytes if v in graph.types else seen.get(v, 0) for v in t.outputs)
    return total


def _nbytes(shape, dtype) -> int:
    return TensorType(tuple(shape), dtype).nbytes


__all__ = ["ORDER", "PassReport", "optimize", "run_rule", "gm_bytes"]
