"""The torch-style modules: each against its PyTorch twin carrying the same weights, and the
seeds' flow (a small torch CNN whose Conv2d + BatchNorm2d + ReLU become one fused npulab Conv2d)."""
import numpy as np
import pytest
import torch

import npulab
from npulab.ops import nn
from tolerances import assert_close

torch.manual_seed(0)
RNG = np.random.default_rng(0)
CHIP = "910"


def t2n(t):
    return t.detach().numpy()


def test_conv2d_from_torch_matches_torch():
    conv = torch.nn.Conv2d(6, 10, 3, stride=2, padding=1, bias=True)
    x = RNG.standard_normal((2, 6, 9, 11)).astype(np.float32)
    ours = nn.Conv2d.from_torch(conv, chip=CHIP)
    assert_close(ours(x), t2n(conv(torch.from_numpy(x))), np.float32, unit="cube")
    assert ours.last_trace.summary()["cube_flops"] > 0


def test_fused_conv_bn_relu_from_torch():
    conv = torch.nn.Conv2d(4, 8, 3, padding=1, bias=False)
    bn = torch.nn.BatchNorm2d(8)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.2, 0.2)
    bn.eval()
    x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    ours = nn.Conv2d.from_torch(conv, bn, relu=True, chip=CHIP)
    assert ours.fused
    want = t2n(torch.relu(bn(conv(torch.from_numpy(x)))))
    assert_close(ours(x), want, np.float32, unit="cube")


def test_seeds_flow_swap_conv_bn_relu_for_a_fused_npulab_conv():
    """Build a small CNN in PyTorch, replace each Conv2d+BN+ReLU by npulab's fused Conv2d
    carrying the torch weights, run the rest in npulab too, and get torch's outputs."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.AvgPool2d(2),
    )
    with torch.no_grad():
        for m in model:
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.3, 0.3)
                m.running_var.uniform_(0.5, 1.5)
    model.eval()
    npu = nn.Sequential(
        nn.Conv2d.from_torch(model[0], model[1], relu=True, chip=CHIP),
        nn.MaxPool2d(2, chip=CHIP),
        nn.Conv2d.from_torch(model[4], model[5], relu=True, chip=CHIP),
        nn.AvgPool2d(2, chip=CHIP),
    )
    x = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    with torch.no_grad():
        want = t2n(model(torch.from_numpy(x)))
    got = npu(x)
    assert got.shape == want.shape == (2, 16, 4, 4)
    assert_close(got, want, np.float32, unit="cube")
    assert all(t is not None and t.cycles > 0 for t in npu.traces)


@pytest.mark.parametrize("make, ours", [
    (lambda: torch.nn.LayerNorm(24), lambda m: nn.LayerNorm(24, chip=CHIP)),
    (lambda: torch.nn.ReLU(), lambda m: nn.ReLU(chip=CHIP)),
    (lambda: torch.nn.GELU(), lambda m: nn.GELU(chip=CHIP)),
    (lambda: torch.nn.GELU(approximate="tanh"), lambda m: nn.GELU("tanh", chip=CHIP)),
    (lambda: torch.nn.SiLU(), lambda m: nn.SiLU(chip=CHIP)),
    (lambda: torch.nn.Softmax(dim=1), lambda m: nn.Softmax(dim=1, chip=CHIP)),
])
def test_vector_modules_match_torch(make, ours):
    ref = make()
    x = RNG.standard_normal((4, 24)).astype(np.float32)
    with torch.no_grad():
        want = t2n(ref(torch.from_numpy(x)))
    assert_close(ours(ref)(x), want, np.float32)


def test_rms_norm_batch_norm_and_pools_match_torch():
    x = RNG.standard_normal((2, 5, 8, 8)).astype(np.float32)
    rms = nn.RMSNorm(8, eps=1e-6, chip=CHIP)
    rms.weight = RNG.uniform(0.5, 1.5, 8).astype(np.float32)
    want = t2n(torch.nn.functional.rms_norm(torch.from_numpy(x), (8,), torch.from_numpy(rms.weight), 1e-6))
    assert_close(rms(x), want, np.float32)

    bn = nn.BatchNorm2d(5, chip=CHIP)
    bn.running_mean = RNG.standard_normal(5).astype(np.float32)
    bn.running_var = RNG.uniform(0.5, 2, 5).astype(np.float32)
    tbn = torch.nn.BatchNorm2d(5).eval()
    with torch.no_grad():
        tbn.running_mean.copy_(torch.from_numpy(bn.running_mean))
        tbn.running_var.copy_(torch.from_numpy(bn.running_var))
        assert_close(bn(x), t2n(tbn(torch.from_numpy(x))), np.float32)
        assert_close(nn.MaxPool2d(3, 2, 1, chip=CHIP)(x), t2n(torch.nn.MaxPool2d(3, 2, 1)(torch.from_numpy(x))),
                     np.float32)
        assert_close(nn.AvgPool2d(2, chip=CHIP)(x), t2n(torch.nn.AvgPool2d(2)(torch.from_numpy(x))), np.float32)


def test_linear_and_matmul_modules():
    lin = torch.nn.Linear(12, 7)
    ours = nn.Linear(12, 7, chip=CHIP)
    ours.weight, ours.bias = t2n(lin.weight), t2n(lin.bias)
    x = RNG.standard_normal((5, 12)).astype(np.float32)
    with torch.no_grad():
        assert_close(ours(x), t2n(lin(torch.from_numpy(x))), np.float32, unit="cube")
    w = RNG.standard_normal((12, 3)).astype(np.float32)
    assert_close(nn.MatMul(w, chip=CHIP)(x), x @ w, np.float32, unit="cube")
    a = RNG.standard_normal((2, 4, 6)).astype(np.float32)
    b = RNG.standard_normal((2, 6, 5)).astype(np.float32)
    assert_close(nn.BatchMatMul(chip=CHIP)((a, b)), a @ b, np.float32, unit="cube")


def test_keras_conv2d_alias_same_padding():
    m = nn.Conv2D(6, 3, strides=1, padding="same", use_bias=True, in_channels=4, chip=CHIP)
    x = RNG.standard_normal((1, 4, 7, 7)).astype(np.float32)
    ref = torch.nn.Conv2d(4, 6, 3, padding="same")
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(m.weight))
        ref.bias.copy_(torch.from_numpy(m.bias))
        want = t2n(ref(torch.from_numpy(x)))
    assert m(x).shape == (1, 6, 7, 7)
    assert_close(m(x), want, np.float32, unit="cube")
    with pytest.raises(npulab.ShapeError, match="'same' or 'valid'"):
        nn.Conv2D(6, 3, padding="full", in_channels=4)


def test_modules_are_seeded_and_check_groups():
    a, b = nn.Conv2d(4, 8, 3, seed=1), nn.Conv2d(4, 8, 3, seed=1)
    assert np.array_equal(a.weight, b.weight) and a.weight.shape == (8, 4, 3, 3)
    with pytest.raises(npulab.ShapeError, match="divisible by groups"):
        nn.Conv2d(4, 6, 3, groups=4)
