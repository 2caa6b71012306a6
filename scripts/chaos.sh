#!/usr/bin/env bash
# The chaos run of the real-kubelet suite (issue #39; `kubelet-e2e chaos`, see
# tests/kubelet/pkg/scenarios/chaos.go): for each plugin (kcsi, then upstream's), on one
# schedule drawn from the seed, pods on filesystem, block and attach-required claims come and
# go while the kubelet or the node's driver is SIGKILLed KILLS times and restarted, a share of
# the kills inside a held NodeStage/NodePublish/NodeUnpublish/NodeUnstageVolume (asserted);
# then every pod is deleted and what is stranded is counted and printed, kcsi beside upstream.
# FAILS if kcsi stranded anything or a kill missed the call it was meant to land in.
#   KILLS=<n>    kills per plugin (default 100)
#   SEED=<s>     the schedule's seed (default: the time)
#   KCSI_CHAOS_ARGS=<args>  extra arguments (e.g. -plugins kcsi -keep)
# Environment as scripts/test-kubelet.sh (root; the library in KCSI_GO_PREFIX, default
# target/go-prefix, installed by `make install`, which KCSI_CHAOS_INSTALL=0 skips).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
[ "$(id -u)" = 0 ] || { echo "chaos: FAILED: the kubelet suite mounts volumes and loop devices: run it as root" >&2; exit 1; }
source scripts/peers/versions.sh   # GOTOOLCHAIN, KCSI_GO, KCSI_GO_VERSION, KCSI_PEERS_CACHE
if [ "${KCSI_CHAOS_INSTALL:-1}" = 0 ]; then
  PREFIX=${KCSI_GO_PREFIX:-$PWD/target/go-prefix}
  export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export LD_LIBRARY_PATH=$PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  source scripts/kubelet-setup.sh hostpath registrar attacher resizer faultdriver || exit 1
fi
BIN=$(scripts/kubelet-e2e-bin.sh) || exit 1
KILLS=${KILLS:-100}
SEED=${SEED:-$(date +%s)}
echo "--- kubelet-e2e chaos -kills $KILLS -seed $SEED"
start=$SECONDS
# shellcheck disable=SC2086
"$BIN" chaos -repo "$REPO" -kills "$KILLS" -seed "$SEED" ${KCSI_CHAOS_ARGS:-}
rc=$?
echo "--- chaos took $((SECONDS - start)) s (KILLS=$KILLS SEED=$SEED)"
exit $rc
