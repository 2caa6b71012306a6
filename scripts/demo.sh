#!/usr/bin/env bash
# The demo (make demo): a node agent written against libkcsi (examples/python/demo.py, through
# the Python binding) with the plugin watcher on, the real csi-driver-host-path and the real
# node-driver-registrar. The watcher picks the driver up; then one volume is staged,
# published, written and read through the pod's path, measured, unpublished and unstaged,
# each step printed with what kcsi did and how long it took.
# Needs root (the driver bind-mounts). It first builds exactly what it runs, one line per
# step saying what and how long that usually takes: the release library and the `kcsi`
# command (one cargo invocation, `make build`) and, at the same time, the hostpath driver and
# the registrar (Go, cached outside git; nothing else of the test peers). The Go builds fill
# the cores cargo leaves idle (its serial link and LTO steps), so they add little.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
if [ "$(id -u)" != 0 ]; then echo "make demo needs root: the hostpath driver mounts" >&2; exit 1; fi

building() { printf '==> demo: building %s\n' "$*"; }
peers_log=$(mktemp /tmp/kcsi-demo-peers.XXXXXX.log)
building "the real csi-driver-host-path and node-driver-registrar in the background (scripts/peers/build.sh; log $peers_log): about 1 min the first time from an empty Go cache, cached after"
( scripts/peers/build.sh hostpath && scripts/peers/build.sh registrar ) >"$peers_log" 2>&1 &
peers=$!
building "libkcsi.so and the kcsi command (make build, one cargo release build): about 10 min the first time on 2 cores (fetching and compiling the dependencies, then thin LTO); seconds after"
make --no-print-directory build || { kill "$peers" 2>/dev/null; exit 1; }
if ! wait "$peers"; then
  echo "==> demo: building the Go peers failed:" >&2; cat "$peers_log" >&2; exit 1
fi
rm -f "$peers_log"
echo "==> demo: built; running"
echo

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

hostpath=$(scripts/peers/path.sh hostpath)
registrar=$(scripts/peers/path.sh registrar)
# The Python package as the README installs it (pip, into target/python-venv).
python=$(scripts/python-venv.sh)
KCSI_LIB="$repo/target/release/libkcsi.so" \
  "$python" examples/python/demo.py "$work" "$hostpath" "$registrar" "$repo/target/release/kcsi" ||
  { status=$?; for l in "$work"/*.log; do echo "--- $l" >&2; tail -20 "$l" >&2; done; exit $status; }
