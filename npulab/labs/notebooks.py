"""Generate the lab notebooks from their sources.

``labs/src/NN_name.md`` (jupytext MyST markdown) is the only file an author edits. From it:

* ``labs/NN_name.ipynb``: the learner notebook, every solution region replaced by a blank
  (:mod:`npulab.labs.regions`), stored without outputs;
* ``labs/solutions/NN_name.ipynb``: the solution notebook, executed here (nbclient, widget
  state stored) so that it carries outputs the notebook tests compare against.

Everything written is deterministic: cell ids are numbered, no timing metadata is kept, widget
model ids are renumbered in order of appearance, and the labs seed their randomness. So
regenerating from unchanged sources reproduces the committed notebooks, which is what the
parity test checks (``tests/labs/test_labs.py``).
"""
from __future__ import annotations

import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..errors import ArgumentError
from .regions import RegionError, has_region, split

KERNEL = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE = {"name": "python", "pygments_lexer": "ipython3"}
CELL_TIMEOUT_S = 300
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def repo_labs_dir() -> Path:
    """``labs/`` of the source checkout this package lives in (or of the working directory)."""
    here = Path(__file__).resolve().parents[2] / "labs"
    return here if (here / "src").is_dir() else Path.cwd() / "labs"


def sources(src_dir: Path | None = None) -> list[Path]:
    """The lab sources, in lab order: ``NN_name.md`` files of ``labs/src``."""
    src_dir = Path(src_dir) if src_dir else repo_labs_dir() / "src"
    found = sorted(p for p in src_dir.glob("*.md") if re.match(r"^\d\d_\w+\.md$", p.name))
    if not found:
        raise ArgumentError(f"no lab sources (NN_name.md) in {src_dir}")
    return found


def _read(path: Path):
    import jupytext
    return jupytext.read(path, fmt="md:myst")


def _finish(nb, name: str, variant: str):
    """Deterministic ids and metadata; jupytext's own metadata dropped."""
    import nbformat
    nb.metadata = nbformat.from_dict({
        "kernelspec": dict(KERNEL),
        "language_info": dict(LANGUAGE),
        "npulab": {"lab": name, "variant": variant, "source": f"src/{name}.md"},
    })
    for i, cell in enumerate(nb.cells):
        cell.id = f"{name[:2]}-{i:03d}"
        cell.metadata = nbformat.from_dict({k: v for k, v in cell.metadata.items() if k == "tags"})
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def make(path: Path):
    """(learner notebook, solution notebook) of one source, unexecuted."""
    import copy
    name = Path(path).stem
    src = _read(path)
    learner, solution = copy.deepcopy(src), copy.deepcopy(src)
    for i, cell in enumerate(src.cells):
        if cell.cell_type != "code":
            if has_region(cell.source):
                raise RegionError(f"{path.name}, cell {i}: solution markers belong in code cells")
            continue
        later = "\n".join(c.source for c in src.cells[i + 1:] if c.cell_type == "code")
        sol, learn = split(cell.source, f"{path.name}, cell {i}", later)
        solution.cells[i].source, learner.cells[i].source = sol, learn
    return _finish(learner, name, "learner"), _finish(solution, name, "solution")


def _renumber_widgets(nb, name: str) -> None:
    """Replace the random widget model ids (the keys of the stored widget state) with ids
    numbered in the order the kernel created the widgets, everywhere they occur."""
    import json

    import nbformat
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    if not state:
        nb.metadata.pop("widgets", None)
        return
    text = json.dumps(nb, sort_keys=True)
    ids = {old: uuid.uuid5(uuid.NAMESPACE_URL, f"npulab/{name}/{i}").hex for i, old in enumerate(state)}
    text = re.sub("|".join(map(re.escape, ids)), lambda m: ids[m.group(0)], text)
    fresh = nbformat.from_dict(json.loads(text))
    nb.cells, nb.metadata = fresh.cells, fresh.metadata


def kernel_env() -> dict:
    """The kernel's environment: figures inline whatever the caller's MPLBACKEND, and a fixed
    hash seed so nothing depends on set or dict-of-str ordering."""
    return {**os.environ, "MPLBACKEND": "module://matplotlib_inline.backend_inline",
            "PYTHONHASHSEED": "0"}


def execute(nb, cwd: Path, name: str = "lab"):
    """Run every cell in a fresh kernel (working directory ``cwd``); returns seconds taken."""
    from nbclient import NotebookClient
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL["name"], record_timing=False,
                   store_widget_state=True, resources={"metadata": {"path": str(cwd)}}
                   ).execute(env=kernel_env())
    seconds = time.perf_counter() - t0
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = coalesce_streams(cell.outputs)
    _renumber_widgets(nb, name)
    return seconds


def write(nb, path: Path) -> None:
    import nbformat
    path.parent.mkdir(parents=True, exist_ok=True)
    text = nbformat.writes(nb)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


@dataclass
class Built:
    name: str
    learner: Path
    solution: Path | None      # None: not written (run=False)
    seconds: float | None      # time to execute the solution notebook (None: not executed)


def build(src_dir: Path | None = None, out_dir: Path | None = None, *, only: list[str] | None = None,
          run: bool = True, log=print) -> list[Built]:
    """Write the learner and solution notebooks of every lab source (or those named in ``only``,
    by number or name) into ``out_dir`` (default ``labs/``) and ``out_dir/solutions``.

    The solution notebooks execute with ``out_dir`` as working directory, so a build into a
    temporary directory behaves as one into ``labs/``. With ``run=False`` only the learner
    notebooks are written (a solution notebook is never stored without its outputs).
    """
    labs = repo_labs_dir()
    src_dir = Path(src_dir) if src_dir else labs / "src"
    out_dir = Path(out_dir) if out_dir else labs
    built = []
    for path in sources(src_dir):
        name = path.stem
        if only and not any(name == o or name[:2] == o or name[3:] == o for o in only):
            continue
        learner, solution = make(path)
        lpath, spath = out_dir / f"{name}.ipynb", out_dir / "solutions" / f"{name}.ipynb"
        write(learner, lpath)
        seconds = None
        if run:
            seconds = execute(solution, out_dir, name)
            write(solution, spath)
        if log:
            took = (f" and solutions/{spath.name}, solution executed in {seconds:.1f} s"
                    if seconds is not None else " (solution not executed, not written)")
            log(f"{name}: {lpath.name}{took}")
        built.append(Built(name, lpath, spath if run else None, seconds))
    return built


# -- parity: is a committed notebook what its source generates? ----------------------------
SANITIZE_FILE = "nbval_sanitize.cfg"
SKIP_DATA = ("image/png", "image/jpeg", "application/vnd.jupyter.widget-view+json")


def sanitize_patterns(path: Path | None = None) -> list[tuple[str, str]]:
    """The regex/replace pairs of ``labs/nbval_sanitize.cfg`` (nbval's format)."""
    path = Path(path) if path else repo_labs_dir() / SANITIZE_FILE
    return re.findall(r"^regex: (.*)$\n^replace: (.*)$", path.read_text(encoding="utf-8"), flags=re.MULTILINE)


def coalesce_streams(outputs: list) -> list:
    """Join consecutive stream outputs of the same stream (how a print arrives in pieces
    depends on when the kernel flushed)."""
    out = []
    for o in outputs:
        if (o.get("output_type") == "stream" and out and out[-1].get("output_type") == "stream"
                and out[-1].get("name") == o.get("name")):
            out[-1]["text"] = _text(out[-1]["text"]) + _text(o["text"])
        else:
            out.append(o)
    return out


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def output_texts(cell, patterns=()) -> list[str]:
    """A code cell's outputs as text, as nbval compares them: images and widget views left
    out, the sanitize patterns applied."""
    out = []
    for o in coalesce_streams([dict(o) for o in cell.get("outputs", [])]):
        if o.get("output_type") == "stream":
            parts = [f"{o.get('name')}: {_text(o.get('text', ''))}"]
        elif o.get("output_type") == "error":
            parts = [f"error: {o.get('ename')}: {o.get('evalue')}"]
        else:
            parts = [f"{k}: {_text(v)}" for k, v in sorted(o.get("data", {}).items()) if k not in SKIP_DATA]
        for text in parts:
            for regex, replace in patterns:
                text = re.sub(regex, replace, text)
            out.append(text)
    return out


def compare(committed, fresh, *, outputs: bool = False, patterns=()) -> list[str]:
    """Differences between a committed notebook and a freshly generated one: cell types,
    sources and tags, and (``outputs=True``) the text outputs after sanitizing."""
    diffs = []
    if len(committed.cells) != len(fresh.cells):
        diffs.append(f"{len(committed.cells)} cells committed, {len(fresh.cells)} generated")
    for i, (a, b) in enumerate(zip(committed.cells, fresh.cells)):
        for what in ("cell_type", "source"):
            if _text(a.get(what)) != _text(b.get(what)):
                diffs.append(f"cell {i}: {what} differs: committed {_text(a.get(what))[:60]!r}, "
                             f"generated {_text(b.get(what))[:60]!r}")
        if a.get("metadata", {}).get("tags") != b.get("metadata", {}).get("tags"):
            diffs.append(f"cell {i}: tags differ")
        if outputs and a.get("cell_type") == "code":
            ta, tb = output_texts(a, patterns), output_texts(b, patterns)
            if ta != tb:
                diffs.append(f"cell {i}: outputs differ: committed {ta!r:.200}, generated {tb!r:.200}")
    return diffs
