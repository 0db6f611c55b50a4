"""The torch-style modules: each against its PyTorch twin carrying the same weights, and the
seeds' flow (a small torch CNN whose Conv2d + BatchNorm2d + ReLU become one fused npulab Conv2d)."""
import numpy as np
import pytest
import torch

import npulab
from npulab.errors import ArgumentError, ChipFileError
from npulab.ops import nn
from fixtures import assert_close

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
    with pytest.raises(npulab.ShapeError, match=r"Conv2d: out_channels \(6\) must be divisible by groups \(4\)"):
        nn.Conv2d(4, 6, 3, groups=4)
    with pytest.raises(npulab.ShapeError, match=r"ConvTranspose2d: out_channels \(6\) must be divisible by groups"):
        nn.ConvTranspose2d(4, 6, 3, groups=4, bias=False)
    with pytest.raises(npulab.ShapeError, match=r"ConvTranspose2d: in_channels \(3\) must be divisible by groups"):
        nn.ConvTranspose2d(3, 6, 3, groups=2)
    with pytest.raises(npulab.ShapeError, match=r"Conv3d: in_channels \(3\) must be divisible by groups \(2\)"):
        nn.Conv3d(3, 4, 3, groups=2)
    with pytest.raises(npulab.ShapeError, match="Conv2d: groups must be a positive int, got 0"):
        nn.Conv2d(4, 4, 3, groups=0)
    t = nn.ConvTranspose2d(4, 6, 3, groups=2, bias=False)           # torch's layout and fan_in
    assert t.weight.shape == tuple(torch.nn.ConvTranspose2d(4, 6, 3, groups=2).weight.shape) == (4, 3, 3, 3)


# -- from_torch: every module with a torch twin ----------------------------------------------------
def _bn_with_stats(c):
    bn = torch.nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.2, 0.2)
    return bn.eval()


def _randomised(m):
    """A torch module whose affine parameters are not the default ones and ones."""
    with torch.no_grad():
        for p in m.parameters():
            p.uniform_(0.5, 1.5)
    return m


# (torch twin, input shape, unit, the npulab module takes a dtype)
FROM_TORCH = {
    "Conv2d": (lambda: torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=1, groups=2), (2, 4, 7, 7), "cube", True),
    "Conv2d-same": (lambda: torch.nn.Conv2d(2, 3, 3, padding="same", dilation=2, bias=False), (1, 2, 6, 6),
                    "cube", True),
    "Conv3d": (lambda: torch.nn.Conv3d(2, 4, (2, 3, 3), stride=(1, 2, 1), padding=1), (1, 2, 3, 5, 5), "cube", True),
    "ConvTranspose2d": (lambda: torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1,
                                                         groups=2, dilation=1), (1, 4, 4, 4), "cube", True),
    "ConvTranspose2d-dilated": (lambda: torch.nn.ConvTranspose2d(2, 2, 2, stride=1, padding=1, dilation=2,
                                                                 bias=False), (1, 2, 4, 4), "cube", True),
    "Linear": (lambda: torch.nn.Linear(12, 5), (3, 12), "cube", True),
    "BatchNorm2d": (lambda: _bn_with_stats(3), (2, 3, 4, 4), "vector", True),
    "BatchNorm2d-no-affine": (lambda: torch.nn.BatchNorm2d(3, eps=1e-3, affine=False).eval(), (2, 3, 4, 4),
                              "vector", True),
    "LayerNorm": (lambda: _randomised(torch.nn.LayerNorm((4, 6), eps=1e-4)), (3, 4, 6), "vector", True),
    "LayerNorm-no-bias": (lambda: _randomised(torch.nn.LayerNorm(6, bias=False)), (3, 6), "vector", True),
    "RMSNorm": (lambda: _randomised(torch.nn.RMSNorm(6, eps=1e-5)), (3, 6), "vector", True),
    "ReLU": (lambda: torch.nn.ReLU(), (3, 8), "vector", False),
    "GELU-tanh": (lambda: torch.nn.GELU(approximate="tanh"), (3, 8), "vector", False),
    "SiLU": (lambda: torch.nn.SiLU(), (3, 8), "vector", False),
    "Softmax": (lambda: torch.nn.Softmax(dim=0), (3, 8), "vector", False),
    "MaxPool2d": (lambda: torch.nn.MaxPool2d(3, 2, 1, ceil_mode=True), (1, 2, 6, 6), "vector", False),
    "AvgPool2d": (lambda: torch.nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False), (1, 2, 6, 6),
                  "vector", False),
}


@pytest.mark.parametrize("case", sorted(FROM_TORCH))
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_from_torch_matches_the_torch_module(case, dtype):
    """fp16: the module's weights in fp16 (from_torch's dtype) or, without weights, fp16 input."""
    make, shape, unit, takes_dtype = FROM_TORCH[case]
    twin = make()
    with torch.no_grad():                       # the reference sees the very values npulab gets
        for t in list(twin.parameters()) + list(twin.buffers()):
            if t.is_floating_point():
                t.copy_(t.to(torch.float16).float() if dtype == np.float16 else t)
    kind = case.split("-")[0]
    ours = getattr(nn, kind).from_torch(twin, chip=CHIP, **({"dtype": dtype} if takes_dtype else {}))
    assert type(ours) is getattr(nn, kind)
    x = RNG.standard_normal(shape).astype(dtype)
    with torch.no_grad():
        want = t2n(twin(torch.from_numpy(x.astype(np.float32))))
    got = ours(x)
    assert got.dtype == dtype
    assert_close(got, want, dtype, unit=unit)


def test_from_torch_copies_attributes_and_never_shares_memory():
    conv = torch.nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), output_padding=(1, 0),
                                    groups=2, dilation=(1, 2))
    ours = nn.ConvTranspose2d.from_torch(conv)
    assert (ours.stride, ours.padding, ours.output_padding, ours.dilation, ours.groups) == \
        ((2, 1), (1, 0), (1, 0), (1, 2), 2)
    with torch.no_grad():
        conv.weight.zero_()
    assert np.abs(ours.weight).max() > 0
    pool = nn.MaxPool2d.from_torch(torch.nn.MaxPool2d((2, 3), 1, (1, 1), 2, ceil_mode=True))
    assert (pool.kernel_size, pool.stride, pool.padding, pool.dilation, pool.ceil_mode) == ((2, 3), 1, (1, 1), 2, True)
    assert nn.RMSNorm.from_torch(torch.nn.RMSNorm([2, 3])).eps is None
    assert nn.GELU.from_torch(torch.nn.GELU("tanh")).approximate == "tanh"
    ln = nn.LayerNorm.from_torch(torch.nn.LayerNorm(5, elementwise_affine=False))
    assert ln.weight is None and ln.bias is None
    bn = nn.BatchNorm2d.from_torch(torch.nn.BatchNorm2d(3, eps=1e-3, bias=False).eval(), dtype=np.float16)
    assert bn.eps == 1e-3 and bn.bias is None and bn.weight.dtype == bn.running_var.dtype == np.float16


def test_rms_norm_from_torch_with_machine_epsilon():
    twin = _randomised(torch.nn.RMSNorm((2, 5)))            # eps=None: finfo(input dtype).eps
    x = RNG.standard_normal((3, 2, 5)).astype(np.float32) * 1e-3
    with torch.no_grad():
        want = t2n(twin(torch.from_numpy(x)))
    assert_close(nn.RMSNorm.from_torch(twin, chip=CHIP)(x), want, np.float32)


def test_sequential_from_torch_converts_each_child():
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Conv2d(4, 3, 1), torch.nn.GELU()).eval()
    npu = nn.Sequential.from_torch(model, chip=CHIP)
    assert [type(m).__name__ for m in npu.modules] == ["Conv2d", "ReLU", "MaxPool2d", "Conv2d", "GELU"]
    x = RNG.standard_normal((1, 2, 6, 6)).astype(np.float32)
    with torch.no_grad():
        assert_close(npu(x), t2n(model(torch.from_numpy(x))), np.float32, unit="cube")
    with pytest.raises(npulab.ShapeError, match="child 1 is a Tanh, and npulab has no Tanh module"):
        nn.Sequential.from_torch(torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Tanh()))


def test_from_torch_checks_the_module_kind():
    with pytest.raises(npulab.ShapeError, match=r"Conv2d.from_torch: expects a torch.nn.Conv2d, got "
                                                r"ConvTranspose2d; .*nn.ConvTranspose2d.from_torch"):
        nn.Conv2d.from_torch(torch.nn.ConvTranspose2d(2, 3, 3))
    with pytest.raises(npulab.ShapeError, match=r"expects a torch.nn.Conv2d, got Conv3d; .*nn.Conv3d.from_torch"):
        nn.Conv2d.from_torch(torch.nn.Conv3d(2, 3, 3))
    with pytest.raises(npulab.ShapeError, match=r"Conv3d.from_torch: expects a torch.nn.Conv3d, got Conv2d"):
        nn.Conv3d.from_torch(torch.nn.Conv2d(2, 3, 3))
    with pytest.raises(npulab.ShapeError, match="got Conv1d; npulab has no Conv1d module"):
        nn.Conv2d.from_torch(torch.nn.Conv1d(2, 3, 3))
    with pytest.raises(npulab.ShapeError, match="LayerNorm.from_torch: expects a torch.nn.LayerNorm, got RMSNorm"):
        nn.LayerNorm.from_torch(torch.nn.RMSNorm(4))
    with pytest.raises(npulab.ShapeError, match="torch.nn has no MatMul"):
        nn.MatMul.from_torch(torch.nn.Linear(2, 2))
    with pytest.raises(npulab.ShapeError, match="dtype must be float16 or float32, got int8"):
        nn.Linear.from_torch(torch.nn.Linear(2, 2), dtype=np.int8)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_conv_from_torch_refuses_padding_modes_it_would_zero_pad(mode):
    with pytest.raises(npulab.ShapeError, match=rf"Conv2d.from_torch: padding_mode='{mode}' is not "
                                                rf"supported.*supported: 'zeros'"):
        nn.Conv2d.from_torch(torch.nn.Conv2d(2, 3, 3, padding=1, padding_mode=mode))
    with pytest.raises(npulab.ShapeError, match=rf"Conv3d.from_torch: padding_mode='{mode}'"):
        nn.Conv3d.from_torch(torch.nn.Conv3d(2, 3, 3, padding=1, padding_mode=mode))
    with pytest.raises(npulab.ShapeError, match=rf"Conv2d: padding_mode='{mode}'"):
        nn.Conv2d(2, 3, 3, 1, 1, 1, 1, True, mode)


def test_conv2d_from_torch_relu_without_bn_and_bn_without_relu():
    conv = torch.nn.Conv2d(3, 5, 3, padding=1)
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    X = torch.from_numpy(x)
    ours = nn.Conv2d.from_torch(conv, relu=True, chip=CHIP)
    with torch.no_grad():
        want = t2n(torch.relu(conv(X)))
        assert (t2n(conv(X)) < 0).any()             # the ReLU has something to do
    got = ours(x)
    assert_close(got, want, np.float32, unit="cube")
    assert not ours.fused and got.min() == 0.0
    bn = _bn_with_stats(5)
    ours = nn.Conv2d.from_torch(conv, bn, relu=False, chip=CHIP)
    with torch.no_grad():
        want = t2n(bn(conv(X)))
    assert ours.fused and (want < 0).any()
    assert_close(ours(x), want, np.float32, unit="cube")


def test_fused_from_torch_checks_the_batch_norm():
    conv = torch.nn.Conv2d(2, 3, 3)
    with pytest.raises(npulab.ShapeError, match=r"no running statistics \(track_running_stats=False\)"):
        nn.Conv2d.from_torch(conv, torch.nn.BatchNorm2d(3, track_running_stats=False), relu=True)
    with pytest.raises(npulab.ShapeError, match="has 4 features and the conv 3 output channels"):
        nn.Conv2d.from_torch(conv, torch.nn.BatchNorm2d(4).eval(), relu=True)
    with pytest.raises(npulab.ShapeError, match="bn must be a torch.nn.BatchNorm2d, got BatchNorm1d"):
        nn.Conv2d.from_torch(conv, torch.nn.BatchNorm1d(3))
    with pytest.raises(npulab.ShapeError, match="BatchNorm2d.from_torch: the BatchNorm2d has no running"):
        nn.BatchNorm2d.from_torch(torch.nn.BatchNorm2d(3, track_running_stats=False))
    with pytest.raises(npulab.ShapeError, match=r"running_var has shape \(4,\); expected \(3,\)"):
        nn.Conv2d(2, 3, 3, fused=True).set_batch_norm(np.zeros(3), np.ones(4))


def test_batch_norm2d_parameters_follow_its_dtype():
    bn = nn.BatchNorm2d(2, dtype=np.float16, chip=CHIP)
    assert {v.dtype for v in bn.parameters().values()} == {np.dtype(np.float16)}
    bn.running_mean[:] = [0.5, -0.25]
    bn.running_var[:] = [2.0, 0.5]
    x = RNG.standard_normal((1, 2, 5, 5)).astype(np.float16)
    tbn = torch.nn.BatchNorm2d(2).eval()
    with torch.no_grad():
        tbn.running_mean.copy_(torch.tensor([0.5, -0.25]))
        tbn.running_var.copy_(torch.tensor([2.0, 0.5]))
        want = t2n(tbn(torch.from_numpy(x.astype(np.float32))))
    got = bn(x)
    assert got.dtype == np.float16
    assert_close(got, want, np.float16)


def test_module_arguments_follow_torchs_order():
    import inspect

    def positional(f):
        return [p.name for p in inspect.signature(f).parameters.values()
                if p.kind == p.POSITIONAL_OR_KEYWORD and p.name not in ("self", "device", "dtype")]
    for name in ("Conv2d", "Conv3d", "ConvTranspose2d", "Linear", "BatchNorm2d", "LayerNorm", "RMSNorm",
                 "GELU", "Softmax", "MaxPool2d", "AvgPool2d"):
        assert positional(getattr(nn, name).__init__) == positional(getattr(torch.nn, name).__init__), name


def test_pool_modules_take_torchs_positional_arguments():
    x = RNG.standard_normal((1, 2, 7, 7)).astype(np.float32)
    X = torch.from_numpy(x)
    with torch.no_grad():
        want = t2n(torch.nn.MaxPool2d(3, 2, 1, 1, False, True)(X))     # ceil_mode=True, 6th
        assert want.shape == (1, 2, 4, 4)
        assert np.array_equal(nn.MaxPool2d(3, 2, 1, 1, False, True, chip=CHIP)(x), want)
        want = t2n(torch.nn.AvgPool2d(3, 2, 1, True, False)(X))           # count_include_pad=False
        assert_close(nn.AvgPool2d(3, 2, 1, True, False, chip=CHIP)(x), want, np.float32)
    with pytest.raises(npulab.ShapeError, match="MaxPool2d: return_indices=True is not supported"):
        nn.MaxPool2d(2, 2, 0, 1, True)
    with pytest.raises(npulab.ShapeError, match="AvgPool2d: divisor_override is not supported"):
        nn.AvgPool2d(2, 2, 0, False, True, 3)
    with pytest.raises(npulab.ShapeError, match="MaxPool2d: kernel_size must be an int or a tuple of 2 ints"):
        nn.MaxPool2d(2.5)


def test_int8_modules_get_a_spread_deterministic_init():
    m = nn.Conv2d(4, 8, 3, dtype=np.int8, seed=3)
    assert m.weight.dtype == np.int8 and m.bias.dtype == np.int32
    assert np.array_equal(m.weight, nn.Conv2d(4, 8, 3, dtype=np.int8, seed=3).weight)
    assert m.weight.min() < -100 and m.weight.max() > 100          # the int8 range, not all zeros
    assert len(np.unique(m.weight)) > 100
    f = nn.Conv2d(4, 8, 3, seed=3)                                 # the same draw, scaled and rounded
    np.testing.assert_array_equal(m.weight, np.rint(f.weight.astype(np.float64) * 127 * np.sqrt(36)))
    lin = nn.Linear(16, 4, dtype=np.int8)
    assert lin.weight.dtype == np.int8 and np.abs(lin.weight).max() > 100
    x = RNG.integers(-8, 8, (1, 4, 5, 5)).astype(np.int8)
    want = t2n(torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)),
                                          torch.from_numpy(m.weight.astype(np.float64)),
                                          torch.from_numpy(m.bias.astype(np.float64))))
    got = m(x)
    assert got.dtype == np.int32 and np.array_equal(got, want)


def test_softmax_of_a_0d_input_is_one():
    x = np.float32(2.0)
    for dim in (0, -1):
        y = npulab.ops.softmax(x, dim, chip=CHIP)
        assert y.shape == () and y.dtype == np.float32
        assert y == t2n(torch.softmax(torch.tensor(2.0), dim)) == 1.0
    assert nn.Softmax(0, chip=CHIP)(np.float16(-3.0)) == 1.0
    with pytest.raises(npulab.ShapeError, match="dim=1 is out of range for a 0-d input"):
        npulab.ops.softmax(x, 1)


def test_npu_places_a_module_and_its_children_on_a_device():
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float16)
    seq = nn.Sequential(nn.Conv2d(3, 4, 3, dtype=np.float16), nn.ReLU())
    assert seq.npu(chip="910b", device_id=1) is seq
    assert [m.chip for m in seq.modules] == ["910b", "910b"] and seq.modules[0].device_id == 1
    seq(x)
    assert seq.modules[0].last_trace.chip.name == "910b"
    assert nn.ReLU().npu().device_id == 0
    with pytest.raises(ArgumentError, match="device_id"):
        nn.ReLU().npu(device_id=-1)
    with pytest.raises(ChipFileError, match="unknown chip"):
        nn.ReLU().npu(chip="nope")
