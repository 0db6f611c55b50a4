"""The package's layers (DESIGN.md, npulab/__init__.py): every import of every module, the ones
inside functions included, points down or sideways within a layer, and no two modules import each
other, directly or through others."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "npulab"

#: lowest first; a module may import its own layer and those below. The Cython modules
#: (``npulab._name``) sit in the layer of their Python twin.
LAYERS = [
    ("errors", "arch", "twins"),
    ("chips",),
    ("_isa", "_layouts", "_drains", "_worker", "formats"),
    ("_timeline", "_stream", "sim"),
    ("_queue", "lang"),
    ("kernels",),
    ("ops",),
    ("graph",),
    ("runtime",),
    ("tools",),
    ("plot", "widgets"),
    ("bench", "labs", "cli", "__main__", "__init__"),
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in ROOT.rglob("*.py")}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The npulab modules ``name`` imports (``from . import x`` counts x when x is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("npulab")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("npulab"):
                target = node.module
            else:
                continue
            subs = {f"{target}.{a.name}" for a in node.names}
            # npulab._name: a Cython module (no .py file)
            found = {s for s in subs if s in known or (target == "npulab" and s.split(".")[1].startswith("_"))}
            out |= found if found else {target}
            if found != subs:
                out.add(target)
    out.discard(name)
    return out


def layer_of(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: {m for m in imports(name, path, known) if m in known or m.startswith("npulab._")}
            for name, path in mods.items()}


def test_every_layer_is_known():
    unknown = sorted({layer_of(m) for m in modules()} - set(RANK))
    assert not unknown, f"modules in no layer of tests/test_layers.py: {unknown}"


def test_imports_point_down():
    bad = []
    for name, targets in graph().items():
        for target in targets:
            if RANK.get(layer_of(target), -1) > RANK[layer_of(name)]:
                bad.append(f"{name} imports {target}")
    assert not bad, "upward imports:\n" + "\n".join(sorted(bad))


def test_no_import_cycles():
    g = graph()
    # a package's __init__ re-exports its modules: importing the package from inside it is not a
    # cycle of concepts, so edges into a package's own __init__ from its members are left out
    edges = {n: {t for t in ts if not (n.startswith(t + ".") and t in g)} for n, ts in g.items()}
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):                                      # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not cycles, "modules that import each other: " + "; ".join(" <-> ".join(c) for c in cycles)
