#!/usr/bin/env bash
# Rust suite: unit tests and the integration suites in tests/ (against the real peers: the
# hostpath driver, kube-apiserver on etcd; the fault driver where a test injects a
# fault). Extra arguments go to cargo test, e.g. scripts/test-rust.sh --test volume_mounter;
# KCSI_TEST_THREADS (default 4) sets the test threads per binary. Needs root: the suites make
# real mounts and loop devices, and no test skips without them. --no-fail-fast: one failing
# binary does not hide the results of the binaries after it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "the Rust suites mount volumes and attach loop devices: run as root" >&2; exit 2; }
exec cargo test --workspace --no-fail-fast "$@" -- --test-threads="${KCSI_TEST_THREADS:-4}"
