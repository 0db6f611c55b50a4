"""Model importers: a PyTorch module (through ``torch.export``) or an ONNX model as a graph of
the IR, the first step of the ATC analog.

* :func:`from_torch` (:mod:`~.torch`): ATen ops to graph ops, parameters and buffers as
  constants with their ``state_dict`` names, nodes named by their torch module path;
* :func:`from_onnx` (:mod:`~.onnx`): ONNX nodes to graph ops, initializers as constants;
* :func:`parse_input_shape` (:mod:`~.input_shape`): ATC's ``--input_shape`` spelling.

Both importers report every op they cannot map at once, one ``Op type not supported:`` line
each, in one :class:`~npulab.errors.UnsupportedOpError`. torch and onnx are imported only when
an importer is called (the ``torch`` extra).
"""
from .input_shape import parse_input_shape


def from_torch(module, example_inputs, *, input_names=None, name=None):
    """See :func:`npulab.graph.importers.torch.from_torch`."""
    from .torch import from_torch as _from_torch
    return _from_torch(module, example_inputs, input_names=input_names, name=name)


def from_exported(ep, *, input_names=None, name="model"):
    """See :func:`npulab.graph.importers.torch.from_exported` (a ``torch.export`` program, as
    ``torch.export.load`` reads a ``.pt2`` file)."""
    from .torch import from_exported as _from_exported
    return _from_exported(ep, input_names=input_names, name=name)


def from_onnx(model_or_path, input_shape=None):
    """See :func:`npulab.graph.importers.onnx.from_onnx`."""
    from .onnx import from_onnx as _from_onnx
    return _from_onnx(model_or_path, input_shape)


__all__ = ["from_exported", "from_torch", "from_onnx", "parse_input_shape"]
