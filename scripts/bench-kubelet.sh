#!/usr/bin/env bash
# Pods in the real kubelet, kcsi's plugin and upstream's side by side (figures, never
# assertions; needs root for the drivers' and kubelets' mounts): benches/kubelet/pods starts
# a kube-apiserver + etcd and a node per plugin, times pods with one PVC each to Running and
# torn down, attach-required once per plugin, filesystem and block in ABBA rounds, and
# compares the rounds pair by pair. A failed run, or a node that leaves mounts behind, fails.
#   KCSI_KUBELET_BENCH=<n,..>      pods per benchmark (default 32; 0: none, exit at once)
#   KCSI_KUBELET_BENCH_ARGS=<args> extra arguments for pods (e.g. -bench-rounds 6 -keep)
# scripts/kubelet-e2e-bin.sh builds and caches the kubelet-e2e binary, which runs the nodes'
# kubelets and controllers, and the benchmark program.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
[ "${KCSI_KUBELET_BENCH:-32}" != 0 ] || exit 0
[ "$(id -u)" = 0 ] || { echo "bench-kubelet: FAILED: the kubelets and drivers mount volumes and loop devices: run it as root" >&2; exit 1; }
source scripts/kubelet-setup.sh hostpath registrar attacher etcd apiserver || exit 1

E2E=$(scripts/kubelet-e2e-bin.sh) || exit 1
PODS=$(scripts/kubelet-e2e-bin.sh pods) || exit 1
echo "--- benches/kubelet/pods"
start=$SECONDS
# shellcheck disable=SC2086
"$PODS" -repo "$REPO" -e2e "$E2E" -bench "${KCSI_KUBELET_BENCH:-32}" ${KCSI_KUBELET_BENCH_ARGS:-}
rc=$?
echo "--- benches/kubelet/pods took $((SECONDS - start)) s"
exit $rc
