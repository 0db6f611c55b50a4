"""Lowering: each graph node becomes a task for one engine of the chip, as GE's engine placement
does when it compiles a graph (every op goes to the AI Core engine, the AI CPU engine, or is
optimised away).

* **AiCore**: a registered kernel (:mod:`npulab.ops.registry`) with its operands in the
  kernel's own form: the graph's NCHW Conv2D becomes the registry's depth-1 3-D problem, a
  MatMul of any batch a BatchMatMul over (batch, M, K) (its weight shared, not copied), a
  MatMul ending in GELU the 910B's FusedMatMul mix kernel where the chip has one;
  data moves that have no kernel here (Transpose, Concat, Slice, Split, Expand, Pad, TransData)
  are AI Core tasks costed as what they are on the chip, a DMA of their bytes in and out at
  the rate the DRAM sustains, plus a launch (``estimated``); the framework-level math
  (``VECTOR_MATH``: Sub, RealDiv, Maximum, Minimum, the unary math, ReduceSum/Mean/Max, Pow with
  a scalar constant exponent as Pows, Cast between float16 and float32) runs on its vector
  kernel when its operands are float16 or float32;
* **AiCpu**: ops no AI Core kernel here runs (GatherV2, Cumsum, comparisons, Select, Range,
  Fill, logical ops), and the vector math on operands its kernels do not take (integers,
  bfloat16, a Pow with a tensor exponent): as on the chip they run on the AI CPU, its ARM
  cores, at the cost of the chip file's ``[aicpu]`` figures (a task start-up and a byte rate);
* **None**: relabels (Identity, Reshape, Flatten, Squeeze, Unsqueeze): the output is the input's
  bytes with another shape; no task runs.

A :class:`Task` is JSON data (the offline model stores it): the values it reads and writes, the
kernel, its attributes, and each operand's kernel form (shape and dtype) the runtime reshapes or
casts a graph value to before the launch.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..arch import ACC_DTYPE
from ..chips import ChipSpec, get_chip
from ..errors import GraphError
from ..kernels import search
from ..ops import registry
from .schema import depth_one_args
from .ir import Graph
from .types import Node

#: relabels: the output is the input's bytes under another shape
RELABELS = ("Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze")
#: data moves without a kernel here: an AI Core DMA of their bytes (TransposeD, ConcatD, ...)
DATA_MOVES = ("Transpose", "Concat", "Slice", "Split", "Expand", "Pad", "TransData", "Cast")
#: ops the AI CPU runs: no AI Core kernel here takes them
AICPU_OPS = ("GatherV2", "Cumsum", "Select", "Range", "Fill", "Equal", "NotEqual", "Less", "LessEqual",
             "Greater", "GreaterEqual", "LogicalAnd", "LogicalOr", "LogicalNot")
#: framework-level math with a vector kernel of the same op type (Pow: Pows), for float16 and
#: float32 operands; on other dtypes the AI CPU runs them
VECTOR_MATH = ("Sub", "RealDiv", "Maximum", "Minimum", "Neg", "Exp", "Log", "Sqrt", "Rsqrt", "Reciprocal",
               "Abs", "Tanh", "Sigmoid", "Erf", "ReduceSum", "ReduceMean", "ReduceMax", "Pow")
#: the dtypes the vector kernels take
VECTOR_FLOATS = ("float16", "float32")


@dataclass
class Operand:
    """A graph value as the kernel takes it: its name, the kernel's shape and dtype for it."""
    value: str
    shape: list
    dtype: str


@dataclass
class Task:
    """One node of the compiled model on its engine."""
    name: str                 # the graph node's name
    op_type: str              # the graph op type
    engine: str               # "AiCore", "AiCpu" or "None"
    kernel: str | None        # the registry op type an AiCore task launches (None: a data move)
    operands: list            # [Operand] in the kernel's order (None for an optional one left out)
    outputs: list             # the graph values it writes
    attrs: dict = field(default_factory=dict)   # the kernel's attributes (JSON values)
    bytes_moved: int = 0      # for a data move or an AI CPU task: bytes read and written

    def specs(self) -> list:
        """The kernel's input specs (shape, dtype), in its operand order (optional ones left out
        skipped): what the dispatcher picks a tiling for."""
        return [registry.TensorSpec(tuple(o.shape), np.dtype(o.dtype)) for o in self.operands if o is not None]

    def kernel_attrs(self) -> dict:
        """The attributes as the kernel takes them (lists as tuples: the tiling cache hashes them)."""
        def tup(v):
            return tuple(tup(x) for x in v) if isinstance(v, list) else v
        return {k: tup(v) for k, v in self.attrs.items()}

    def launch_attrs(self) -> dict:
        """The attributes as the launch takes them: the tiles the compile step recorded
        (``tiles``: a tiling family and its tiles) become the kernel's ``tiling`` argument."""
        attrs = self.kernel_attrs()
        rec = attrs.pop("tiles", None)
        if rec is not None:
            attrs["tiling"] = search.family_named(rec["family"]).tiles(**self.attrs["tiles"]["tiles"])
        return attrs

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Task":
        d = dict(d)
        d["operands"] = [None if o is None else Operand(**o) for o in d["operands"]]
        return cls(**d)


def _operand(g: Graph, value: str, shape=None, dtype=None) -> Operand:
    t = g.type_of(value)
    return Operand(value, list(t.shape if shape is None else shape), dtype or t.dtype)


def _acc(dtype: str) -> str:
    """The cube accumulator's dtype, in which a conv's or matmul's bias is added (arch.ACC_DTYPE)."""
    return np.dtype(ACC_DTYPE[np.dtype(dtype)]).name


def _io_bytes(g: Graph, node: Node) -> int:
    """Bytes a data move or an AI CPU task reads and writes: its inputs and outputs, except that
    a gather reads only the rows it picks (its output's bytes) and its indices, not the table."""
    if node.op_type == "GatherV2":
        out = sum(g.type_of(v).nbytes for v in node.outputs)
        return 2 * out + g.type_of(node.inputs[1]).nbytes
    return sum(g.type_of(v).nbytes for v in node.inputs if v) + sum(g.type_of(v).nbytes for v in node.outputs)


def _conv2d(g: Graph, node: Node, chip: ChipSpec) -> Task:
    """torch's conv2d as the registry's depth-1 3-D problem (what ops.conv2d launches)."""
    a = node.attrs
    x, w = g.type_of(node.inputs[0]), g.type_of(node.inputs[1])
    stride, pads, dilation, groups = depth_one_args(w.shape, a.get("stride", 1), a.get("padding", 0),
                                                    a.get("dilation", 1), a.get("groups", 1), node.where())
    ops = [_operand(g, node.inputs[0], x.shape[:2] + (1,) + x.shape[2:]),
           _operand(g, node.inputs[1], w.shape[:2] + (1,) + w.shape[2:])]
    vectors = ()
    if len(node.inputs) > 2 and node.inputs[2]:
        ops.append(_operand(g, node.inputs[2], (w.shape[0],), _acc(x.dtype)))
        vectors = ("bias",)
    attrs = {"stride": list(stride), "pads": [list(p) for p in pads], "dilation": list(dilation), "groups": groups, "vectors": list(vectors), "relu": bool(a.get("relu", False)),
             "what": "conv2d", "nd": 2}
    return Task(node.name, node.op_type, "AiCore", "Conv2D", ops, list(node.outputs), attrs)


def _matmul(g: Graph, node: Node, chip: ChipSpec) -> list:
    """MatMul as BatchMatMul over (batch, M, K) x (batch, K, N): a weight of rank 2 (or batch 1)
    shared by every row of a batched input is one (1, K, N) operand and the input's batch folds
    into M, as ops-nn's MatMulV2 takes a 3-D x with a 2-D weight. A GELU ending runs as the
    910B's FusedMatMul (an AIC with its two AIVs) or, elsewhere, a second task after the matmul."""
    a = node.attrs
    ta, tb = bool(a.get("transpose_a", False)), bool(a.get("transpose_b", False))
    at, bt = g.type_of(node.inputs[0]), g.type_of(node.inputs[1])
    out = g.type_of(node.outputs[0])
    m, n = out.shape[-2:]
    k = at.shape[-1] if not ta else at.shape[-2]
    batch = int(np.prod(out.shape[:-2], dtype=np.int64))
    b_batch = int(np.prod(bt.shape[:-2], dtype=np.int64))
    a_batch = int(np.prod(at.shape[:-2], dtype=np.int64))
    act = a.get("activation")
    bias = [_operand(g, node.inputs[2], (n,), _acc(at.dtype))] \
        if len(node.inputs) > 2 and node.inputs[2] else []
    if b_batch == 1 and not ta:                       # a shared weight: fold the batch into M
        a_op = _operand(g, node.inputs[0], (1, a_batch * m, k))
        b_op = _operand(g, node.inputs[1], (1,) + bt.shape[-2:])
        if act in ("gelu_erf", "gelu_tanh") and chip.arch == "split" and at.dtype == "float16" and not tb:
            return [Task(node.name, node.op_type, "AiCore", "FusedMatMul",
                         [_operand(g, node.inputs[0], (a_batch * m, k)), _operand(g, node.inputs[1], bt.shape[-2:])]
                         + bias, list(node.outputs), {"fused_op_type": act})]
    else:
        a_op = _operand(g, node.inputs[0], (batch,) + at.shape[-2:])
        b_op = _operand(g, node.inputs[1], (batch,) + bt.shape[-2:])
    attrs = {"trans_a": ta, "trans_b": tb, "relu": act == "relu"}
    mm = Task(node.name, node.op_type, "AiCore", "BatchMatMul", [a_op, b_op] + bias, list(node.outputs), attrs)
    if act in ("gelu_erf", "gelu_tanh"):              # the epilogue as its own vector task
        mm.outputs = [node.outputs[0] + "/pre_gelu"]
        g_op = Operand(mm.outputs[0], list(out.shape), out.dtype)
        gelu = Task(node.name + "/gelu", "Gelu", "AiCore", "Gelu", [g_op], list(node.outputs),
                    {"approximate": "none" if act == "gelu_erf" else "tanh"})
        return [mm, gelu]
    return [mm]


def _elementwise(g: Graph, node: Node, chip: ChipSpec) -> Task:
    """The graph's broadcasting Add and Mul: the registry's same-shape Add when the shapes agree,
    AddBroadcast / Mul (numpy broadcasting) otherwise. Integer operands (index arithmetic) go
    to the AI CPU: the kernels take float16 and float32."""
    x, y = (g.type_of(v) for v in node.inputs)
    if x.dtype not in VECTOR_FLOATS or y.dtype not in VECTOR_FLOATS:
        return _aicpu(g, node)
    kernel = node.op_type
    if node.op_type == "Add" and x.shape != y.shape:
        kernel = "AddBroadcast"
    return Task(node.name, node.op_type, "AiCore", kernel, [_operand(g, v) for v in node.inputs],
                list(node.outputs), {})


def _aicpu(g: Graph, node: Node) -> Task:
    return Task(node.name, node.op_type, "AiCpu", None, [_operand(g, v) for v in node.inputs if v],
                list(node.outputs), dict(node.attrs), _io_bytes(g, node))


def _scalar_constant(g: Graph, value: str):
    """The number a graph constant of one element holds, else None."""
    a = g.constants.get(value)
    if a is None or np.asarray(a).size != 1 or np.asarray(a).dtype.kind not in "iuf":
        return None
    return float(np.asarray(a).reshape(-1)[0])


def _vector_math(g: Graph, node: Node, chip: ChipSpec) -> Task:
    """A VECTOR_MATH node on its vector kernel: the registry op of the same type with the
    node's attributes (ReduceSum/Mean/Max: ``axes``, ``keep_dims``), operands as the graph
    has them; a Pow whose exponent is a one-element constant is Pows with ``exponent`` (a
    number) and x its only operand. Operands that are not float16 or float32, or a Pow with a
    tensor exponent, go to the AI CPU."""
    if any(g.type_of(v).dtype not in VECTOR_FLOATS for v in node.inputs if v):
        return _aicpu(g, node)
    if node.op_type == "Pow":
        e = _scalar_constant(g, node.inputs[1])
        if e is None or not np.isfinite(e):
            return _aicpu(g, node)
        return Task(node.name, node.op_type, "AiCore", "Pows", [_operand(g, node.inputs[0])], list(node.outputs),
                    {"exponent": e})
    return Task(node.name, node.op_type, "AiCore", node.op_type, [_operand(g, v) for v in node.inputs],
                list(node.outputs), dict(node.attrs))


def _cast(g: Graph, node: Node, chip: ChipSpec) -> Task:
    """Cast between float16 and float32 on the vector kernel (``dst_type``); any other pair
    (integers, bfloat16) stays a data move costed by its bytes."""
    src, dst = g.type_of(node.inputs[0]).dtype, g.type_of(node.outputs[0]).dtype
    if src in VECTOR_FLOATS and dst in VECTOR_FLOATS:
        return Task(node.name, node.op_type, "AiCore", "Cast", [_operand(g, node.inputs[0])], list(node.outputs),
                    {"dst_type": dst})
    return Task(node.name, node.op_type, "AiCore", None, [_operand(g, v) for v in node.inputs if v],
                list(node.outputs), dict(node.attrs), _io_bytes(g, node))


LOWERINGS = {"Conv2D": _conv2d, "MatMul": _matmul, "Add": _elementwise, "Mul": _elementwise, "Cast": _cast,
             **{op: _vector_math for op in VECTOR_MATH}}


def lower_node(g: Graph, node: Node, chip) -> list[Task]:
    """The task(s) one node becomes on ``chip``."""
    chip = get_chip(chip)
    if node.op_type in RELABELS:
        return [Task(node.name, node.op_type, "None", None, [_operand(g, node.inputs[0])], list(node.outputs))]
    fn = LOWERINGS.get(node.op_type)
    if fn is not None:
        out = fn(g, node, chip)
        return out if isinstance(out, list) else [out]
    if node.op_type in registry.op_types():
        ops = [_operand(g, v) if v else None for v in node.inputs]
        while ops and ops[-1] is None:
            ops.pop()
        return [Task(node.name, node.op_type, "AiCore", node.op_type, ops, list(node.outputs), dict(node.attrs))]
    if node.op_type in DATA_MOVES:
        return [Task(node.name, node.op_type, "AiCore", None, [_operand(g, v) for v in node.inputs if v],
                     list(node.outputs), dict(node.attrs), _io_bytes(g, node))]
    if node.op_type in AICPU_OPS:
        return [_aicpu(g, node)]
    raise GraphError(f"{node.where()}: Op type not supported: {node.op_type}: no AI Core kernel and no "
                     f"AI CPU implementation")


def lower(g: Graph, chip) -> list[Task]:
    """Every node of a typed graph as tasks, in graph order. Nodes no engine runs are reported
    together, one line each, in one GraphError."""
    chip = get_chip(chip)
    tasks, missing = [], []
    for node in g.nodes:
        try:
            tasks += lower_node(g, node, chip)
        except GraphError as exc:
            if "Op type not supported" not in str(exc):
                raise
            missing.append(node)
    if missing:
        lines = "\n".join(f"  {n.where()}" for n in missing)
        raise GraphError(f"Op type not supported: {', '.join(sorted({n.op_type for n in missing}))}: no AI Core "
                         f"kernel and no AI CPU implementation for {len(missing)} node"
                         f"{'s' * (len(missing) > 1)} of graph '{g.name}':\n{lines}")
    return tasks


__all__ = ["Operand", "Task", "lower", "lower_node", "RELABELS", "DATA_MOVES", "AICPU_OPS", "VECTOR_MATH",
           "LOWERINGS"]
