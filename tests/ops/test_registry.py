"""The scheduling layer: registry, dispatcher cache, unsupported op types."""
import numpy as np
import pytest

import npulab
from npulab.ops import registry
from npulab.ops.registry import dispatch, dispatcher, lookup


def test_builtin_op_types_are_registered():
    assert {"Add", "BatchMatMul"} <= set(npulab.ops.op_types())
    assert lookup("Add").family == "math" and lookup("BatchMatMul").family == "matmul"


def test_unknown_op_type_error():
    with pytest.raises(npulab.UnsupportedOpError) as info:
        dispatch("Conv4d", np.zeros(4, np.float16))
    msg = str(info.value)
    assert msg.startswith("Op type not supported: Conv4d")
    assert "custom operator" in msg and "register(" in msg
    assert isinstance(info.value, NotImplementedError)


def test_dispatcher_caches_the_tiling_per_shape():
    dispatcher.clear()
    x = np.ones(3000, np.float16)
    z1, t1 = dispatch("Add", x, x, chip="teach")
    z2, t2 = dispatch("Add", x, x, chip="teach")
    assert (dispatcher.misses, dispatcher.hits) == (1, 1)
    dispatch("Add", x[:2000], x[:2000], chip="teach")                # new shape: new tiling
    dispatch("Add", x, x, chip="910")                                 # new chip: new tiling
    assert dispatcher.misses == 3 and len(dispatcher) == 3
    assert np.array_equal(z1, z2) and t1.cycles == t2.cycles


def test_dispatch_runs_matmul_through_its_registered_tiling():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 40, 24)).astype(np.float32)
    b = rng.standard_normal((1, 24, 56)).astype(np.float32)
    c, trace = dispatch("BatchMatMul", a, b, chip="teach")
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    assert trace.summary()["cube_flops"] == 2 * 40 * 24 * 56


def test_registering_twice_is_an_error():
    with pytest.raises(ValueError, match="already registered"):
        registry.register("Add", "math", lambda *a: None, lambda *a: None)


def test_a_custom_op_can_be_registered_and_dispatched():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Tiling:
        block_dim: int = 1

    def run(arrays, tiling, chip, mode, scale=1.0):
        return arrays[0] * scale, None

    registry.register("ScaleForTest", "custom", lambda specs, chip, scale=1.0: Tiling(), run)
    try:
        out, _ = dispatch("ScaleForTest", np.arange(4.0), scale=2.0)
        assert list(out) == [0, 2, 4, 6]
    finally:
        registry._REGISTRY.pop("ScaleForTest")


def test_dispatch_checks_inputs_and_attributes():
    x = np.ones((2, 8), np.float32)
    cases = [
        (lambda: dispatch("Add", x), r"^Add: takes 2 input arrays \(x, y\), got 1"),
        (lambda: dispatch("LayerNorm", x, x, x, x, normalized_shape=(8,)),
         r"^LayerNorm: takes 1 to 3 input arrays \(x, weight \(optional\), bias \(optional\)\), got 4"),
        (lambda: dispatch("Gelu", x, approximate="erf"), r"^Gelu: approximate must be 'none' or 'tanh'.*'erf'"),
        (lambda: dispatch("Relu", x, approximate="tanh"), "^Relu: unknown attribute approximate; its attributes are"),
        (lambda: dispatch("SoftmaxV2", x, axis=1), "^SoftmaxV2: unknown attribute axis; its attributes are dim"),
        (lambda: dispatch("Conv2D", x[None, None, None], x[None, None, None]),
         "^Conv2D: missing attributes stride, pads, dilation, groups"),
        (lambda: dispatch("MaxPool", x[None, None], kernel_size=[2, 2]), "^MaxPool: attribute values must be hashable"),
        (lambda: dispatch("LayerNorm", x, x[0], normalized_shape=(8,)),
         "^layer_norm: 1 optional arrays .* announce 0"),
    ]
    for call, match in cases:
        with pytest.raises(npulab.ShapeError, match=match):
            call()


@pytest.mark.parametrize("call, shape", [
    (lambda x: npulab.ops.relu(x), (0, 5)),
    (lambda x: npulab.ops.gelu(x, "tanh"), (0, 5)),
    (lambda x: npulab.ops.silu(x), (0, 5)),
    (lambda x: npulab.ops.softmax(x, 0), (0, 5)),
    (lambda x: npulab.ops.softmax(x[:, :0].reshape(5, 0), -1), (5, 0)),
    (lambda x: npulab.ops.add(x, x[:1]), (0, 5)),
    (lambda x: npulab.ops.mul(x, x), (0, 5)),
    (lambda x: npulab.ops.layer_norm(x, 5), (0, 5)),
    (lambda x: npulab.ops.matmul(x, np.ones((5, 3), x.dtype)), (0, 3)),
    (lambda x: npulab.ops.linear(x, np.ones((3, 5), x.dtype)), (0, 3)),
    (lambda x: npulab.ops.max_pool2d(x.reshape(0, 1, 5, 1), 1), (0, 1, 5, 1)),
])
def test_an_empty_input_gives_an_empty_output_without_a_launch(call, shape):
    dispatcher.clear()
    x = np.ones((0, 5), np.float16)
    y = call(x)
    assert y.shape == shape and y.dtype == np.float16
    assert dispatcher.misses == 0                   # no tiling was asked for: nothing launched
    with pytest.raises(npulab.ShapeError, match=r"int16.*float16(,| or| or both) float32"):
        call(x.astype(np.int16))                    # and the inputs are still checked


def test_empty_output_shapes_match_torchs():
    import torch
    x = np.ones((0, 4), np.float32)
    assert npulab.ops.softmax(x, 1).shape == tuple(torch.softmax(torch.from_numpy(x), 1).shape)
    assert npulab.ops.relu(x).shape == tuple(torch.relu(torch.from_numpy(x)).shape)
    w = np.ones((4, 2), np.float32)
    assert npulab.ops.matmul(x, w).shape == tuple((torch.from_numpy(x) @ torch.from_numpy(w)).shape)
    with pytest.raises(npulab.ShapeError, match=r"^matmul: K = 0"):
        npulab.ops.matmul(np.ones((3, 0), np.float32), np.ones((0, 2), np.float32))
