#!/usr/bin/env bash
# Build the offline book into book/_build/html:
#   1. npm install book/package.json (MathJax, the ipywidgets embed script, RequireJS) into
#      book/node_modules, unless that install is already there for this package.json;
#   2. book/prepare.py: copy the executed lab solution notebooks to book/labs/ and the browser
#      assets to book/_build/_assets/ (served as _static/);
#   3. a clean Jupyter Book 1 HTML build.
# Needs the venv made by scripts/setup-venv.sh (or PYTHON=/path/to/python) and node/npm.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
STAMP=book/node_modules/.npulab-package.json  # the package.json the install was made from

if ! cmp -s book/package.json "$STAMP"; then
    command -v npm >/dev/null || {
        echo "book/build.sh: npm is missing (bash scripts/install-system-deps.sh, as root)" >&2
        exit 1
    }
    echo "book/build.sh: npm install (book/package.json)"
    (cd book && npm install --no-package-lock --ignore-scripts --no-audit --no-fund --loglevel=error)
    cp book/package.json "$STAMP"
fi

"$PYTHON" book/prepare.py
# A clean HTML build, so no page of a removed lab lingers in book/_build/html.
rm -rf book/_build/html book/_build/.doctrees book/_build/jupyter_execute
"$PYTHON" -c "from jupyter_book.cli.main import main; main()" build book/ --builder html
