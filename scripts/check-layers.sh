#!/usr/bin/env bash
# Fails when a source file breaks kcsi's layer rules (see docs/architecture.md). The layers,
# top down: ffi, node (the node agent), volume, host (src/host.rs), then csi, kube and disk.
#   1. the core never uses the C shell (`crate::ffi` only inside src/ffi);
#   2. nothing below the node agent uses it (`crate::node` only in src/node and src/ffi);
#   3. the host uses no volume operation, and csi, kube and disk use neither the host nor the
#      volume operations (`crate::host`, `crate::volume`);
#   4. the CSI side (src/csi) knows no Kubernetes types (`k8s_openapi`, `kube`, `crate::kube`);
#   5. Kubernetes access (src/kube) knows no CSI types (`crate::csi`, `proto`);
#   6. only the disk layer (src/disk) composes kubelet paths: no other file names a path
#      component of the kubelet's layout as a string literal.
# Comments and `#[cfg(test)]` modules are not checked (tests build fixtures freely).
set -uo pipefail
cd "$(dirname "$0")/.."

bad=0
# code_of FILE: the file without comment lines and without its trailing test module.
code_of() {
  awk '/^#\[cfg\(test\)\]/ { exit } { print FILENAME ":" FNR ":" $0 }' "$1" |
    grep -vE '^[^:]+:[0-9]+:[[:space:]]*//'
}
forbid() { # DESCRIPTION REGEX FILE...
  local what=$1 re=$2; shift 2
  local f hits
  for f in "$@"; do
    hits=$(code_of "$f" | grep -E "$re") || continue
    printf '%s\n' "$hits" | sed "s|\$|   <- $what|" >&2
    bad=1
  done
}

mapfile -t core < <(find src -name '*.rs' -not -path 'src/ffi/*' | sort)
mapfile -t below_node < <(find src -name '*.rs' -not -path 'src/ffi/*' -not -path 'src/node/*' | sort)
mapfile -t below_host < <(find src/csi src/kube src/disk -name '*.rs' | sort)
mapfile -t csi < <(find src/csi -name '*.rs' | sort)
mapfile -t kube < <(find src/kube -name '*.rs' | sort)
mapfile -t not_disk < <(find src -name '*.rs' -not -path 'src/disk/*' | sort)

forbid "the core must not use the C shell" '(crate|super)::ffi\b' "${core[@]}"
forbid "nothing below the node agent uses it" '(crate|super)::node\b' "${below_node[@]}"
forbid "the host uses no volume operation" '(crate|super)::volume\b' src/host.rs
forbid "csi, kube and disk use neither the host nor the volume operations" \
  'crate::(host|volume)\b' "${below_host[@]}"
forbid "the CSI side knows no Kubernetes types" '\b(k8s_openapi|kube)::|crate::kube\b' "${csi[@]}"
forbid "Kubernetes access knows no CSI types" 'crate::csi\b|\bproto::' "${kube[@]}"
forbid "only src/disk composes kubelet paths" \
  '"(pods|plugins|plugins_registry|volumes|volumeDevices|globalmount|vol_data\.json|kubernetes\.io~csi|staging|publish)"' \
  "${not_disk[@]}"

if [ $bad != 0 ]; then echo "layer rules broken (scripts/check-layers.sh)" >&2; exit 1; fi
echo "layer rules hold"
