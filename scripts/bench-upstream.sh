#!/usr/bin/env bash
# Side by side with upstream, in one Go process on one real hostpath driver (figures, never
# assertions; needs root for the driver's mounts), in benches/upstream (a Go module of its own,
# on volumeplugin's public API and its test environment, volumeplugin/volumeplugintest):
#   LifecycleVsUpstream: a volume's node lifecycle through kcsi's Go binding, through upstream's
#                        pkg/volume/csi v1.36.3 and as bare RPCs on one connection (the floor),
#                        sequential and 16 in parallel: ms per volume, overhead above the
#                        floor (whole and step by step), the process's CPU per volume in
#                        parallel, dials per lifecycle, memory
#   LifecycleAlone:      one of them alone (KCSI_BENCH_ALONE=floor|kcsi|upstream), for a
#                        profiler: not run here
#   ReconcilerQueries:   GetVolumeName, CanSupport, CanAttach over 110 pods x 2 volumes, kcsi
#                        vs upstream, per query
#   KCSI_BENCH_COUNT=<n> runs of each (default 3; report the median)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
source scripts/peers/versions.sh   # GOTOOLCHAIN, KCSI_GO
PREFIX=${KCSI_GO_PREFIX:-$REPO/target/go-prefix}
make --no-print-directory install PREFIX="$PREFIX" >/dev/null
scripts/peers/path.sh hostpath >/dev/null 2>&1 || scripts/peers/build.sh hostpath
export KCSI_HOSTPATH; KCSI_HOSTPATH=$(scripts/peers/path.sh hostpath)
export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LD_LIBRARY_PATH=$PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
cd benches/upstream
count=${KCSI_BENCH_COUNT:-3}
"$KCSI_GO" test -run '^$' -bench 'LifecycleVsUpstream' -benchtime 1x -count "$count" . 2>&1 | grep -Ev '^[EIW][0-9]{4} '
"$KCSI_GO" test -run '^$' -bench 'ReconcilerQueries' -count "$count" . 2>&1 | grep -Ev '^[EIW][0-9]{4} '
