#!/usr/bin/env bash
# A node fleet on one API server, kubemark style (figures, never assertions; needs root for
# the drivers' and kubelets' mounts): benches/kubelet/fleet starts N hollow nodes per plugin
# (the real kubelet code with fake containers, the real node-driver-registrar and hostpath
# driver each) on a fresh kube-apiserver + etcd with an audit log, and prints per node the
# API requests while they register, per minute at rest and around an API server restart, the
# Node/CSINode writes, and each kubelet's RSS; kcsi's plugin and upstream's side by side.
#   KCSI_FLEET_NODES=<n>    nodes per plugin (default 20)
#   KCSI_FLEET_ARGS=<args>  extra arguments for fleet (e.g. -rest 5m -keep)
# scripts/kubelet-e2e-bin.sh builds and caches the kubelet-e2e binary (shared with
# test-kubelet.sh), which runs the kubelets, and the fleet program.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
source scripts/kubelet-setup.sh hostpath registrar etcd apiserver || exit 1

E2E=$(scripts/kubelet-e2e-bin.sh) || exit 1
FLEET=$(scripts/kubelet-e2e-bin.sh fleet) || exit 1
# shellcheck disable=SC2086
exec "$FLEET" -repo "$REPO" -e2e "$E2E" -nodes "${KCSI_FLEET_NODES:-20}" ${KCSI_FLEET_ARGS:-}
