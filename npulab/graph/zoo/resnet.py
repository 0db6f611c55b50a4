"""ResNet-50 v1.5 as torchvision's ``resnet50`` computes it in eval mode: the stride of a
downsampling bottleneck sits on its 3x3 conv (v1.5), not its first 1x1 (v1). Convs are bias-less,
each followed by BatchNorm (running statistics: the inference form) and Relu. Node and constant
names are torchvision's module paths and ``state_dict`` keys ("layer1.0.conv1",
"layer1.0.bn1.running_mean", "fc.weight"), so profiles and errors read like torch's."""
from __future__ import annotations

import numpy as np

from ..ir import Graph


class _Weights:
    """Seeded weights in torch's spirit (He-normal convs, BN stats near the identity)."""

    def __init__(self, g: Graph, seed: int, dtype: str):
        self.g, self.rng, self.dtype = g, np.random.default_rng(seed), dtype

    def const(self, name, array):
        return self.g.constant(name, np.asarray(array).astype(self.dtype))

    def conv(self, name, cout, cin, k):
        std = np.sqrt(2.0 / (cin * k * k))
        return self.const(name + ".weight", self.rng.normal(0, std, (cout, cin, k, k)))

    def bn(self, name, c, gamma=1.0):
        r = self.rng
        return [self.const(name + ".running_mean", r.normal(0, 0.1, c)),
                self.const(name + ".running_var", r.uniform(0.5, 1.5, c)),
                self.const(name + ".weight", gamma * r.uniform(0.5, 1.0, c)),
                self.const(name + ".bias", r.normal(0, 0.1, c))]




def _bottleneck(g, w, x, p, cin, width, stride):
    cout = width * 4
    y = g.node("Conv2D", [x, w.conv(p + ".conv1", width, cin, 1)], name=p + ".conv1", stride=1,
               padding=0, dilation=1, groups=1)
    y = g.node("BatchNorm", [y, *w.bn(p + ".bn1", width)], name=p + ".bn1", eps=1e-5,
               has_weight=True, has_bias=True)
    y = g.node("Relu", [y], name=p + ".relu1")
    y = g.node("Conv2D", [y, w.conv(p + ".conv2", width, width, 3)], name=p + ".conv2",
               stride=stride, padding=1, dilation=1, groups=1)
    y = g.node("BatchNorm", [y, *w.bn(p + ".bn2", width)], name=p + ".bn2", eps=1e-5,
               has_weight=True, has_bias=True)
    y = g.node("Relu", [y], name=p + ".relu2")
    y = g.node("Conv2D", [y, w.conv(p + ".conv3", cout, width, 1)], name=p + ".conv3", stride=1,
               padding=0, dilation=1, groups=1)
    # a small last-BN gamma keeps the residual sum's scale flat through 16 blocks (torchvision's
    # zero_init_residual in spirit), so float16 stays finite
    y = g.node("BatchNorm", [y, *w.bn(p + ".bn3", cout, gamma=0.3)], name=p + ".bn3", eps=1e-5,
               has_weight=True, has_bias=True)
    if stride != 1 or cin != cout:
        x = g.node("Conv2D", [x, w.conv(p + ".downsample.0", cout, cin, 1)],
                   name=p + ".downsample.0", stride=stride, padding=0, dilation=1, groups=1)
        x = g.node("BatchNorm", [x, *w.bn(p + ".downsample.1", cout)], name=p + ".downsample.1",
                   eps=1e-5, has_weight=True, has_bias=True)
    y = g.node("Add", [y, x], name=p + ".add")
    return g.node("Relu", [y], name=p + ".relu3")


def resnet50(batch=1, image=224, num_classes=1000, dtype="float32", seed=0,
             widths=(64, 128, 256, 512), blocks=(3, 4, 6, 3)) -> Graph:
    """torchvision's ResNet-50 v1.5 (eval): input ``x`` (batch, 3, image, image), output
    the fc's (batch, num_classes) logits; returned inferred."""
    g = Graph("resnet50")
    w = _Weights(g, seed, dtype)
    x = g.input("x", (batch, 3, image, image), dtype)
    y = g.node("Conv2D", [x, w.conv("conv1", widths[0], 3, 7)], name="conv1", stride=2, padding=3,
               dilation=1, groups=1)
    y = g.node("BatchNorm", [y, *w.bn("bn1", widths[0])], name="bn1", eps=1e-5, has_weight=True,
               has_bias=True)
    y = g.node("Relu", [y], name="relu")
    y = g.node("MaxPool", [y], name="maxpool", kernel_size=3, stride=2, padding=1)
    cin = widths[0]
    for li, (width, n) in enumerate(zip(widths, blocks)):
        for b in range(n):
            stride = 2 if (b == 0 and li > 0) else 1
            y = _bottleneck(g, w, y, f"layer{li + 1}.{b}", cin, width, stride)
            cin = width * 4
    y = g.node("ReduceMean", [y], name="avgpool", axes=[2, 3], keep_dims=False)
    fw = w.const("fc.weight", w.rng.normal(0, 1 / np.sqrt(cin), (num_classes, cin)))
    fb = w.const("fc.bias", w.rng.normal(0, 0.01, num_classes))
    y = g.node("MatMul", [y, fw, fb], name="fc", transpose_b=True)
    g.output(y)
    return g.infer()
