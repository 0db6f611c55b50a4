"""A graph as JSON plus ``.npz``: the structure (inputs, nodes, attributes, types, outputs) as a
JSON document, the constants as arrays, read back with ``allow_pickle=False`` (never pickled).

* :func:`to_json` / :func:`from_json`: the document and the arrays, in memory;
* :func:`save` / :func:`load`: ``PATH.json`` and ``PATH.npz`` on disk.

The document has a ``format`` name and a ``version``; a document of another format or version,
a constant missing from the arrays, or one of a dtype the IR does not have, is refused with a
:class:`~npulab.errors.GraphError` that says so.
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

from ..errors import GraphError
from .ir import Graph
from .types import TensorType

FORMAT = "npulab-graph"
VERSION = 1


def to_json(g: Graph) -> tuple[dict, dict]:
    """(document, arrays): the graph's structure as JSON values and its constants by name."""
    doc = {
        "format": FORMAT, "version": VERSION, "name": g.name,
        "inputs": [{"name": v, **g.types[v].to_json()} for v in g.inputs],
        "constants": [{"name": v, "format": g.types[v].format} for v in g.constants],
        "nodes": [{"name": n.name, "op_type": n.op_type, "inputs": list(n.inputs),
                   "outputs": list(n.outputs), "attrs": n.attrs} for n in g.nodes],
        "types": {v: t.to_json() for v, t in g.types.items() if v not in g.constants and v not in g.inputs},
        "outputs": list(g.outputs),
    }
    return doc, dict(g.constants)


def from_json(doc: dict, arrays) -> Graph:
    """The graph of a document from :func:`to_json` and its arrays (a dict or an open npz)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise GraphError(f"not an npulab graph document (format {doc.get('format') if isinstance(doc, dict) else None!r}, "
                         f"expected {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise GraphError(f"graph document version {doc.get('version')!r}; this npulab reads version {VERSION}")
    try:
        g = Graph(doc["name"])
        for d in doc["inputs"]:
            g.input(d["name"], d["shape"], d["dtype"], d.get("format", "ND"))
        for d in doc["constants"]:
            if d["name"] not in arrays:
                raise GraphError(f"constant '{d['name']}' is missing from the arrays")
            g.constant(d["name"], arrays[d["name"]], d.get("format", "ND"))
        for d in doc["nodes"]:
            g.node(d["op_type"], d["inputs"], name=d["name"], outputs=list(d["outputs"]), **d["attrs"])
        for v, t in doc["types"].items():
            g.types[v] = TensorType.from_json(t)
        g.output(*doc["outputs"])
    except (KeyError, TypeError) as exc:
        raise GraphError(f"graph document '{doc.get('name')}' is malformed: {exc!r}") from None
    return g


def save(g: Graph, path) -> tuple[Path, Path]:
    """Write ``PATH.json`` and ``PATH.npz``; returns both paths."""
    path = Path(path)
    doc, arrays = to_json(g)
    jpath, npath = path.with_suffix(".json"), path.with_suffix(".npz")
    jpath.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    npath.write_bytes(buf.getvalue())
    return jpath, npath


def load(path) -> Graph:
    """Read a graph written by :func:`save` (``allow_pickle=False``)."""
    path = Path(path)
    try:
        doc = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        with np.load(path.with_suffix(".npz"), allow_pickle=False) as arrays:
            return from_json(doc, {k: arrays[k] for k in arrays.files})
    except FileNotFoundError as exc:
        raise GraphError(f"graph file {exc.filename} does not exist") from None
    except (json.JSONDecodeError, ValueError) as exc:
        if isinstance(exc, GraphError):
            raise
        raise GraphError(f"graph files {path}.json / .npz cannot be read: {exc}") from None


__all__ = ["FORMAT", "VERSION", "to_json", "from_json", "save", "load"]
