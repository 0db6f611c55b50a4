"""Assemble the book's sources and offline assets before `jupyter-book build book/`.

Run by book/build.sh after `npm install` has filled book/node_modules. Two steps, each
rebuilding a generated folder from scratch (both are ignored by git):

1. labs: copy the executed solution notebooks labs/solutions/*.ipynb to book/labs/, where the
   table of contents globs them (the book never executes them; their outputs and widget state
   are stored).
2. assets: copy MathJax, the ipywidgets embed script (with its fonts), RequireJS and
   book/assets/require-widgets-config.js to book/_build/_assets/, which _config.yml lists in
   html_static_path so the pages load them from _static/ rather than from a CDN.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

BOOK = Path(__file__).resolve().parent
ROOT = BOOK.parent
NODE = BOOK / "node_modules"
ASSETS = BOOK / "_build" / "_assets"

# (source folder, destination folder under _static, which files to copy; None copies all)
ASSET_COPIES = [
    (NODE / "mathjax/es5", "mathjax", None),
    (NODE / "@jupyter-widgets/html-manager/dist", "jupyter-widgets",
     lambda p: p.name == "embed-amd.js" or p.suffix in {".woff2", ".woff", ".ttf", ".eot", ".svg"}),
    (NODE / "requirejs", "jupyter-widgets", lambda p: p.name == "require.js"),
    (BOOK / "assets", "jupyter-widgets", lambda p: p.name == "require-widgets-config.js"),
]


def copy_labs() -> list[Path]:
    dst = BOOK / "labs"
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir()
    copied = []
    for nb in sorted((ROOT / "labs" / "solutions").glob("*.ipynb")):
        shutil.copy2(nb, dst / nb.name)
        copied.append(dst / nb.name)
    return copied


def copy_assets() -> None:
    shutil.rmtree(ASSETS, ignore_errors=True)
    for src, dst_rel, keep in ASSET_COPIES:
        if not src.is_dir():
            sys.exit(f"prepare.py: {src} is missing; run `bash book/build.sh` (it runs npm install)")
        dst = ASSETS / dst_rel
        if keep is None:
            shutil.copytree(src, dst)
        else:
            dst.mkdir(parents=True, exist_ok=True)
            for f in sorted(src.iterdir()):
                if f.is_file() and keep(f):
                    shutil.copy2(f, dst / f.name)


def main() -> None:
    labs = copy_labs()
    print(f"prepare.py: {len(labs)} lab notebook(s): {', '.join(p.stem for p in labs) or 'none'}")
    copy_assets()
    print(f"prepare.py: offline assets in {ASSETS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
