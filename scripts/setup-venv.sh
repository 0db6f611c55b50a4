#!/usr/bin/env bash
# Create .venv (if missing) and install npulab into it, editable, with the given extras.
# Needs nothing but python3. Usage: scripts/setup-venv.sh "dev,torch"
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dev}"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# The build needs Cython and numpy; installing them first lets the editable build reuse them.
.venv/bin/python -m pip install --quiet "setuptools>=69" wheel "Cython>=3.0" "numpy>=1.26"
.venv/bin/python -m pip install --quiet --no-build-isolation -e ".[${extras}]"
