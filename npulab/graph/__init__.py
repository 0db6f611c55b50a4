"""The graph layer: whole models as graphs of operators (GE's graph engine).

* :mod:`~.types`: :class:`TensorType` and :class:`Node`; :mod:`~.ir`: :class:`Graph` (build,
  infer, validate, dump);
* :mod:`~.schema`: the op schemas (kernel ops through the registry's shape inference, structural
  ops here); :mod:`~.forms`: the framework-level op set importers write (MatMul, RealDiv, Erf,
  ReduceMean, GatherV2, Select, Slice, ...);
* :mod:`~.reference`: the reference executor, each op's meaning in numpy (the goldens for kernel
  ops), the oracle of importers, passes and compiled models;
* :mod:`~.serial`: a graph as JSON plus ``.npz``;
* :mod:`~.importers`: :func:`from_torch` (torch.export) and :func:`from_onnx`, and
  :func:`parse_input_shape` (ATC's ``--input_shape``);
* :mod:`~.passes`: the optimisation passes (GE's graph fusion, UB fusion and graph passes by
  their switch-file names), the fusion switch file and :func:`~.passes.optimize`;
* :mod:`~.memory`: the static memory plan (liveness, in-place reuse, alignment, the static and
  dynamic modes), its offset planners in :mod:`~.offsets`;
* :mod:`~.zoo`: ResNet-50, BERT-base and GPT-2 small with seeded weights and torch's names;
* :mod:`~.compile`: the compile step (ATC's analog: passes, lowering, tilings, memory plan) and
  the offline model file it writes (:mod:`~.offline`).

The runtime that loads and runs a compiled model is :mod:`npulab.runtime`.
"""
from .ir import Graph
from .types import DTYPES, FORMATS, Node, TensorType
from .schema import infer_node, known_op_types
from .serial import load, save
from . import reference
from .importers import from_onnx, from_torch, parse_input_shape

__all__ = ["DTYPES", "FORMATS", "Graph", "Node", "TensorType", "infer_node", "known_op_types", "load", "save", "reference",
           "from_onnx", "from_torch", "parse_input_shape"]
