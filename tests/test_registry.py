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
