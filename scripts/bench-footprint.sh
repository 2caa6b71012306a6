#!/usr/bin/env bash
# What kcsi's plugin costs the kubelet and the attach/detach controller in memory, beside
# upstream's plugin (figures, never assertions; needs root for the drivers' and kubelets'
# mounts): benches/kubelet/footprint runs one pod on an attach-required CSI volume per plugin
# on a kube-apiserver with Node,RBAC, reads both processes' /proc/<pid>/smaps while it runs,
# and prints the medians by mapping (the binary, libkcsi.so, other files, anonymous) and the
# threads. A failed run, or a node that leaves mounts behind, fails.
#   KCSI_FOOTPRINT_ARGS=<args>  extra arguments for footprint (e.g. -steady 5m -keep)
# scripts/kubelet-e2e-bin.sh builds and caches the kubelet-e2e binary and the benchmark.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
[ "$(id -u)" = 0 ] || { echo "bench-footprint: FAILED: the kubelets and drivers mount volumes and loop devices: run it as root" >&2; exit 1; }
source scripts/kubelet-setup.sh hostpath registrar attacher etcd apiserver || exit 1

E2E=$(scripts/kubelet-e2e-bin.sh) || exit 1
FOOTPRINT=$(scripts/kubelet-e2e-bin.sh footprint) || exit 1
echo "--- benches/kubelet/footprint"
# shellcheck disable=SC2086
exec "$FOOTPRINT" -repo "$REPO" -e2e "$E2E" ${KCSI_FOOTPRINT_ARGS:-}
