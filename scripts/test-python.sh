#!/usr/bin/env bash
# Python suite: the kcsi package (bindings/python) pip-installed from this checkout into a venv
# (target/python-venv), used through libkcsi.so exactly as a host would, against real CSI driver
# processes, a real kube-apiserver and the real external-attacher. Extra arguments go to pytest.
# KCSI_REQUIRE_ROOT=1 (the default here): a test that cannot run (not root) fails, not skips.
set -euo pipefail
cd "$(dirname "$0")/.."

# The release library the package loads and the `kcsi` command the attach test creates its
# volume with (target/release unless KCSI_LIB names another library).
if { [ -z "${KCSI_LIB:-}" ] && [ ! -e target/release/libkcsi.so ]; } || [ ! -x target/release/kcsi ]; then
  make --no-print-directory build
fi
export KCSI_LIB=${KCSI_LIB:-$PWD/target/release/libkcsi.so}
# The peers the tests start must be built (`make peers`; scripts/test.sh does it).
for peer in hostpath registrar etcd apiserver attacher; do scripts/peers/path.sh "$peer" >/dev/null || exit 1; done

# The package as a user installs it, in target/python-venv.
PYTHON=$(scripts/python-venv.sh)
"$PYTHON" -c 'import pytest' 2>/dev/null ||
  "$PYTHON" -m pip install --quiet --disable-pip-version-check pytest

# The ctypes signatures must be the ones generated from the committed header.
python3 bindings/python/gen_signatures.py --check
export KCSI_REQUIRE_ROOT=${KCSI_REQUIRE_ROOT:-1}
exec "$PYTHON" -m pytest -q -p no:cacheprovider tests/python "$@"
