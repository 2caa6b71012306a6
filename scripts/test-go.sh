#!/usr/bin/env bash
# Go suite: `make install` into a private prefix, then, with PKG_CONFIG_PATH and
# LD_LIBRARY_PATH pointing there, in bindings/go: gofmt (also of tests/kubelet and benches), go vet (all build tags), go test -race
# against the real hostpathplugin (volumes created with the installed `kcsi create-volume`; one
# attach and detach through a real kube-apiserver and the real external-attacher), the
# GC-stress test (GOGC=1, -tags gcstress; a -run pattern that matches no test fails the step),
# and the example built both ways (shared: no rpath; -tags kcsi_static: no libkcsi.so.1 needed)
# and run against hostpathplugin.
# bindings/go/kcsiprom (the Prometheus collector, its own module) is vetted and tested too.
# Runs as root: with KCSI_REQUIRE_ROOT=1 a test that cannot run here fails instead of skipping.
#   KCSI_GO_PREFIX=<dir>          install prefix (default: target/go-prefix)
#   KCSI_GCSTRESS_DURATION=<dur>  GC-stress run time (default 10s)
# Runs every step, then fails if any failed. Go module and build caches live in $HOME.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PREFIX=${KCSI_GO_PREFIX:-$REPO/target/go-prefix}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
export GOTOOLCHAIN=local GOPROXY=off   # the package needs nothing but the standard library

make --no-print-directory install PREFIX="$PREFIX" || exit 1
for peer in hostpath registrar attacher etcd apiserver; do
  scripts/peers/path.sh "$peer" >/dev/null 2>&1 || scripts/peers/build.sh "$peer" || exit 1
done
export KCSI_HOSTPATH KCSI_REGISTRAR KCSI_ATTACHER KCSI_CLI=$PREFIX/bin/kcsi KCSI_REQUIRE_ROOT=1
KCSI_HOSTPATH=$(scripts/peers/path.sh hostpath)
KCSI_REGISTRAR=$(scripts/peers/path.sh registrar)
KCSI_ATTACHER=$(scripts/peers/path.sh attacher)
export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LD_LIBRARY_PATH=$PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

WORK=$(mktemp -d /tmp/kcsi-go.XXXXXX)
DRIVER_PID=
cleanup() {
  if [ -n "$DRIVER_PID" ]; then kill "$DRIVER_PID" 2>/dev/null; wait "$DRIVER_PID" 2>/dev/null; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

failed=(); passed=0
step() {
  local name=$1; shift
  echo "--- $name"
  if "$@"; then passed=$((passed + 1)); echo "--- $name: ok"; else failed+=("$name"); echo "--- $name: FAILED"; fi
}

# tests_ran CMD...: runs a verbose `go test -run ...` and fails when it ran no test (go test
# itself passes then, with "no tests to run").
tests_ran() {
  local out rc
  out=$("$@" 2>&1); rc=$?
  printf '%s\n' "$out"
  [ $rc = 0 ] || return $rc
  grep -q '^--- PASS: ' <<<"$out" || { echo "no test matched: $*"; return 1; }
}

gofmt_clean() {
  # The binding, and the Go of the kubelet suite and the benchmarks (vetted by test-kubelet.sh).
  local out; out=$("$(dirname "$GO")/gofmt" -l . ../../tests/kubelet ../../benches) || return 1
  [ -z "$out" ] || { echo "not gofmt'd:"; echo "$out"; return 1; }
}
vet_all() {
  "$GO" vet ./... && "$GO" vet -tags gcstress ./... && "$GO" vet -tags kcsi_static ./...
}
no_rpath() {  # the loader must find libkcsi.so.1 through its search path, never a baked-in dir
  ! readelf -d "$1" | grep -Eq 'RPATH|RUNPATH' && readelf -d "$1" | grep -q 'NEEDED.*libkcsi.so.1'
}
no_libkcsi() {
  ! readelf -d "$1" | grep -q 'libkcsi'
}
run_example() {  # $1: binary; runs with an empty LD_LIBRARY_PATH when $2 = static
  local sock=$WORK/csi.sock out
  if [ -z "$DRIVER_PID" ]; then
    "$KCSI_HOSTPATH" --endpoint="unix://$sock" --drivername=example.csi.kcsi.dev \
      --nodeid=example.csi.kcsi.dev --statedir="$WORK/state" >"$WORK/driver.log" 2>&1 &
    DRIVER_PID=$!
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
  fi
  if [ "${2:-}" = static ]; then
    out=$(env -u LD_LIBRARY_PATH "$1" -endpoint "unix://$sock" -name example.csi.kcsi.dev) || return 1
  else
    out=$("$1" -endpoint "unix://$sock" -name example.csi.kcsi.dev) || return 1
  fi
  echo "$out"
  grep -q '"nodeId":"example.csi.kcsi.dev"' <<<"$out"
}

cd bindings/go
step gofmt gofmt_clean
step vet vet_all
step test "$GO" test -race -count=1 ./...
step gcstress tests_ran env GOGC=1 "$GO" test -race -count=1 -tags gcstress -run GCStress -v .
# kcsiprom is its own module (client_golang): the only step that may fetch modules.
step kcsiprom bash -c "cd kcsiprom && env -u GOPROXY '$GO' vet ./... && env -u GOPROXY '$GO' test -race -count=1 ./..."
step example-build "$GO" build -o "$WORK/register" ./examples/register
step example-no-rpath no_rpath "$WORK/register"
step example-run run_example "$WORK/register"
step example-static-build "$GO" build -tags kcsi_static -o "$WORK/register-static" ./examples/register
step example-static-no-libkcsi no_libkcsi "$WORK/register-static"
step example-static-run run_example "$WORK/register-static" static

echo "go: $passed steps passed${failed[*]:+, FAILED: ${failed[*]}}"
[ ${#failed[@]} -eq 0 ]
