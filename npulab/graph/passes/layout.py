"""Layout rules: TransData where a kernel wants another storage format, and TransData pairs
that undo each other removed.

The cube kernels keep their GM operands in fractal formats (:mod:`npulab.formats`): a conv
reads its feature map as NC1HWC0 and its weight as FRACTAL_Z, the pooling kernels read and
write NC1HWC0. A graph arrives in the framework's formats (ND, NCHW), so GE inserts a TransData
in front of each such input when it settles formats, and lets a *format-agnostic* op (an
element-wise op, whose meaning does not depend on where each element sits, and inference
BatchNorm, per channel) run in whatever format its inputs have, so a run of convs, ReLUs, adds
and pools stays NC1HWC0 with one TransData at each end.

Where npulab's kernels stand: the conv kernel reads NC1HWC0 and FRACTAL_Z from GM, made on the
host before the launch (:mod:`npulab.kernels.conv.layouts`, "CANN's TransData, outside the
kernel"), and writes NHWC, which the host turns back to NCHW; those host conversions are outside
every cost. This pass makes the conversions graph nodes, as GE does, and labels a conv's output
NC1HWC0 as CANN's Conv2D writes it, so a chain of convs, element-wise ops and pools needs none
between them. No TransData to FRACTAL_NZ is placed: npulab's matmul kernels read ND from GM and
pack it into NZ on the way to L1 (``data_copy_nd2nz``), as ops-nn's MatMulV2 does with ND
inputs, so NZ never sits in GM between kernels.

A value's array stays in its logical order (NCHW, (K, N)) whatever its format label, in the
reference executor and in the model file: the format says where the bytes sit on the chip, and
so what each TransData costs when the graph is lowered (a data move of its bytes in and out).

**TransDataInsertPass** (npulab name for that part of GE's format settling). In graph order:

* a conv's input 0 and a pool's input not in NC1HWC0, and a conv's constant weight not in
  FRACTAL_Z, get a TransData (one per value and format, shared by every reader, as GE's
  TransOpBreadthFusionPass merges them); a TransData of a constant is folded by
  ConstantFoldingPass, so the weight is stored in FRACTAL_Z and costs nothing at run time;
* a format-agnostic op takes its inputs as they are when they agree (its output then has
  their format);
* any other op (a reduction, a reshape, a matmul's activation, whose kernel packs ND into NZ on
  its way to L1 itself) gets each input back in the format the graph declared for it;
* a graph output keeps its declared format: a node that would write it in another one writes
  ``<output>/<format>`` and a TransData after it writes the output.

**TransOpSymmetryEliminationPass** (GE's graph pass of that name, ``compiler/graph/passes/
transop_symmetry_elimination_pass``: a TransData A -> B followed by B -> A is removed). Also a
TransData to the format its input already has. The insertion above places TransData only at
region edges, so on a fresh graph this finds nothing; it cleans pairs an importer or a
hand-built graph has, and what a later rewrite leaves.
"""
from __future__ import annotations

from .draft import Draft, PassRecord
from .rules import rule

FEATURE = "NC1HWC0"
#: op type -> {input index: the format its kernel wants}
WANTS = {"Conv2D": {0: FEATURE, 1: "FRACTAL_Z"}, "MaxPool": {0: FEATURE}, "AvgPool": {0: FEATURE},
         "AvgPoolScale": {0: FEATURE}}
#: ops whose meaning does not depend on the storage format (same-shape element-wise), and
#: BatchNorm (per channel: CANN's BNInference runs on NC1HWC0)
AGNOSTIC = ("Relu", "Swish", "SiLU", "Gelu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp", "Log", "Sqrt", "Rsqrt",
            "Reciprocal", "Erf", "Add", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "BatchNorm")


def _agnostic(d: Draft, node, fmt) -> bool:
    """Whether ``node`` may run in its inputs' format: an AGNOSTIC op whose activations all have
    its output's shape and one format, its constants scalars (per-channel ones for BatchNorm)."""
    if node.op_type not in AGNOSTIC:
        return False
    out = d.type_of(node.outputs[0]).shape
    acts = [v for v in node.inputs if v and v not in d.constants]
    if not acts or any(d.type_of(v).shape != out for v in acts) or len({fmt[v] for v in acts}) != 1:
        return False
    return node.op_type == "BatchNorm" or all(d.const(v).size == 1 for v in node.inputs if v in d.constants)


@rule("TransDataInsertPass", "GE", "TransData to NC1HWC0 / FRACTAL_Z where a kernel wants it, and back at region edges")
def insert_transdata(d: Draft, rec: PassRecord, chip) -> None:
    fmt = {v: t.format for v, t in d.src.types.items() if v in d.src.inputs or v in d.constants}
    made: dict = {}                                  # (value, format) -> the TransData's output

    def convert(v: str, to: str, before) -> str:
        if fmt[v] == to:
            return v
        if (v, to) not in made:
            name = d.fresh(f"{v}/to_{to}")
            td = d.new_node("TransData", [v], [name], name, dst_format=to)
            d.nodes.insert(d.nodes.index(before), td)
            fmt[name] = to
            made[v, to] = name
            rec.did(f"TransData {v}: {fmt[v]} -> {to} (for {before.name})")
        return made[v, to]

    for node in list(d.nodes):
        want = WANTS.get(node.op_type, {})
        if want and len(d.type_of(node.inputs[0]).shape) == 4:
            for i, to in want.items():
                v = node.inputs[i]
                if v and (to == FEATURE or v in d.constants):
                    node.inputs[i] = convert(v, to, node)
            out_fmt = fmt[node.inputs[0]]
        elif _agnostic(d, node, fmt):
            out_fmt = fmt[next(v for v in node.inputs if v and v not in d.constants)]
        else:
            node.inputs = [convert(v, d.type_of(v).format, node) if v else v for v in node.inputs]
            out_fmt = None
        for j, v in enumerate(node.outputs):
            fmt[v] = out_fmt or d.type_of(v).format
            if v in d.src.outputs and fmt[v] != d.type_of(v).format:
                _keep_output_format(d, node, j, fmt, rec)


def _keep_output_format(d: Draft, node, j: int, fmt: dict, rec: PassRecord) -> None:
    """Let ``node`` write its j-th output (a graph output) as ``<name>/<format>`` and a
    TransData after it give the output its declared format."""
    v = node.outputs[j]
    inner = d.fresh(f"{v}/{fmt[v]}")
    node.outputs[j] = inner
    fmt[inner], fmt[v] = fmt[v], d.type_of(v).format
    td = d.new_node("TransData", [inner], [v], d.fresh(f"{v}/to_{fmt[v]}"), dst_format=fmt[v])
    d.nodes.insert(d.nodes.index(node) + 1, td)
    rec.did(f"TransData {inner}: {fmt[inner]} -> {fmt[v]} (graph output {v})")


@rule("TransOpSymmetryEliminationPass", "GE", "TransData A -> B -> A pairs (and A -> A) removed")
def eliminate_transdata(d: Draft, rec: PassRecord, chip) -> None:
    for td in [n for n in d.nodes if n.op_type == "TransData"]:
        src = td.inputs[0]
        if td.outputs[0] in d.src.outputs:
            continue
        first = d.producer(src)
        if d.type_of(src).format == td.attrs.get("dst_format"):
            d.remove(td, src)
            rec.did(f"{td.name}: TransData to the format {src} already has")
        elif first is not None and first.op_type == "TransData" and \
                d.type_of(first.inputs[0]).format == td.attrs.get("dst_format"):
            d.remove(td, first.inputs[0])
            rec.did(f"{first.name} + {td.name}: {d.type_of(first.inputs[0]).format} -> "
                    f"{d.type_of(src).format} -> back, removed")
            if not d.consumers(src) and src not in d.src.outputs:
                d.nodes.remove(first)
