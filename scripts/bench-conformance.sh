#!/usr/bin/env bash
# Figures, not assertions: `kcsi conformance` (every case) against the real csi-driver-host-path,
# next to csi-sanity's Node suite on the same driver, each run ROUNDS times (default 3), the
# driver plain and with -enable-attach -attach-limit=2 (KCSI: another kcsi binary). Needs root and the peers.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
kcsi=${KCSI:-$PWD/target/release/kcsi}
hostpath=$(scripts/peers/path.sh hostpath)
sanity=$(scripts/peers/path.sh csi-sanity)
work=$(mktemp -d /tmp/kcsi-bench-conformance-XXXXXX)
pid=
stop() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  pid=
}
trap 'stop; rm -rf "$work"' EXIT

start() { # start FLAGS...: a fresh hostpath driver on $work/csi.sock
  stop
  rm -rf "$work/state" "$work/csi.sock"
  "$hostpath" --endpoint="unix://$work/csi.sock" --nodeid=bench-node --statedir="$work/state" \
    --drivername=hostpath.csi.k8s.io "$@" >"$work/driver.log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do [ -S "$work/csi.sock" ] && return; sleep 0.05; done
  echo "hostpath did not start: $(cat "$work/driver.log")" >&2; exit 1
}

now() { date +%s.%N; }

conformance() { # conformance LABEL FLAGS: one timed run, its counts from --json
  local t0 t1 out cmd
  # The suite runs the driver itself (so the crash.kill-* cases can restart it): ours stops.
  stop
  rm -f "$work/csi.sock"
  cmd="exec '$hostpath' --endpoint='unix://$work/csi.sock' --nodeid=bench-node --statedir='$work/state' --drivername=hostpath.csi.k8s.io $2 >>'$work/driver.log' 2>&1"
  t0=$(now)
  out=$("$kcsi" --json conformance --endpoint "unix://$work/csi.sock" --driver-command "$cmd" || true)
  t1=$(now)
  python3 -c 'import json,sys
r = json.loads(sys.argv[1]); v = [c["verdict"] for c in r["cases"]]
print("%-34s %6.2f s  %d cases: %d pass, %d fail, %d skip" % (sys.argv[2], float(sys.argv[4]) - float(sys.argv[3]),
      len(v), v.count("pass"), v.count("fail"), v.count("skip")))' "$out" "$1" "$t0" "$t1"
}

sanity_node() { # sanity_node LABEL: one timed csi-sanity Node suite
  local t0 t1 out
  rm -rf "$work/mnt" "$work/stg"
  t0=$(now)
  out=$("$sanity" --csi.endpoint="$work/csi.sock" --csi.mountdir="$work/mnt" \
    --csi.stagingdir="$work/stg" --ginkgo.focus="Node Service" --ginkgo.no-color 2>&1 || true)
  t1=$(now)
  ran=$(grep -oE 'Ran [0-9]+ of [0-9]+ Specs' <<<"$out" | head -1)
  verdict=$(grep -oE '^(SUCCESS|FAIL)!' <<<"$out" | head -1)
  python3 -c 'import sys; print("%-34s %6.2f s  %s, %s" % (sys.argv[1], float(sys.argv[3]) - float(sys.argv[2]), sys.argv[4], sys.argv[5]))' \
    "$1" "$t0" "$t1" "${ran:-no spec count}" "${verdict:-no verdict}"
}

echo "kcsi conformance vs. csi-sanity (Node Service), hostpath $(basename "$(dirname "$hostpath")"), $rounds rounds, $(nproc) cores"
for flags in "" "-enable-attach -attach-limit=2"; do
  rm -rf "$work/state"
  for r in $(seq "$rounds"); do
    conformance "kcsi conformance ${flags:-(plain)} #$r" "$flags"
  done
  # shellcheck disable=SC2086
  start $flags
  for r in $(seq "$rounds"); do
    sanity_node "csi-sanity Node ${flags:-(plain)} #$r"
  done
done
