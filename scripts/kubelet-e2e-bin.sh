#!/usr/bin/env bash
# Prints the path of the kubelet-e2e binary (tests/kubelet), building it first if needed;
# used by scripts/test-kubelet.sh and scripts/bench-fleet.sh, which set PKG_CONFIG_PATH and
# LD_LIBRARY_PATH to the installed library first. It links the whole kubelet: its first build
# takes ~2 min on 2 cores once kube-apiserver is built (they share ~1 450 packages in Go's
# build cache). It is cached outside git, keyed on its Go sources (and the binding's), go.sum,
# kcsi.h and the Go version, in
# ${KCSI_PEERS_CACHE:-~/.cache/kcsi-peers}/kubelet-e2e-<key>/; it links libkcsi.so.1
# dynamically, so a library change alone needs no rebuild. Progress goes to stderr.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/peers/versions.sh   # GOTOOLCHAIN, KCSI_GO, KCSI_GO_VERSION, KCSI_PEERS_CACHE

key=$( { cat tests/kubelet/go.mod tests/kubelet/go.sum tests/kubelet/*.go tests/kubelet/stats/*.go tests/kubelet/mountinfo/*.go \
           bindings/go/volumeplugin/go.mod bindings/go/volumeplugin/*.go \
           bindings/go/go.mod bindings/go/*.go bindings/go/*.c bindings/go/*.h include/kcsi.h
         echo "$KCSI_GO_VERSION"; } | sha256sum | cut -c1-16)
BIN=$KCSI_PEERS_CACHE/kubelet-e2e-$key/kubelet-e2e
if [ ! -x "$BIN" ]; then
  echo "--- building $BIN (first build of the kubelet: ~2 min on 2 cores after the peers, ~7 min without them)" >&2
  start=$SECONDS
  mkdir -p "$(dirname "$BIN")"
  (cd tests/kubelet && "$KCSI_GO" build -o "$BIN.tmp" .) >&2 || { rm -f "$BIN.tmp"; exit 1; }
  mv "$BIN.tmp" "$BIN"
  echo "--- built in $((SECONDS - start)) s" >&2
else
  echo "--- reusing $BIN" >&2
fi
printf '%s\n' "$BIN"
