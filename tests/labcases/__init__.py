"""Exercise cases by lab, for tests/labs/test_exercises.py, which adds them to its CASES.

``labcases.labNN`` holds lab NN's ``CASES``: exercise key -> (reference answer, [(typical
mistake, words its hint must contain), ...], untouched blank), the references written from the
lab's spec, independently of the checkers. A lab's cases live in its own module so each lab's
exercises can change without touching the others'.
"""
from __future__ import annotations

import importlib
import pkgutil

CASES: dict = {}
for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    _cases = importlib.import_module(f"{__name__}.{_info.name}").CASES
    _twice = set(_cases) & set(CASES)
    assert not _twice, f"labcases.{_info.name} repeats {sorted(_twice)}"
    CASES.update(_cases)
