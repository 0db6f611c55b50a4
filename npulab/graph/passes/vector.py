"""Vector-unit rules: a chain of vector ops becomes one registered kernel, so the intermediate
value stays in UB instead of a round trip through GM.

**AvgPoolScaleFusionPass** (npulab name; GE's PoolingFusionPass rewrites AVG pooling too, for
its int8 form). AvgPool then Mul by a constant scalar becomes AvgPoolScale(scale=s), the
registered fused kernel (:mod:`npulab.ops.pooling`): the pooled plane is scaled in UB.

**SwishFusionPass** (npulab name). Mul(x, Sigmoid(x)), which an importer writes for torch's
SiLU traced to primitives, becomes Swish(x), a registered kernel; Sigmoid alone has no AI Core
kernel here and would run on the AI CPU.

**TbeEltwiseFusionPass** (GE's UB fusion rule for chains of up to six element-wise and
broadcast ops, graphubfusionref). GE compiles any such chain into one kernel; npulab has the
one chain ResNet needs as a kernel, AddRelu (:mod:`npulab.kernels.elementwise`), so here the
rule fuses a same-shape float Add whose only reader is a Relu: the residual sum is rectified in
UB and written once. Other chains stay one launch an op.
"""
from __future__ import annotations

from .draft import Draft, PassRecord
from .rules import rule


@rule("AvgPoolScaleFusionPass", "GraphFusion", "AvgPool + Mul(constant scalar) -> AvgPoolScale")
def fuse_avgpool_scale(d: Draft, rec: PassRecord, chip) -> None:
    for mul in [n for n in d.nodes if n.op_type == "Mul"]:
        for i, v in enumerate(mul.inputs[:2]):
            pool = d.producer(v)
            if pool is not None and pool.op_type == "AvgPool":
                break
        else:
            continue
        s = d.scalar(mul.inputs[1 - i])
        if s is None or d.type_of(mul.outputs[0]).shape != d.type_of(v).shape:
            rec.saw(f"{pool.name} -> {mul.name}: the other operand is not a constant scalar")
            continue
        if not d.only_use(v, mul):
            rec.saw(f"{pool.name} -> {mul.name}: the pooled value has another reader")
            continue
        fused = d.new_node("AvgPoolScale", pool.inputs, mul.outputs, pool.name, **{**pool.attrs, "scale": s})
        d.replace([pool, mul], [fused])
        rec.did(f"{pool.name} + {mul.name} -> {pool.name}(AvgPoolScale, scale={s:g})")


@rule("SwishFusionPass", "GraphFusion", "Mul(x, Sigmoid(x)) -> Swish(x)")
def fuse_swish(d: Draft, rec: PassRecord, chip) -> None:
    for mul in [n for n in d.nodes if n.op_type == "Mul"]:
        sig = next((p for p in map(d.producer, mul.inputs[:2]) if p is not None and p.op_type == "Sigmoid"), None)
        if sig is None or _other_input(mul, sig.outputs[0]) != sig.inputs[0]:
            continue
        if not d.only_use(sig.outputs[0], mul):
            rec.saw(f"{sig.name} -> {mul.name}: the sigmoid has another reader")
            continue
        fused = d.new_node("Swish", [sig.inputs[0]], mul.outputs, mul.name)
        d.replace([sig, mul], [fused])
        rec.did(f"{sig.name} + {mul.name} -> {mul.name}(Swish)")


@rule("TbeEltwiseFusionPass", "UBFusion", "Add + Relu (same shape) -> AddRelu, one vector kernel")
def fuse_add_relu(d: Draft, rec: PassRecord, chip) -> None:
    for relu in [n for n in d.nodes if n.op_type == "Relu"]:
        add = d.producer(relu.inputs[0])
        if add is None or add.op_type != "Add":
            continue
        a, b = (d.type_of(v) for v in add.inputs[:2])
        if a.shape != b.shape or a.dtype != b.dtype or a.dtype not in ("float16", "float32"):
            rec.saw(f"{add.name} -> {relu.name}: AddRelu takes two float16 or float32 operands of one shape")
            continue
        if not d.only_use(add.outputs[0], relu):
            rec.saw(f"{add.name} -> {relu.name}: the sum has another reader")
            continue
        fused = d.new_node("AddRelu", add.inputs[:2], relu.outputs, add.name)
        d.replace([add, relu], [fused])
        rec.did(f"{add.name} + {relu.name} -> {add.name}(AddRelu)")


def _other_input(node, value):
    a, b = node.inputs[:2]
    return b if a == value else a
