"""The labs' machinery: checkers for the exercises and the notebook generator.

* :mod:`npulab.labs.check`: ``check.lab00.largest_buffer(answer)`` and friends, one checker per
  exercise, printing PASS / NOT ATTEMPTED YET / FAIL with a hint;
* :mod:`npulab.labs.notebooks`: ``labs/src/NN_name.md`` -> learner and (executed) solution notebooks
  (``python -m npulab.labs build``);
* ``lab00`` .. ``lab08``: what each lab runs that is longer than a notebook cell should be.
"""
from . import check
from .notebooks import build

__all__ = ["build", "check"]
