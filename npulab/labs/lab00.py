"""Lab 00 (the environment): is everything installed, and does the simulator answer?

:func:`install_check` prints one line per requirement with ``ok`` or what is wrong and how to
fix it. Versions are printed as ``version: X`` so the stored notebook output can mask them.
:func:`copy_input` and :func:`run_copy` run the lab's GM copy
(:mod:`npulab.kernels.examples.gm_copy`) with a :class:`CopyPlan`, the challenge's answer.
"""
from __future__ import annotations

import importlib
import sys

import numpy as np

from ..kernels.examples.gm_copy import CopyPlan, launch_copy

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
          + ("" if good else ": rebuild it with `bash scripts/setup-venv.sh`"))
    ok &= _smoke_test()
    print("everything is in place" if ok else "something is missing: run `bash scripts/setup-venv.sh` "
          "(or `bash scripts/lab.sh`) again")


def _smoke_test() -> bool:
    """z = x + y on the teaching chip, checked against numpy."""
    from .. import ops
    x = np.arange(1000, dtype=np.float16) / 8
    z, trace = ops.add(x, x, chip="teach", return_trace=True)
    good = bool(np.array_equal(z, x + x))
    print(f"{'ok' if good else 'WRONG':8} {'simulator':24} z = x + y on the teaching chip in "
          f"{trace.cycles:,} simulated cycles")
    return good


#: lab 00's copy: this many MiB of fp16 from one GM buffer to another, on the 910
COPY_MIB = 16
COPY_CHIP = "910"


def copy_input(mib: int = COPY_MIB) -> np.ndarray:
    """The lab's copy source: ``mib`` MiB of fp16 (zeros: a timing run never reads values)."""
    return np.zeros(mib * 2**20 // 2, np.float16)


def run_copy(plan: CopyPlan = CopyPlan(), chip: str = COPY_CHIP, mib: int = COPY_MIB) -> None:
    """Time the copy of :func:`copy_input` with ``plan`` and print what it took and how busy
    core 0's copy pipes were (msprof's ``aiv_mte2_ratio`` and ``aiv_mte3_ratio``)."""
    x = copy_input(mib)
    _, tr = launch_copy(x, plan, chip)
    r = tr.pipe_ratios(0)
    print(f"{plan}: {tr.cycles:,} cycles = {tr.us(tr.cycles):.1f} us for {x.nbytes / 2**20:g} MiB; core 0: "
          f"MTE2 busy {r['mte2_ratio']:.0%}, MTE3 busy {r['mte3_ratio']:.0%}")
