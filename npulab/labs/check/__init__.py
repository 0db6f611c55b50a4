"""The checkers behind the labs' check cells: ``check.lab00.on_chip_mib(on_chip_mib)``.

A checker never raises. It prints one of three verdicts:

* ``PASS  <exercise>: ...`` with what the answer means (and, for a performance exercise, the
  learner's simulated cycles and the target);
* ``NOT ATTEMPTED YET  <exercise>: ...`` for an untouched blank (a name still bound to ``...``,
  or a function whose body is still ``...``), so a learner can run a whole notebook first;
* ``FAIL  <exercise>`` with expected vs got and a hint naming the concept to revisit.

Performance exercises pass on correctness first, then on simulated cycles: at most
``PERF_SLACK`` (150%) of the reference solution's cycles.

Each checker is a grading function decorated with :func:`exercise`; the decorated object is
what a notebook calls (it prints), its ``.grade(answer)`` returns the :class:`Verdict` (what the
tests call), and :data:`REGISTRY` lists every exercise. ``check.labNN`` holds lab NN's checkers,
each with the typical mistakes it recognises; what they share is here: the verdicts
(:func:`passed`, :func:`failed`, :func:`not_attempted`, :func:`perf_verdict`), the screens an
answer passes before it is run (:func:`screen_function`, :func:`screen_class`,
:func:`whole_numbers`, :func:`pipe_named`, :func:`is_blank`, :func:`is_empty_function`,
:func:`same_code`) and the FAIL of a kernel that raised (:func:`stopped`). A check that compares
numbers holds them to the golden of :mod:`npulab.ops.golden`.
"""
from __future__ import annotations

import dis
import functools
import math
import numbers
import sys
from dataclasses import dataclass, field

import numpy as np

from ...sim.isa import TRACK_NAMES, Pipe

PERF_SLACK = 1.5          # a performance answer may take up to 150% of the reference's cycles

PASS, NOT_ATTEMPTED, FAIL = "pass", "not attempted", "fail"
_HEAD = {PASS: "PASS", NOT_ATTEMPTED: "NOT ATTEMPTED YET", FAIL: "FAIL"}


@dataclass
class Verdict:
    """What a checker concluded. ``lines`` follow the one-line headline."""
    status: str
    summary: str
    expected: str | None = None
    got: str | None = None
    hint: str | None = None
    lines: list[str] = field(default_factory=list)

    def render(self, exercise: str) -> str:
        out = [f"{_HEAD[self.status]}  {exercise}: {self.summary}"]
        if self.expected is not None:
            out.append(f"  expected: {self.expected}")
        if self.got is not None:
            out.append(f"  got:      {self.got}")
        out += [f"  {ln}" for ln in self.lines]
        if self.hint:
            out.append(f"  hint: {self.hint}")
        return "\n".join(out)

    @property
    def passed(self) -> bool:
        return self.status == PASS


def passed(summary: str, *lines: str) -> Verdict:
    return Verdict(PASS, summary, lines=list(lines))


def failed(summary: str, *, expected=None, got=None, hint: str, lines=()) -> Verdict:
    return Verdict(FAIL, summary, expected, got, hint, list(lines))


def not_attempted(what: str = "replace the ... with your answer") -> Verdict:
    return Verdict(NOT_ATTEMPTED, f"{what}, then run this cell again.")


@dataclass(frozen=True)
class Exercise:
    lab: str           # "00"
    name: str          # "on_chip_mib"
    concept: str       # what a failure sends the learner back to
    performance: bool  # graded on cycles too
    key: tuple = ()    # the reference answer's key tokens, as its solution code writes them
    challenge: bool = False   # the lab's closing challenge (a performance target, no one-line fix)


#: Every exercise, by "lab.name" (e.g. "00.on_chip_mib"), in definition order.
REGISTRY: dict[str, Exercise] = {}


def exercise(lab: str, concept: str, performance: bool = False, key: tuple = (), challenge: bool = False):
    """Register a grading function ``f(answer) -> Verdict`` as the checker of one exercise.

    ``key`` names the reference answer's key tokens, each as the solution region writes it
    (``"// (2 * 2)"``, ``"'in_x'"``): the labs' tests hold that none of them is printed or
    stated above the exercise, so the answer has to be reasoned out, not copied. ``challenge``
    marks the lab's closing challenge.

    The returned callable prints the verdict and returns None (a check cell shows only the
    text); ``.grade(answer)`` returns the Verdict. An exception from the learner's code becomes
    a FAIL naming it, never an error in the notebook.
    """
    def deco(fn):
        ex = Exercise(lab, fn.__name__, concept, performance, tuple(key), challenge)
        REGISTRY[f"{lab}.{ex.name}"] = ex

        def grade(answer) -> Verdict:
            try:
                v = fn(answer)
            except Exception as exc:                     # the learner's code raised
                v = failed(f"your answer raised {type(exc).__name__}",
                           got=f"{type(exc).__name__}: {exc}",
                           hint=f"read the error above; revisit {concept}.")
            if v.status == FAIL and v.hint and "revisit" not in v.hint:
                v.hint = f"{v.hint} (revisit: {concept})"
            return v

        @functools.wraps(fn)
        def check(answer) -> None:
            sys.stdout.write(grade(answer).render(ex.name) + "\n")   # one write: one stream output
            sys.stdout.flush()

        check.grade = grade
        check.exercise = ex
        return check
    return deco


# -- helpers the checkers share -------------------------------------------------------------
def is_blank(answer) -> bool:
    """An untouched top-level blank: the name is still bound to ``...``."""
    return answer is Ellipsis


_SAME_OP = {"LOAD_METHOD": "LOAD_ATTR"}   # the compiler picks either for obj.f(...)


def _instructions(code) -> list:
    out = []
    for ins in dis.get_instructions(code):
        if ins.opname in ("NOP", "RESUME", "CACHE"):
            continue
        opname = _SAME_OP.get(ins.opname, ins.opname)
        arg = ins.argval
        if hasattr(arg, "co_code"):
            arg = ("<code>", tuple(_instructions(arg)))
        elif ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs:
            arg = None                                   # offsets shift when NOPs differ
        out.append((opname, arg if isinstance(arg, (str, int, float, bool, type(None), tuple))
                    else repr(arg)))
    return out


def same_code(f, g) -> bool:
    """Do two functions compile to the same instructions (ignoring line numbers and the NOP a
    bare ``...`` leaves behind)?"""
    try:
        return _instructions(f.__code__) == _instructions(g.__code__)
    except AttributeError:
        return False


def _empty():
    pass


def is_empty_function(fn) -> bool:
    """A function whose body is still the blank (``...``, ``pass`` or only a docstring)."""
    return callable(fn) and hasattr(fn, "__code__") and same_code(fn, _empty)


def as_number(answer) -> float | None:
    if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
        return None
    x = float(answer)
    return x if math.isfinite(x) else None


def close(a: float, b: float, rel: float = 1e-3) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def ratio_is(got: float, want: float, factor: float, rel: float = 1e-3) -> bool:
    """Is ``got`` off from ``want`` by exactly ``factor`` (a typical slip)?"""
    return want != 0 and close(got, want * factor, rel)


def screen_function(fn, name: str, what: str = "function") -> Verdict | None:
    """Before running an answer that must be the learner's function ``name``: a FAIL when it is
    not callable (it was called, or something else was passed), NOT ATTEMPTED while its body is
    still the blank; None when there is a function to grade."""
    if not callable(fn):
        return failed(f"the answer should be your {what}", expected="a function", got=repr(fn),
                      hint=f"pass {name} itself, without calling it.")
    if is_empty_function(fn):
        return not_attempted(f"write the body of {name}")
    return None


def screen_class(cls, base: type, base_name: str, example: str) -> Verdict | None:
    """Before running an answer that must be the learner's kernel class (``example``, a subclass
    of ``base``, which the notebook calls ``base_name``): a FAIL when it is not; None when it is."""
    if isinstance(cls, type) and issubclass(cls, base):
        return None
    return failed("the answer should be your kernel class", expected=f"a subclass of {base_name}",
                  got=repr(cls), hint=f"pass the class ({example}), not an instance.")


def stopped(err: Exception, hints: dict, where: str = "") -> Verdict:
    """The FAIL of a learner's kernel that raised ``err``, with the hint ``hints`` gives for its
    type ({error type: hint}); ``where`` names the case ("M=16, ...: ")."""
    hint = next(h for kind, h in hints.items() if isinstance(err, kind))
    return failed(f"{where}the kernel stopped with {type(err).__name__}", got=f"{type(err).__name__}: {err}",
                  hint=hint)


def whole_numbers(answer, n: int) -> tuple | None:
    """``answer`` as a tuple of ``n`` ints when it is a tuple or list of ``n`` whole numbers (a
    tiling recipe), else None; a bool is not a number here."""
    if not isinstance(answer, (tuple, list)) or len(answer) != n:
        return None
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in answer):
        return None
    return tuple(int(v) for v in answer)


def pipe_named(name: str) -> Pipe | None:
    """The pipe a learner named: its ISA name ("V"), its gantt track ("VECTOR") or its Ascend C
    constant ("PIPE_V"), in any case; None for anything else."""
    up = name.strip().upper()
    return next((p for p in Pipe if p != Pipe.ALL and up in (p.name, TRACK_NAMES[p], f"PIPE_{p.name}")), None)


#: the hint of a cube tiling with one buffer at some level (L1, L0, L0C)
ONE_BUFFER_HINT = "with one buffer at a level its copies and the cube take turns: use 2 at every level."


def perf_verdict(cycles: int, reference: int, what: str, hint: str) -> Verdict:
    """Correct already; now the cycles: pass within PERF_SLACK x the reference."""
    target = math.floor(reference * PERF_SLACK)
    line = f"your kernel: {cycles:,} cycles; reference {reference:,}; target <= {target:,} (150%)"
    if cycles <= target:
        return passed(f"{what}, in {cycles:,} simulated cycles (target <= {target:,}, "
                      f"150% of the reference's {reference:,}).")
    return failed(f"{what}, but too slow", expected=f"<= {target:,} cycles", got=f"{cycles:,} cycles",
                  hint=hint, lines=[line])


from . import lab00, lab01, lab02, lab03, lab04, lab05, lab06, lab07, lab08, lab09, lab15  # noqa: E402  (the labs register their exercises)

__all__ = ["PERF_SLACK", "REGISTRY", "Exercise", "Verdict", "exercise", "is_blank",
           "is_empty_function", "same_code", "screen_function", "screen_class", "stopped", "whole_numbers",
           "pipe_named", "perf_verdict", "ONE_BUFFER_HINT", "lab00", "lab01", "lab02", "lab03", "lab04", "lab05", "lab06",
           "lab07", "lab08", "lab09", "lab15"]
