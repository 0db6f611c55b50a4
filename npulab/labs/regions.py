"""Solution regions in a lab's code cells, and the blanks that replace them for the learner.

A region is every line between a ``# BEGIN SOLUTION`` and an ``# END SOLUTION`` line (each
alone on its line, at the indentation of the code it encloses). The solution notebook keeps the
region's code and drops the two marker lines; the learner notebook gets a blank instead::

    # BEGIN SOLUTION                        # YOUR CODE HERE (about 2 lines)
    ub = chip.buffers.ub              ->    largest = ...
    largest = max(...)
    # END SOLUTION

* at the top level of a cell the blank assigns ``...`` to every name the solution assigns that
  later code uses (its helpers stay private), so the check cell after it can tell an untouched
  blank (``answer is ...``) from a wrong answer;
* inside a function body the blank is a bare ``...``: the function then does nothing, which
  the checkers recognise (:func:`npulab.labs.check.is_empty_function`).

"About N lines" counts the region's lines that are neither blank nor comments.
"""
from __future__ import annotations

import ast
import re
import textwrap

from ..errors import NpuError

BEGIN = "# BEGIN SOLUTION"
END = "# END SOLUTION"
_MARKER = re.compile(r"^(\s*)(# (?:BEGIN|END) SOLUTION)\s*$")


class RegionError(NpuError, ValueError):
    """A lab source has a malformed solution region (unbalanced, nested, or no blank possible)."""


def _regions(lines: list[str], where: str) -> list[tuple[int, int, str]]:
    """(begin line index, end line index, indentation) of each region, checked for balance."""
    out, open_at = [], None
    for i, line in enumerate(lines):
        m = _MARKER.match(line)
        if not m:
            if BEGIN in line or END in line:
                raise RegionError(f"{where}, line {i + 1}: a solution marker must be alone on its "
                                  f"line, got {line.strip()!r}")
            continue
        indent, marker = m.groups()
        if marker == BEGIN:
            if open_at is not None:
                raise RegionError(f"{where}, line {i + 1}: {BEGIN} inside the region opened on "
                                  f"line {open_at[0] + 1}; regions do not nest")
            open_at = (i, indent)
        else:
            if open_at is None:
                raise RegionError(f"{where}, line {i + 1}: {END} without a {BEGIN}")
            if indent != open_at[1]:
                raise RegionError(f"{where}, line {i + 1}: {END} is indented differently from its "
                                  f"{BEGIN} on line {open_at[0] + 1}")
            out.append((open_at[0], i, indent))
            open_at = None
    if open_at is not None:
        raise RegionError(f"{where}, line {open_at[0] + 1}: {BEGIN} is never closed by {END}")
    return out


def code_lines(body: list[str]) -> int:
    """Lines a learner writes: neither blank nor comment-only."""
    return sum(1 for ln in body if ln.strip() and not ln.strip().startswith("#"))


def assigned_names(code: str) -> list[str]:
    """Names bound at the top level of ``code`` by assignments, in order, without repeats."""
    names: list[str] = []

    def add(target):
        if isinstance(target, ast.Name):
            if target.id not in names:
                names.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                add(t)

    for node in ast.parse(code).body:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                add(t)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            add(node.target)
    return names


def blank(body: list[str], indent: str, where: str, later: str | None = None) -> list[str]:
    """The learner's lines for one region. ``later``: the code that runs after the region; when
    given, only the names it uses are blanked (helpers of the solution stay private)."""
    n = code_lines(body)
    head = f"{indent}# YOUR CODE HERE (about {n} line{'s' if n != 1 else ''})"
    if indent:
        return [head, f"{indent}..."]
    try:
        names = assigned_names(textwrap.dedent("\n".join(body)))
    except SyntaxError as exc:
        raise RegionError(f"{where}: the solution region does not parse: {exc}") from None
    if not names:
        raise RegionError(f"{where}: a top-level solution region must assign the answer to a name "
                          f"(the blank becomes 'name = ...'); this one assigns nothing")
    if later is not None:
        used = [n for n in names if re.search(rf"\b{re.escape(n)}\b", later)]
        names = used or names
    return [head] + [f"{name} = ..." for name in names]


def split(source: str, where: str = "cell", later: str | None = None) -> tuple[str, str]:
    """(solution source, learner source) of one code cell. ``later``: the code of the cells
    after this one (see :func:`blank`)."""
    lines = source.split("\n")
    regions = _regions(lines, where)
    if not regions:
        return source, source
    sol, learn, pos = [], [], 0
    for b, e, indent in regions:
        sol += lines[pos:b] + lines[b + 1:e]
        after = None if later is None else "\n".join(lines[e + 1:]) + "\n" + later
        learn += lines[pos:b] + blank(lines[b + 1:e], indent, f"{where}, line {b + 1}", after)
        pos = e + 1
    sol += lines[pos:]
    learn += lines[pos:]
    return "\n".join(sol), "\n".join(learn)


def has_region(source: str) -> bool:
    return any(_MARKER.match(ln) for ln in source.split("\n"))
