"""``python -m npulab.labs build [--no-execute] [--only 02] [--src DIR] [--out DIR]`` writes the
notebooks; ``python -m npulab.labs verify`` says whether the committed ones match their sources
(cell sources only, nothing executed; the test suite also compares outputs)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .notebooks import build, compare, make, repo_labs_dir, sources


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m npulab.labs",
                                     description="generate the lab notebooks from labs/src")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help="write labs/NN_name.ipynb and labs/solutions/NN_name.ipynb")
    p.add_argument("--only", nargs="*", help="labs to build, by number or name (default: all)")
    p.add_argument("--src", type=Path, help="the sources (default: labs/src)")
    p.add_argument("--out", type=Path, help="where to write (default: labs)")
    p.add_argument("--no-execute", action="store_true", help="write only the learner notebooks (solutions need executing)")
    v = sub.add_parser("verify", help="do the committed notebooks match their sources?")
    v.add_argument("--src", type=Path, help="the sources (default: labs/src)")
    v.add_argument("--out", type=Path, help="where the notebooks are (default: labs)")
    args = parser.parse_args(argv)
    if args.command == "build":
        build(args.src, args.out, only=args.only, run=not args.no_execute)
        return 0
    return verify(args.src, args.out)


def verify(src: Path | None, out: Path | None) -> int:
    import nbformat
    out = out or repo_labs_dir()
    stale = 0
    for path in sources(src):
        for fresh, committed in zip(make(path), (out / f"{path.stem}.ipynb",
                                                 out / "solutions" / f"{path.stem}.ipynb")):
            if not committed.exists():
                print(f"{committed.name}: missing; run python -m npulab.labs build")
                stale += 1
                continue
            diffs = compare(nbformat.read(committed, as_version=4), fresh)
            stale += bool(diffs)
            for d in diffs[:5]:
                print(f"{committed.relative_to(out)}: {d}")
    print("up to date" if not stale else f"{stale} notebook(s) out of date: run python -m npulab.labs build")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
