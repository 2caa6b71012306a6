#!/usr/bin/env bash
# The kcsi Python package as a user installs it (README: `pip install ./bindings/python`),
# pip-installed from this checkout into a venv, target/python-venv; prints the venv's python.
# The venv sees the system's site-packages (so a pytest installed there is used); Debian's own
# Python has venv only with its python3-venv package, installed here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=target/python-venv
if [ ! -x "$VENV/bin/python" ]; then
  if ! python3 -m venv --system-site-packages "$VENV" 2>/dev/null; then
    rm -rf "$VENV"
    echo "--- installing python3-venv (apt-get) for python3 -m venv" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; } >&2
    python3 -m venv --system-site-packages "$VENV"
  fi
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps ./bindings/python >&2
echo "$PWD/$VENV/bin/python"
