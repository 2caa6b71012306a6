#!/usr/bin/env bash
# Python suite: the kcsi ctypes package (bindings/python) used through libkcsi.so exactly as a
# host would, against real CSI driver processes. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

# The release library the package loads (target/release/libkcsi.so unless KCSI_LIB is set).
if [ -z "${KCSI_LIB:-}" ] && [ ! -e target/release/libkcsi.so ]; then
  make --no-print-directory build
fi
# The peers the tests start (the real hostpathplugin and node-driver-registrar) must be built
# (`make peers`; scripts/test.sh does it).
for peer in hostpath registrar; do scripts/peers/path.sh "$peer" >/dev/null || exit 1; done
# pytest when missing: pip where the Python allows it, else (a Debian system Python refuses
# pip, PEP 668) Debian's own package.
if ! python3 -c 'import pytest' 2>/dev/null; then
  python3 -m pip install --quiet pytest 2>/dev/null ||
    { command -v apt-get >/dev/null && echo "--- installing pytest (apt-get python3-pytest)" &&
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pytest >/dev/null; } ||
    { echo "pytest is missing and neither pip nor apt-get could install it" >&2; exit 1; }
fi

# The ctypes signatures must be the ones generated from the committed header.
python3 bindings/python/gen_signatures.py --check
exec python3 -m pytest -q -p no:cacheprovider tests/python "$@"
