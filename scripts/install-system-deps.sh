#!/usr/bin/env bash
# Install the system packages the book and browser tests need on a Debian machine:
#   chromium   driven by Python playwright in tests/book/test_book.py and tests/labs/test_lab_browser.py
#   nodejs npm used by book/build.sh to install the book's browser assets (MathJax, the
#              ipywidgets embed script, RequireJS) from the npm registry
# Installs with apt-get only what is missing, and only as root; otherwise it says what to install.
set -euo pipefail

CHROMIUM=/usr/bin/chromium
missing=()
[ -x "$CHROMIUM" ] || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-system-deps: chromium, node and npm present"
elif [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "install-system-deps: apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" fonts-dejavu-core >/dev/null
    [ -x "$CHROMIUM" ] && echo "install-system-deps: $("$CHROMIUM" --version 2>/dev/null || echo chromium)"
else
    echo "install-system-deps: missing ${missing[*]}; not root with apt-get, so not installing." \
         "Run: sudo apt-get install ${missing[*]} (the book and browser tests need them)" >&2
fi
