"""Lab 00 (the environment): is everything installed, and does the simulator answer?

:func:`install_check` prints one line per requirement with ``ok`` or what is wrong and how to
fix it. Versions are printed as ``version: X`` so the stored notebook output can mask them.
"""
from __future__ import annotations

import importlib
import sys

import numpy as np

REQUIRED = [  # (import name, minimum version, what the labs use it for)
    ("numpy", "1.26", "arrays and the numerical reference"),
    ("matplotlib", "3.8", "gantt, occupancy and roofline figures"),
    ("ipywidgets", "8.1", "interactive views"),
]


def _version_tuple(text: str) -> tuple:
    return tuple(int(p) for p in text.split(".")[:2] if p.isdigit())


def info(*args: str) -> None:
    """What ``npulab info [args]`` prints in a terminal (the same function)."""
    from ..cli import main
    main(["info", *args])


def install_check() -> None:
    """Print the state of the installation, a line per requirement."""
    ok = True
    py = ".".join(map(str, sys.version_info[:3]))
    good = sys.version_info >= (3, 11)
    ok &= good
    print(f"{'ok' if good else 'TOO OLD':8} python >= 3.11          version: {py}")
    for name, minimum, why in REQUIRED:
        try:
            mod = importlib.import_module(name)
            version = getattr(mod, "__version__", "0")
            good = _version_tuple(version) >= _version_tuple(minimum)
            state = "ok" if good else "TOO OLD"
        except ImportError:
            good, state, version = False, "MISSING", "-"
        ok &= good
        print(f"{state:8} {name + ' >= ' + minimum:24} version: {version}  ({why})")
    try:
        from .. import _timeline  # noqa: F401
        state, good = "ok", True
    except ImportError:
        state, good = "MISSING", False
    ok &= good
    print(f"{state:8} {'npulab._timeline':24} the compiled (Cython) scheduler"
          + ("" if good else ": rebuild with `python setup.py build_ext --inplace`"))
    ok &= _smoke_test()
    print("everything is in place" if ok else "something is missing: rerun scripts/setup-venv.sh")


def _smoke_test() -> bool:
    """z = x + y on the teaching chip, checked against numpy."""
    from .. import ops
    x = np.arange(1000, dtype=np.float16) / 8
    z, trace = ops.add(x, x, chip="teach", return_trace=True)
    good = bool(np.array_equal(z, x + x))
    print(f"{'ok' if good else 'WRONG':8} {'simulator':24} z = x + y on the teaching chip in "
          f"{trace.cycles:,} simulated cycles")
    return good
