"""The IR's values and operators: :class:`TensorType` (a value's shape, dtype and storage format)
and :class:`Node` (one operator: op type, the values it reads and writes, its attributes), which
:class:`npulab.graph.ir.Graph` holds and :mod:`npulab.graph.schema` types."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import GraphError

#: storage formats a value may have (data/FACTS.md, Data formats)
FORMATS = ("ND", "NCHW", "NHWC", "NCDHW", "NC1HWC0", "NDC1HWC0", "FRACTAL_NZ", "FRACTAL_Z")
#: dtypes a value may have
DTYPES = ("float16", "float32", "bfloat16", "int8", "int32", "int64", "bool", "uint8")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:/\-]*$")


@dataclass(frozen=True)
class TensorType:
    """A value's shape (whole numbers, 0 allowed), dtype (a name of :data:`DTYPES`) and format."""
    shape: tuple
    dtype: str
    format: str = "ND"

    def __post_init__(self):
        shape = tuple(self.shape)
        if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise GraphError(f"tensor shape {self.shape!r}: each dimension must be a whole number >= 0")
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))
        dtype = str(np.dtype(self.dtype)) if self.dtype != "bfloat16" else "bfloat16"
        if dtype not in DTYPES:
            raise GraphError(f"tensor dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        object.__setattr__(self, "dtype", dtype)
        if self.format not in FORMATS:
            raise GraphError(f"tensor format {self.format!r} is not one of {', '.join(FORMATS)}")

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * (2 if self.dtype == "bfloat16" else np.dtype(self.dtype).itemsize)

    def __str__(self) -> str:
        fmt = "" if self.format == "ND" else f" {self.format}"
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]{fmt}"

    def to_json(self) -> dict:
        return {"shape": list(self.shape), "dtype": self.dtype, "format": self.format}

    @classmethod
    def from_json(cls, d: dict) -> "TensorType":
        return cls(tuple(d["shape"]), d["dtype"], d.get("format", "ND"))


@dataclass
class Node:
    """One operator of a graph. ``inputs`` and ``outputs`` name values ("" for an optional input
    left out); ``attrs`` holds JSON values (numbers, strings, booleans, lists of them)."""
    name: str
    op_type: str
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)

    def where(self) -> str:
        """How errors name this node: its name and op type."""
        return f"node '{self.name}' ({self.op_type})"


def check_attr(node_name: str, key: str, value) -> None:
    ok = (isinstance(value, (bool, int, float, str)) or value is None or
          (isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value)))
    if not ok:
        raise GraphError(f"node '{node_name}': attribute {key}={value!r} is not a JSON value (a number, "
                         f"string, boolean, None or a list of them)")


__all__ = ["FORMATS", "DTYPES", "TensorType", "Node", "check_attr", "NAME"]
