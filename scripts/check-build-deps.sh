#!/usr/bin/env bash
# What building npulab needs besides python3, checked before the venv is made:
#   Python 3.11 or newer       (pyproject.toml's requires-python)
#   the venv module            (python3-venv on Debian: ensurepip)
#   a C compiler and Python.h  (the Cython core in pyx/ compiles: gcc, python3-dev)
# Installs what is missing with apt-get when run as root on a Debian machine; otherwise says
# what to install and stops.
set -euo pipefail

if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "check-build-deps: npulab needs Python 3.11 or newer; python3 is $(python3 --version 2>&1)" >&2
    exit 1
fi
missing=()
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || missing+=(gcc)
python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || missing+=(python3-dev)

if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
elif [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "check-build-deps: apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    echo "check-build-deps: building npulab needs ${missing[*]}; not root with apt-get, so not" \
         "installing. Run: sudo apt-get install ${missing[*]}" >&2
    exit 1
fi
