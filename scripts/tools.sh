#!/usr/bin/env bash
# Installs the pinned developer tools kcsi's checks need into a cache outside git and prints
# the bin directory. Nothing is installed by hand: `make` calls this.
set -euo pipefail
CBINDGEN_VERSION=0.29.4
root=${KCSI_TOOLS_CACHE:-$HOME/.cache/kcsi-tools}/cbindgen-$CBINDGEN_VERSION
if [ ! -x "$root/bin/cbindgen" ]; then
  echo "tools: installing cbindgen $CBINDGEN_VERSION into $root" >&2
  cargo install --quiet --locked cbindgen --version "$CBINDGEN_VERSION" --root "$root" >&2
fi
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt >&2
echo "$root/bin"
