"""The one switch between npulab's Cython core and its readable Python twins.

Every Cython module in ``pyx/`` has a Python twin with the same names and signatures (the
twin is the specification; the parity tests run one test body on both):

=================  =============================  ====================================
what               Cython (side "cython")         Python twin (side "python")
=================  =============================  ====================================
timeline           ``npulab._timeline``           :mod:`npulab.sim.timeline`
instruction stream ``npulab._stream``             :mod:`npulab.sim.stream`
queue calls        ``npulab._queue``              :mod:`npulab.lang.queue`
fractal layouts    ``npulab._layouts``            :mod:`npulab.formats.layouts`
fp16 drains        ``npulab._drains``             :mod:`npulab.formats.drains`
deferred moves     ``npulab._worker``             :mod:`npulab.formats.worker`
L2 replay          ``npulab._l2``                 :mod:`npulab.sim.l2`
=================  =============================  ====================================

The side is "cython" unless the environment variable ``NPULAB_TWINS`` says "python". A launch
reads the switch once, when its device is made, and runs everything on that side: the
timeline, the stream, the queue calls, the byte moves, FixPipe's drains, the L2 replay, and whether the
moves are deferred to the worker thread (only the Cython worker defers)::

    from npulab import twins
    with twins.use("python"):               # every launch in here runs the readable twins
        z = npulab.ops.add(x, y)

The results are the same on both sides: the traces bit for bit, the numbers too, except that
the Cython worker splits each mmad product in two (float32 rounding may differ in the last
bit, see ``npulab.formats.worker.product_into``).
"""
from __future__ import annotations

import contextlib
import os

from .errors import ArgumentError

#: the two sides, the default first
SIDES = ("cython", "python")
#: the environment variable that sets the side npulab starts with
ENV = "NPULAB_TWINS"


def _checked(side, where: str) -> str:
    if side not in SIDES:
        raise ArgumentError(f"{where}: the twins are 'cython' or 'python', got {side!r}")
    return side


_side = _checked(os.environ.get(ENV, SIDES[0]), f"environment variable {ENV}")


def side() -> str:
    """The side a launch made now runs on: "cython" or "python"."""
    return _side


@contextlib.contextmanager
def use(side: str):
    """``with twins.use("python"):`` launches made inside run on that side; the side before
    comes back when the block ends (also on an error). Nests."""
    global _side
    prev, _side = _side, _checked(side, "twins.use")
    try:
        yield side
    finally:
        _side = prev


def pick(cython, python, side: str | None = None):
    """``cython`` or ``python``, whichever ``side`` (default: the switch's) names: how each
    layer turns the side into its own module, class or function."""
    return cython if (_side if side is None else _checked(side, "twins.pick")) == "cython" else python


__all__ = ["SIDES", "ENV", "side", "use", "pick"]
