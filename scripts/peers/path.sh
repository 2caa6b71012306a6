#!/usr/bin/env bash
# Usage: scripts/peers/path.sh NAME   (NAME: one of KCSI_PEERS in versions.sh, or its binary name)
# Prints the absolute path of the cached peer binary, so tests never hardcode versions.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
source "$HERE/versions.sh"

[ $# -eq 1 ] || { echo "usage: $0 NAME   (one of: ${KCSI_PEERS[*]})" >&2; exit 2; }
bin=$(kcsi_peer_bin "$1")
if [ ! -x "$bin" ]; then
  echo "kcsi peers: '$1' is not built (expected $bin); run scripts/peers/build.sh $(kcsi_peer_key "$1")" >&2
  exit 1
fi
printf '%s\n' "$bin"
