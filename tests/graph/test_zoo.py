"""The model zoo: the full ResNet-50 matches torchvision's published parameter count; a small
one runs finite on the reference executor at float32 and float16."""
import numpy as np
import pytest

from npulab.errors import GraphError
from npulab.graph import reference, zoo


def _params(g):
    # torch's parameters(): BN running statistics are buffers, not parameters
    return sum(a.size for k, a in g.constants.items() if not k.endswith(("running_mean", "running_var")))


def test_resnet50_full_size_builds_with_torchvisions_parameter_count():
    g = zoo.build("resnet50")
    g.infer()
    g.validate()
    assert _params(g) == 25_557_032
    assert g.op_counts() == {"Conv2D": 53, "BatchNorm": 53, "Relu": 49, "MaxPool": 1, "Add": 16,
                             "ReduceMean": 1, "MatMul": 1}
    assert "layer1.0.downsample.0" in {n.name for n in g.nodes}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_small_resnet_runs_finite(dtype):
    g = zoo.build("resnet50", batch=2, image=32, num_classes=10, dtype=dtype, widths=(8, 16, 32, 64))
    x = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(dtype)
    out = reference.run(g, {"x": x})
    y = np.asarray(out[0] if isinstance(out, (list, tuple)) else next(iter(out.values())))
    assert y.shape == (2, 10) and np.isfinite(y).all() and np.abs(y).max() > 0


def test_unknown_model_is_a_clear_error():
    assert zoo.names() == ["bert-base", "gpt2", "resnet50"]
    with pytest.raises(GraphError, match="no model"):
        zoo.build("vgg")
