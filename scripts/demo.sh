#!/usr/bin/env bash
# The demo: starts the real csi-driver-host-path driver (hostpathplugin), then runs the example C host program
# (examples/c/host.c), which registers the driver through the C API and prints what kcsi
# learned. Needs `make build` and the `hostpath` peer (make demo does both).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=$(mktemp -d /tmp/kcsi-demo.XXXXXX)
driver_pid=
cleanup() {
  [ -n "$driver_pid" ] && kill "$driver_pid" 2>/dev/null && wait "$driver_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

gcc -std=c11 -Wall -Wextra -Werror -I include examples/c/host.c \
  -L target/release -lkcsi -Wl,-rpath,"$repo/target/release" -o "$work/host"

"$(scripts/peers/path.sh hostpath)" --endpoint="unix://$work/csi.sock" --nodeid=demo-node \
  --statedir="$work/state" --drivername=hostpath.csi.k8s.io --maxvolumespernode=16 \
  >"$work/driver.log" 2>&1 &
driver_pid=$!
for _ in $(seq 100); do [ -S "$work/csi.sock" ] && break; sleep 0.1; done
[ -S "$work/csi.sock" ] || { echo "driver did not start:" >&2; cat "$work/driver.log" >&2; exit 1; }

echo "--- a kubelet-like host registers hostpath.csi.k8s.io at $work/csi.sock through libkcsi"
"$work/host" hostpath.csi.k8s.io "$work/csi.sock" "$work/root" demo-node
