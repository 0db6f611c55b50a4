"""MatMul rules: a bias add and an activation moved into the MatMul node's own attributes (the
graph's MatMul takes ``bias`` and ``activation``: :mod:`npulab.graph.forms`), and the scaled
dot-product attention pattern.

**MatMulBiasAddFusionPass** (real GE graph fusion rule: graphubfusionref MatMulBiasAddFusionPass,
MatMul/MatMulV2/BatchMatMul + BiasAdd/Add fused into the MatMul; it appears in the documented
fusion switch file template). MatMul(a, b) then Add of a constant of N values becomes
MatMul(a, b, bias): the cube adds the bias in its accumulator, and the product never goes to GM
unbiased.

**ATbeMatMulElemwiseFusionPass** (a real UB fusion rule name, from the UB fusion rule list of
graphubfusionref: MatMul + an element-wise op in one kernel). MatMul then Relu or Gelu becomes
MatMul with ``activation`` relu, gelu_erf or gelu_tanh (ops-nn FusedMatMul's fusedOpType names):
BatchMatMul applies ReLU in its epilogue, the 910B's FusedMatMul mix kernel applies GELU on its
vector cores (:mod:`npulab.graph.lower`).

**FlashAttentionFusionPass** (the rule CANN's msprof-analyze advisor lists, op_fusion_pass.yaml:
BatchMatMul -> Mul -> Softmax -> BatchMatMul). npulab registers no fused attention kernel
(FlashAttentionScore), so the pattern cannot become one node. What it does, honestly: it finds
MatMul(Q, K^T) x scale (+ mask) -> SoftmaxV2 -> MatMul(., V), records it, and moves the scale
onto the smaller operand, (s Q) K^T = s (Q K^T): the scale then multiplies S x D values of Q
instead of the S x S scores (FlashAttention scales Q for the same reason), and a constant
operand takes it at compile time (constant folding).
"""
from __future__ import annotations

import numpy as np

from .draft import Draft, PassRecord
from .rules import rule

_GELU = {"none": "gelu_erf", "tanh": "gelu_tanh"}


def _other(node, value):
    """The input of a two-input node that is not ``value``."""
    a, b = node.inputs[:2]
    return b if a == value else a


@rule("MatMulBiasAddFusionPass", "GraphFusion", "MatMul + Add(constant (N,)) -> MatMul(bias)")
def fuse_bias_add(d: Draft, rec: PassRecord, chip) -> None:
    for add in [n for n in d.nodes if n.op_type == "Add"]:
        for v in add.inputs:
            mm = d.producer(v)
            if mm is not None and mm.op_type == "MatMul":
                break
        else:
            continue
        if (len(mm.inputs) > 2 and mm.inputs[2]) or mm.attrs.get("activation"):
            continue
        c = d.const(_other(add, v))
        n = d.type_of(v).shape[-1]
        if c is None or c.size != n or (c.ndim and c.shape[-1] != n):
            rec.saw(f"{mm.name} -> {add.name}: the other operand is not a constant of {n} values")
            continue
        if not d.only_use(v, add) or d.type_of(add.outputs[0]).shape != d.type_of(v).shape:
            rec.saw(f"{mm.name} -> {add.name}: the product has another reader, or the add broadcasts it")
            continue
        bias = d.add_constant(f"{mm.name}.bias", np.reshape(c, (n,)))
        fused = d.new_node("MatMul", [mm.inputs[0], mm.inputs[1], bias], add.outputs, mm.name, **mm.attrs)
        d.replace([mm, add], [fused])
        rec.did(f"{mm.name} + {add.name} -> {mm.name}(bias)")


@rule("ATbeMatMulElemwiseFusionPass", "UBFusion", "MatMul + Relu/Gelu -> MatMul(activation)")
def fuse_activation(d: Draft, rec: PassRecord, chip) -> None:
    for act in [n for n in d.nodes if n.op_type in ("Relu", "Gelu")]:
        mm = d.producer(act.inputs[0])
        if mm is None or mm.op_type != "MatMul" or mm.attrs.get("activation"):
            continue
        kind = "relu" if act.op_type == "Relu" else _GELU.get(act.attrs.get("approximate", "none"))
        if kind is None or not d.only_use(mm.outputs[0], act):
            rec.saw(f"{mm.name} -> {act.name}: the product has another reader, or an unknown GELU form")
            continue
        fused = d.new_node("MatMul", mm.inputs, act.outputs, mm.name, **{**mm.attrs, "activation": kind})
        d.replace([mm, act], [fused])
        rec.did(f"{mm.name} + {act.name} -> {mm.name}(activation={kind})")


def _attention(d: Draft, softmax):
    """(first matmul, scale Mul, the scores it scales, scale value) when ``softmax`` closes a
    scaled attention pattern: MatMul -> Mul(scalar) [-> Add(mask)] -> SoftmaxV2(last axis) ->
    MatMul; else None."""
    if softmax.attrs.get("dim", -1) not in (-1, len(d.type_of(softmax.inputs[0]).shape) - 1):
        return None
    if not any(c.op_type == "MatMul" and c.inputs[0] == softmax.outputs[0] for c in d.consumers(softmax.outputs[0])):
        return None
    x = d.producer(softmax.inputs[0])
    if x is not None and x.op_type == "Add":             # the mask
        x = next((p for p in map(d.producer, x.inputs[:2]) if p is not None and p.op_type == "Mul"), None)
    if x is None or x.op_type != "Mul":
        return None
    for v in x.inputs[:2]:
        mm = d.producer(v)
        s = d.scalar(_other(x, v))
        if mm is not None and mm.op_type == "MatMul" and s is not None and not (len(mm.inputs) > 2 and mm.inputs[2]):
            return mm, x, v, s
    return None


@rule("FlashAttentionFusionPass", "GraphFusion",
      "MatMul(Q, K^T) * s (+ mask) -> SoftmaxV2 -> MatMul: found and recorded; s moved onto Q (or K)")
def attention_scale(d: Draft, rec: PassRecord, chip) -> None:
    for sm in [n for n in d.nodes if n.op_type == "SoftmaxV2"]:
        found = _attention(d, sm)
        if found is None:
            continue
        mm, mul, scores, s = found
        if mm.attrs.get("activation") or not d.only_use(scores, mul):
            rec.saw(f"attention at {mm.name}: the scores have another reader")
            continue
        if d.type_of(scores).dtype == "bfloat16":
            rec.saw(f"attention at {mm.name}: bfloat16 (a constant scale cannot be stored in it)")
            continue
        sizes = [d.type_of(v).size for v in mm.inputs[:2]]
        if min(sizes) >= d.type_of(scores).size:
            rec.saw(f"attention at {mm.name} -> {sm.name}: Q and K are no smaller than the scores; the scale stays")
            continue
        i = int(np.argmin(sizes)) if d.const(mm.inputs[1]) is None else 1   # a constant K takes it for free
        operand = mm.inputs[i]
        dtype = d.type_of(operand).dtype
        scale = d.add_constant(f"{mul.name}.scale", np.asarray(s, dtype=dtype))
        scaled = d.fresh(f"{operand}/scaled")
        pre = d.new_node("Mul", [operand, scale], [scaled], d.fresh(f"{mul.name}/pre"))
        ins = list(mm.inputs)
        ins[i] = scaled
        new_mm = d.new_node("MatMul", ins, mul.outputs, mm.name, **mm.attrs)
        d.replace([mm, mul], [pre, new_mm])
        rec.did(f"attention {mm.name} -> {mul.name} -> {sm.name}: scale {s:g} moved onto {operand} "
                f"({sizes[i]} values instead of {d.type_of(scores).size}); no fused attention kernel is registered")
