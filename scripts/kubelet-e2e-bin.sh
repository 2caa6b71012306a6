#!/usr/bin/env bash
# Prints the path of a program of the real-kubelet suite, building it first if needed:
#   scripts/kubelet-e2e-bin.sh              the kubelet-e2e binary (tests/kubelet/cmd/kubelet-e2e)
#   scripts/kubelet-e2e-bin.sh pods|fleet|footprint  a kubelet benchmark (benches/kubelet/<name>), which
#                                           runs its kubelets through kubelet-e2e
# Used by scripts/test-kubelet.sh, scripts/bench-kubelet.sh and scripts/bench-fleet.sh, which
# set PKG_CONFIG_PATH and LD_LIBRARY_PATH to the installed library first. kubelet-e2e links
# the whole kubelet: its first build takes ~2 min on 2 cores once kube-apiserver is built
# (they share ~1 450 packages in Go's build cache). Each is cached outside git, keyed on the
# Go sources of both modules (tests/kubelet, benches/kubelet) and the binding's, their go.sum,
# kcsi.h and the Go version, in ${KCSI_PEERS_CACHE:-~/.cache/kcsi-peers}/kubelet-e2e-<key>/;
# kubelet-e2e links libkcsi.so.1 dynamically, so a library change alone needs no rebuild.
# Progress goes to stderr.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/peers/versions.sh   # GOTOOLCHAIN, KCSI_GO, KCSI_GO_VERSION, KCSI_PEERS_CACHE

prog=${1:-kubelet-e2e}
case $prog in
  kubelet-e2e) module=tests/kubelet pkg=./cmd/kubelet-e2e ;;
  pods|fleet|footprint) module=benches/kubelet pkg=./$prog ;;
  *) echo "kubelet-e2e-bin.sh: no program $prog (want kubelet-e2e, pods, fleet or footprint)" >&2; exit 2 ;;
esac
key=$( { find tests/kubelet benches/kubelet -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort | xargs cat
         cat bindings/go/volumeplugin/go.mod bindings/go/volumeplugin/*.go \
             bindings/go/go.mod bindings/go/*.go bindings/go/*.c bindings/go/*.h include/kcsi.h
         echo "$KCSI_GO_VERSION"; } | sha256sum | cut -c1-16)
BIN=$KCSI_PEERS_CACHE/kubelet-e2e-$key/$prog
if [ ! -x "$BIN" ]; then
  [ "$prog" = kubelet-e2e ] && note=" (first build of the kubelet: ~2 min on 2 cores after the peers, ~7 min without them)"
  echo "--- building $BIN${note:-}" >&2
  start=$SECONDS
  mkdir -p "$(dirname "$BIN")"
  (cd "$module" && "$KCSI_GO" build -o "$BIN.tmp" "$pkg") >&2 || { rm -f "$BIN.tmp"; exit 1; }
  mv "$BIN.tmp" "$BIN"
  echo "--- built in $((SECONDS - start)) s" >&2
else
  echo "--- reusing $BIN" >&2
fi
printf '%s\n' "$BIN"
