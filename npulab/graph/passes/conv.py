"""Convolution rules: inference BatchNorm folded into the conv before it, and a ReLU after a conv
run in the conv's epilogue.

**ConvBatchnormFusionPass** (the real GE graph fusion rule of that name: "Graph Fusion and UB
Fusion Patterns", graphubfusionref ConvBatchnormFusionPass: Conv2D/Conv3D + BatchNorm or
BNInference fused into one conv when filter, bias and the BN inputs are constants). Inference
BN is a per-channel affine map, y = s (conv - mean) + beta with s = gamma / sqrt(var + eps), so
it folds into the conv's weights and bias exactly::

    W' = W x s (per output channel),   b' = (b - mean) x s + beta

computed in float64, W' rounded once to the weight's dtype and b' kept in the accumulator's
dtype (float32; the cube adds the bias there, :data:`npulab.arch.ACC_DTYPE`). In float32 the
folded graph's reference agrees with the unfolded one to float32 rounding; in float16 the
folded weights carry one float16 rounding of W x s instead of W's.

**ConvReluFusionPass** (npulab name). Conv2D followed by Relu becomes Conv2D with ``relu=True``:
the conv kernel applies ReLU in its epilogue (FixPipe, or the vector unit in UB), so the conv's
output goes to GM once, rectified. The closest real rules are UB fusion rules:
TbeConv3dElemwisePass's third pattern (Conv3D + a one-input element-wise op, ReLU only; npulab's
Conv2D runs on that depth-1 3-D kernel) and TbeConv2DReluv2Pass (Conv2D + ReluV2, training).

Why Conv2D ``relu=True`` and not the registered Conv2DBNRelu kernel: Conv2DBNRelu applies BN as
the per-channel scale and offset of its epilogue, the same arithmetic folding does at compile
time, but it is the registry's depth-1 3-D form, whose ``pads`` (a (before, after) pair per axis)
the IR's flat JSON attributes cannot hold, and it would need a reshape to 5-D on each side. With
constant BN statistics (the inference form every model zoo graph has), folding plus the conv's
ReLU epilogue gives one Conv2D node in the graph's own 4-D form; Conv2DBNRelu stays the
functional API's kernel (:func:`npulab.ops.conv2d_bn_relu`).
"""
from __future__ import annotations

import numpy as np

from ...arch import ACC_DTYPE
from .draft import Draft, PassRecord
from .rules import rule


def _bn_params(d: Draft, bn):
    """(mean, var, gamma, beta, eps) of a BatchNorm node as float64, or a reason it cannot fold."""
    ins = list(bn.inputs) + [""] * (5 - len(bn.inputs))
    arrays = []
    flags = (None, None, "has_weight", "has_bias")
    for i, (v, flag, default) in enumerate(zip(ins[1:5], flags, (None, None, 1.0, 0.0))):
        if flag is not None and (not v or not bn.attrs.get(flag, True)):
            arrays.append(default)
            continue
        a = d.const(v) if v else None
        if a is None:
            return f"{bn.name}: input {v or i + 1} is not a constant"
        arrays.append(np.asarray(a, dtype=np.float64))
    return (*arrays, float(bn.attrs.get("eps", 1e-5)))


@rule("ConvBatchnormFusionPass", "GraphFusion", "Conv2D + inference BatchNorm -> Conv2D with folded weights and bias")
def fold_batchnorm(d: Draft, rec: PassRecord, chip) -> None:
    for bn in [n for n in d.nodes if n.op_type == "BatchNorm"]:
        conv = d.producer(bn.inputs[0])
        if conv is None or conv.op_type != "Conv2D":
            continue
        if conv.attrs.get("relu") or not d.only_use(conv.outputs[0], bn):
            rec.saw(f"{conv.name} -> {bn.name}: the conv output has a ReLU or another reader")
            continue
        params = _bn_params(d, bn)
        w = d.const(conv.inputs[1])
        has_bias = len(conv.inputs) > 2 and bool(conv.inputs[2])
        b = d.const(conv.inputs[2]) if has_bias else np.zeros(1)
        if isinstance(params, str) or w is None or b is None or w.dtype.kind != "f":
            rec.saw(params if isinstance(params, str) else f"{conv.name}: weight or bias is not a float constant")
            continue
        mean, var, gamma, beta, eps = params
        s = gamma / np.sqrt(var + eps)
        w2 = (np.asarray(w, np.float64) * np.reshape(s, (-1, 1, 1, 1))).astype(w.dtype)
        b2 = ((np.asarray(b, np.float64) - mean) * s + beta) * np.ones(w.shape[0])
        b2 = b2.astype(ACC_DTYPE[np.dtype(w.dtype)])
        wn = d.add_constant(f"{conv.name}.weight_bn", w2, d.constants[conv.inputs[1]][1])
        bname = d.add_constant(f"{conv.name}.bias_bn", b2)
        fused = d.new_node("Conv2D", [conv.inputs[0], wn, bname], bn.outputs, conv.name, **conv.attrs)
        d.replace([conv, bn], [fused])
        rec.did(f"{conv.name} + {bn.name} -> {conv.name} (weights and bias folded)")


@rule("ConvReluFusionPass", "UBFusion", "Conv2D + Relu -> Conv2D(relu=True): ReLU in the conv's epilogue")
def fuse_conv_relu(d: Draft, rec: PassRecord, chip) -> None:
    for relu in [n for n in d.nodes if n.op_type == "Relu"]:
        conv = d.producer(relu.inputs[0])
        if conv is None or conv.op_type != "Conv2D" or conv.attrs.get("relu"):
            continue
        if not d.only_use(conv.outputs[0], relu):
            rec.saw(f"{conv.name} -> {relu.name}: the conv output has another reader")
            continue
        if d.type_of(conv.outputs[0]).dtype not in ("float16", "float32"):
            rec.saw(f"{conv.name}: {d.type_of(conv.outputs[0]).dtype} output (the ReLU epilogue is for float outputs)")
            continue
        fused = d.new_node("Conv2D", conv.inputs, relu.outputs, conv.name, **{**conv.attrs, "relu": True})
        d.replace([conv, relu], [fused])
        rec.did(f"{conv.name} + {relu.name} -> {conv.name}(relu=True)")
