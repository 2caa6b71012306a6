#!/usr/bin/env bash
# The demo (make demo): a node agent written against libkcsi (examples/python/demo.py, through
# the Python binding) with the plugin watcher on, the real csi-driver-host-path and the real
# node-driver-registrar. The watcher picks the driver up; then one volume is staged,
# published, written and read through the pod's path, measured, unpublished and unstaged,
# each step printed with what kcsi did and how long it took.
# Needs root (the driver bind-mounts), `make build` and the peers (make demo does both).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=$(mktemp -d /tmp/kcsi-demo.XXXXXX)
cleanup() {
  # Whatever the script left running or mounted, even if it failed half-way.
  if [ -f "$work/pids" ]; then
    while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$work/pids"
    while read -r pid; do
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    done <"$work/pids"
  fi
  awk -v w="$work" '$5 == w || index($5, w "/") == 1 { print $5 }' /proc/self/mountinfo |
    sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

if [ "$(id -u)" != 0 ]; then echo "make demo needs root: the hostpath driver mounts" >&2; exit 1; fi
cargo build --quiet --example create_volume
hostpath=$(scripts/peers/path.sh hostpath)
registrar=$(scripts/peers/path.sh registrar)
KCSI_LIB="$repo/target/release/libkcsi.so" PYTHONPATH="$repo/bindings/python" \
  python3 examples/python/demo.py "$work" "$hostpath" "$registrar" "$repo/target/debug/examples/create_volume" ||
  { status=$?; for l in "$work"/*.log; do echo "--- $l" >&2; tail -20 "$l" >&2; done; exit $status; }
