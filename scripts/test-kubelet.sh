#!/usr/bin/env bash
# Kubelet suite: kcsi inside the real kubelet code (tests/kubelet, see cmd/kubelet-e2e/main.go), against a
# real kube-apiserver + etcd, the real node-driver-registrar and the real hostpath driver (and,
# for the attach scenarios, the real attach/detach controller and external-attacher),
# every scenario also run with upstream's CSI plugin and compared; then the volumeplugin
# package's own tests against the real hostpath driver (and a go vet of benches/upstream, the
# benchmarks beside upstream's plugin that share their environment, so they cannot rot); then
# a short chaos run (kubelet-e2e chaos, kcsi only: KCSI_KUBELET_CHAOS kills, default 20, 0 skips
# it; seed 2, KCSI_KUBELET_CHAOS_SEED sets another; the full run beside upstream is
# `make chaos`, scripts/chaos.sh); then a short run of the pods benchmark
# (scripts/bench-kubelet.sh, benches/kubelet/pods) and of the memory one
# (scripts/bench-footprint.sh, benches/kubelet/footprint; `make bench-footprint` reads a minute).
#   KCSI_KUBELET_BENCH=<n,..> pods in the start/teardown benchmark (default 32; 0 skips it)
#   KCSI_KUBELET_FOOTPRINT=0  skip the memory benchmark
#   KCSI_KUBELET_GO_TESTS=0   skip the volumeplugin package's and the suite's Go unit tests (and vets)
#   KCSI_KUBELET_ARGS=<args>  extra arguments for `kubelet-e2e run` (e.g. -scenarios a,b -keep)
# The e2e binary links the whole kubelet (~2 min on 2 cores at first, after the peers):
# scripts/kubelet-e2e-bin.sh builds and caches it.
# Needs root (the kubelet and the drivers mount): without it the suite FAILS, never skips; it
# exports KCSI_REQUIRE_ROOT=1, the flag by which the root-gated Go tests it runs must fail
# rather than skip.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
[ "$(id -u)" = 0 ] || { echo "kubelet: FAILED: the kubelet suite mounts volumes and loop devices: run it as root" >&2; exit 1; }
export KCSI_REQUIRE_ROOT=1
source scripts/peers/versions.sh   # GOTOOLCHAIN, KCSI_GO, KCSI_GO_VERSION, KCSI_PEERS_CACHE
GO=$KCSI_GO
source scripts/kubelet-setup.sh hostpath registrar attacher resizer faultdriver || exit 1

BIN=$(scripts/kubelet-e2e-bin.sh) || exit 1

failed=()
if [ "${KCSI_KUBELET_GO_TESTS:-1}" != 0 ]; then
  echo "--- volumeplugin: go vet, go test; the benchmarks beside upstream (benches/upstream): go vet"
  (cd bindings/go/volumeplugin && "$GO" vet ./... && "$GO" test -count=1 ./...) || failed+=(volumeplugin)
  (cd benches/upstream && "$GO" vet ./...) || failed+=(upstream-bench-vet)
  echo "--- the suite's comparison rules and mount table reader, the benchmarks' statistics: go vet, go test"
  (cd tests/kubelet && "$GO" vet ./... && "$GO" test -count=1 ./pkg/...) || failed+=(kubelet-go-tests)
  (cd benches/kubelet && "$GO" vet ./... && "$GO" test -count=1 ./...) || failed+=(kubelet-bench-go-tests)
fi
echo "--- kubelet-e2e run"
start=$SECONDS
# shellcheck disable=SC2086
"$BIN" run -repo "$REPO" ${KCSI_KUBELET_ARGS:-} || failed+=(kubelet-e2e)
echo "--- kubelet-e2e run took $((SECONDS - start)) s"
if [ "${KCSI_KUBELET_CHAOS:-20}" != 0 ]; then
  seed=${KCSI_KUBELET_CHAOS_SEED:-2}   # a fixed seed: a new one may hit the block leftover docs/crash-safety.md names
  echo "--- kubelet-e2e chaos -kills ${KCSI_KUBELET_CHAOS:-20} -seed $seed -plugins kcsi"
  start=$SECONDS
  "$BIN" chaos -repo "$REPO" -kills "${KCSI_KUBELET_CHAOS:-20}" -seed "$seed" -plugins kcsi || failed+=(kubelet-chaos)
  echo "--- kubelet-e2e chaos took $((SECONDS - start)) s"
fi
scripts/bench-kubelet.sh || failed+=(bench-kubelet)
if [ "${KCSI_KUBELET_FOOTPRINT:-1}" != 0 ]; then
  KCSI_FOOTPRINT_ARGS=${KCSI_FOOTPRINT_ARGS:--steady 10s -every 5s} scripts/bench-footprint.sh || failed+=(bench-footprint)
fi
echo "kubelet: ${failed[*]:+FAILED: ${failed[*]}}${failed[*]:-ok}"
[ ${#failed[@]} -eq 0 ]
