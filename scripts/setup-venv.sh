#!/usr/bin/env bash
# Create .venv (if missing) and install npulab into it, editable, with the given extras.
# Needs python3 (3.11+); scripts/check-build-deps.sh sees to the rest. Usage: scripts/setup-venv.sh "dev,torch"
# A stamp records what was installed (the extras and a hash of the build files and Cython
# sources); when nothing changed, the install is skipped, so the lab starts at once.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dev}"
bash scripts/check-build-deps.sh         # Python >= 3.11, venv, a C compiler and Python.h
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
stamp=.venv/.npulab-installed
# the stamp holds a hash of the build inputs, then the extras installed with them
hash=$(python3 -c 'import hashlib, pathlib; print(hashlib.sha256(b"".join(p.read_bytes() for p in sorted([*map(pathlib.Path, ["pyproject.toml", "setup.py"]), *pathlib.Path("pyx").glob("*.p*")]))).hexdigest())')
if [ -f "$stamp" ] && [ "$(head -n 1 "$stamp")" = "$hash" ] && .venv/bin/python -c "import npulab._timeline" 2>/dev/null; then
    installed=$(sed -n 2p "$stamp")
    missing=$(python3 -c 'import sys; print(",".join(sorted(set(sys.argv[1].split(",")) - set(sys.argv[2].split(",")))))' "$extras" "$installed")
    [ -z "$missing" ] && exit 0
    extras="$extras,$installed"
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# The build needs Cython and numpy; installing them first lets the editable build reuse them.
.venv/bin/python -m pip install --quiet "setuptools>=69" wheel "Cython>=3.0" "numpy>=1.26"
.venv/bin/python -m pip install --quiet --no-build-isolation -e ".[${extras}]"
printf "%s\n%s\n" "$hash" "$extras" > "$stamp"
