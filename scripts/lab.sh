#!/usr/bin/env bash
# Install npulab into .venv and start JupyterLab on the labs. Extra arguments go to jupyter lab
# (for example --ip=127.0.0.1 --port=8888 --no-browser).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh "dev"
# JupyterLab refuses to run as root unless told; containers and CI machines often are root.
root_flag=()
[ "$(id -u)" -eq 0 ] && root_flag=(--allow-root)
exec .venv/bin/jupyter lab --notebook-dir=labs "${root_flag[@]}" "$@"
