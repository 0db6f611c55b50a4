"""The model zoo: whole networks written in the graph IR, as the torch models define them, with
seeded random weights (no download) whose constants carry the torch ``state_dict`` names, so a
test can load them into the torch model and compare. ``zoo.build(name, **config)`` builds one;
``zoo.names()`` lists them."""
from __future__ import annotations

from ...errors import GraphError
from .resnet import resnet50

_BUILDERS = {"resnet50": resnet50}


def names() -> list[str]:
    """The models the zoo can build."""
    return sorted(_BUILDERS)


def build(name: str, **config):
    """Build the zoo model ``name`` (a :class:`~npulab.graph.ir.Graph`) with ``config``."""
    if name not in _BUILDERS:
        raise GraphError(f"zoo: no model '{name}'; the zoo has {', '.join(names())}")
    return _BUILDERS[name](**config)
