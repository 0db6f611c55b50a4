"""An exercise's answer is reasoned out, not copied: the key tokens of each reference answer
(``check.exercise(..., key=...)``) are part of its solution code, and none of them is printed
or stated above the exercise, neither in the lab's prose, in the code a learner sees, nor in
the outputs the solution notebook stores. A token that the learner's blank itself shows (the
stub's function name, a name the stub assigns) is no key: it gives nothing away.

Whitespace is normalised (a run of spaces or a line break reads as one space) and the match is
case-sensitive, so ``2 * 2`` in a code cell above and ``2  *  2`` in the answer are the same.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from npulab.labs import notebooks
from npulab.labs.check import REGISTRY
from npulab.labs.regions import code_lines, has_region

LABS = Path(__file__).resolve().parents[2] / "labs"
CHECK_CALL = re.compile(r"check\.lab(\d\d)\.(\w+)\(")


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _outputs(cell) -> str:
    """Everything a stored code cell shows: streams, text, HTML and errors."""
    parts = []
    for o in cell.get("outputs", []):
        parts.append(o.get("text", ""))
        for mime, value in o.get("data", {}).items():
            if mime.startswith("text/"):
                parts.append(value if isinstance(value, str) else "".join(value))
        parts += o.get("traceback", [])
    return "\n".join(parts)


def _exercises(src: Path, stored=None):
    """For each check cell of one lab: (exercise key, text shown above its first solution cell,
    its solution code, its learner code). ``stored``: the executed solution notebook (default:
    the committed one)."""
    learner, solution = notebooks.make(src)
    source = notebooks._read(src)
    stored = stored or nbformat.read(LABS / "solutions" / f"{src.stem}.ipynb", as_version=4)
    assert len(stored.cells) == len(source.cells), f"{src.stem}: regenerate the notebooks"
    out, shown, pending = [], [], []
    for i, cell in enumerate(source.cells):
        if cell.cell_type == "code" and has_region(cell.source):
            pending.append(i)
        m = CHECK_CALL.search(cell.source) if cell.cell_type == "code" else None
        if m and pending:
            above = " ".join(shown[:2 * pending[0]])
            sol = " ".join(solution.cells[j].source for j in pending)
            blank = " ".join(learner.cells[j].source for j in pending)
            out.append((f"{m.group(1)}.{m.group(2)}", above, sol, blank))
            pending = []
        text = learner.cells[i].source
        shown += [text, _outputs(stored.cells[i]) if cell.cell_type == "code" else ""]
    return out


LAB_SOURCES = [p for p in notebooks.sources() if p.name[:2] in {ex.lab for ex in REGISTRY.values()}]
FOUND = {key: rest for src in LAB_SOURCES for key, *rest in _exercises(src)}


def given_away(key: str, tokens, found=FOUND) -> list[str]:
    """What is wrong with ``tokens`` as the key of exercise ``key`` (nothing: an empty list)."""
    if key not in found:
        return [f"{key}: no solution region before its check cell"]
    above, sol, blank = (_flat(t) for t in found[key])
    problems = []
    for token in tokens:
        tok = _flat(token)
        if not tok.strip():
            problems.append(f"{key}: an empty key token")
        elif tok not in sol:
            problems.append(f"{key}: key token {token!r} is not in the reference solution")
        elif tok in blank:
            problems.append(f"{key}: key token {token!r} is shown by the learner's blank itself")
        elif tok in above:
            problems.append(f"{key}: the answer's key token {token!r} is printed or stated above it")
    return problems


def test_key_tokens_are_the_answers_and_are_not_given_above():
    keyed = {k: ex.key for k, ex in REGISTRY.items() if ex.key}
    problems = [p for k, tokens in sorted(keyed.items()) for p in given_away(k, tokens)]
    assert not problems, "\n".join(problems)


TOY = """---
jupytext:
  text_representation: {extension: .md, format_name: myst}
kernelspec: {display_name: Python 3, language: python, name: python3}
---

# Toy lab

Each queue gets two slots of `ub // 4` bytes.

```{code-cell} ipython3
print("tile =", 4096 // 4)
```

```{code-cell} ipython3
def tile_of(ub):
    # BEGIN SOLUTION
    return ub // 4
    # END SOLUTION
```

```{code-cell} ipython3
check.lab99.tile(tile_of)
```

```{code-cell} ipython3
# BEGIN SOLUTION
slots = 2 * 3
# END SOLUTION
```

```{code-cell} ipython3
check.lab99.slots(slots)
```
"""


def test_a_token_given_away_is_caught(tmp_path):
    src = tmp_path / "99_toy.md"
    src.write_text(TOY)
    stored = notebooks.make(src)[1]
    stored.cells[1].outputs = [nbformat.v4.new_output("stream", text="tile = 1024\n")]
    found = {key: rest for key, *rest in _exercises(src, stored)}
    assert sorted(found) == ["99.slots", "99.tile"]
    assert given_away("99.tile", ["ub // 4"], found) == [
        "99.tile: the answer's key token 'ub // 4' is printed or stated above it"]      # the prose
    assert given_away("99.slots", ["1024"], found)[0].endswith("is not in the reference solution")
    assert "printed or stated above" in given_away("99.tile", ["// 4"], found)[0]      # code above
    assert "shown by the learner's blank" in given_away("99.tile", ["def tile_of"], found)[0]
    assert given_away("99.slots", ["2 * 3"], found) == []
    assert given_away("99.other", ["x"], found) == ["99.other: no solution region before its check cell"]
    stored.cells[1].outputs = [nbformat.v4.new_output("stream", text="slots: 2  *  3\n")]
    found = {key: rest for key, *rest in _exercises(src, stored)}
    assert "printed or stated above" in given_away("99.slots", ["2 * 3"], found)[0]     # an output


# -- issue 17's floor for labs 00-08 -------------------------------------------------------
FIRST_LABS = {f"{i:02d}" for i in range(9)}
BY_LAB = {lab: [k for k, ex in REGISTRY.items() if ex.lab == lab] for lab in sorted(FIRST_LABS)}


def test_every_exercise_of_labs_00_to_08_names_its_key_tokens():
    bare = [k for keys in BY_LAB.values() for k in keys if not REGISTRY[k].key]
    assert not bare, f"exercises without key tokens: {bare}"


def test_labs_00_to_08_hold_at_least_45_checked_exercises():
    counts = {lab: len(keys) for lab, keys in BY_LAB.items()}
    assert sum(counts.values()) >= 45, counts
    assert all(n >= 4 for n in counts.values()), counts


def test_each_of_labs_00_to_08_ends_with_one_performance_challenge():
    for lab, keys in BY_LAB.items():
        challenges = [k for k in keys if REGISTRY[k].challenge]
        assert challenges == keys[-1:], f"lab {lab}: one challenge, its last exercise; got {challenges}"
        assert REGISTRY[challenges[0]].performance, f"{challenges[0]}: a challenge has a cycle target"
    assert not [k for k, ex in REGISTRY.items() if ex.challenge and ex.lab not in FIRST_LABS]


def test_learner_code_cells_stay_under_a_dozen_lines():
    long = []
    for src in notebooks.sources():
        learner, _ = notebooks.make(src)
        for i, cell in enumerate(learner.cells):
            n = code_lines(cell.source.split("\n")) if cell.cell_type == "code" else 0
            if n >= 12:
                long.append(f"{src.stem} cell {i}: {n} lines")
    assert not long, long
