#!/usr/bin/env bash
# Install everything the tests need into .venv (from nothing but python3) and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh "dev,torch"
bash scripts/install-system-deps.sh  # Chromium for the browser tests (apt-get, as root)
exec .venv/bin/python -m pytest "$@"
