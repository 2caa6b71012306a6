#!/usr/bin/env bash
# Runs every kcsi test, as CI does: lint, header freshness, Rust (unit + integration against
# real peers), Python (ctypes through libkcsi.so), C (header, dlopen, ASAN, valgrind), the
# fuzz targets (a few seconds each), Go, and kcsi inside the real kubelet compared with
# upstream's plugin, and the volume plugin under the real Podman.
# Needs root (real mounts, loop devices). Prints one summary line at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "kcsi tests mount filesystems and loop devices: run as root" >&2; exit 2; }

# Each suite's output is also kept in target/test-logs/<suite>.log, so that the end of the run
# (all a CI page may show) can repeat why a suite failed.
LOGS=target/test-logs
mkdir -p "$LOGS"
passed=0; failed=0; failed_names=()
run() {
  local name=$1; shift
  local start=$SECONDS
  echo "=== $name: $*"
  if "$@" 2>&1 | tee "$LOGS/$name.log"; then
    passed=$((passed + 1)); echo "=== $name: ok ($((SECONDS - start)) s)"
  else
    failed=$((failed + 1)); failed_names+=("$name"); echo "=== $name: FAILED ($((SECONDS - start)) s)"
  fi
}

# A cold run writes about 17 GB (docs/performance.md, "Disk"); running out midway fails suites
# with ENOSPC far from the cause, so say it first.
free_gb=$(df -P -BG target | awk 'NR == 2 { sub("G", "", $4); print $4 }')
if [ "${free_gb:-0}" -lt 20 ]; then
  echo "warning: ${free_gb} GB free on the disk of $(pwd)/target; a run from empty caches writes about 17 GB" >&2
fi

# Set-up failures stop everything: nothing below can run without tools and peers.
scripts/tools.sh >/dev/null || { echo "tool installation failed" >&2; exit 1; }
scripts/peers/build.sh || { echo "building the real peers failed" >&2; exit 1; }

run fmt cargo fmt --all -- --check
run clippy cargo clippy --workspace --all-targets -- -D warnings
run header make --no-print-directory check-header
run layers scripts/check-layers.sh
run peers cargo test --workspace --test peer_smoke   # the peers themselves (csi-sanity on hostpath), not kcsi
run rust scripts/test-rust.sh
run build make --no-print-directory build
run python scripts/test-python.sh
run c scripts/test-c.sh
run fuzz scripts/fuzz.sh   # every fuzz target built with fuzz/Cargo.lock, each run 3 s from its seeds
run go scripts/test-go.sh
run kubelet scripts/test-kubelet.sh
run runtime scripts/test-runtime.sh

for name in "${failed_names[@]}"; do
  echo
  echo "--- why $name failed (the matching lines of $LOGS/$name.log):"
  grep -n -E -A10 'FAILED|FAIL:|^FAIL|--- FAIL|error:|differs:|panic|assert|Error' "$LOGS/$name.log" | head -150
done
echo
echo "suites: ${passed} passed, ${failed} failed${failed_names[*]:+ (${failed_names[*]})}"
[ "$failed" = 0 ]
