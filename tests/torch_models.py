"""Torch models the importer tests share (``import torch_models``; tests/conftest.py puts tests/
on sys.path): a hand-written ResNet-50 v1.5 (torchvision's, whose 0.28 wheel does not load under
the torch here), put in eval mode with BatchNorm statistics far from the identity so that a
mistake in the BN mapping shows."""
from __future__ import annotations

import torch
from torch import nn


class Bottleneck(nn.Module):
    """torchvision's v1.5 bottleneck: 1x1, 3x3 (carrying the stride), 1x1 x4, with the
    projection shortcut when the shape changes; one ReLU module used three times, as there."""
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + identity)


class ResNet50(nn.Module):
    """torchvision's ``resnet50`` (v1.5); ``widths`` narrows it for a fast test."""

    def __init__(self, num_classes: int = 1000, widths=(64, 128, 256, 512), blocks=(3, 4, 6, 3)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        cin = widths[0]
        for i, (width, n) in enumerate(zip(widths, blocks)):
            layers = []
            for b in range(n):
                layers.append(Bottleneck(cin, width, 2 if (b == 0 and i > 0) else 1))
                cin = width * Bottleneck.expansion
            setattr(self, f"layer{i + 1}", nn.Sequential(*layers))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50(seed: int = 0, **config) -> ResNet50:
    """A seeded ResNet-50 in eval mode; each BatchNorm gets running statistics and an affine
    part drawn away from the identity (the last BN of a block small, as in the zoo, so the
    residual sums stay of unit scale through the 16 blocks)."""
    torch.manual_seed(seed)
    model = ResNet50(**config)
    gen = torch.Generator().manual_seed(seed + 1)
    for name, m in model.named_modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            gamma = 0.3 if name.endswith("bn3") else 1.0
            m.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(c, generator=gen) + 0.5)
            m.weight.data.copy_(gamma * (torch.rand(c, generator=gen) * 0.5 + 0.5))
            m.bias.data.copy_(torch.randn(c, generator=gen) * 0.1)
    return model.eval()


def bert():
    """A 2-layer BERT (hidden 32, 4 heads) from a transformers config, seeded; no download."""
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    return BertModel(BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=32, attn_implementation="eager"))


def gpt2():
    """A 2-layer GPT-2 (hidden 32, 4 heads) from a transformers config, seeded; no download."""
    from transformers import GPT2Config, GPT2Model
    torch.manual_seed(0)
    return GPT2Model(GPT2Config(vocab_size=120, n_embd=32, n_layer=2, n_head=4, n_positions=32, use_cache=False,
                                bos_token_id=0, eos_token_id=0, attn_implementation="eager"))
