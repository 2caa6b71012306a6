#!/usr/bin/env bash
# Benchmarks print figures; none asserts on time. Needs root (real mounts) and the peers.
#   registration: kcsi_get_volume_name per call; register+deregister against a real driver
#   register_api: the same with a real API server (Node/CSINode writes), API requests counted
#   lifecycle:    one volume lifecycle through the C API vs. the bare RPCs (the floor)
#   observability: what metrics + the CSI call trace cost at the default level (lifecycle,
#                 cheap query)
#   many_drivers: RSS and fds of one host with 1 000 registered drivers, connected and idle
set -euo pipefail
cd "$(dirname "$0")/.."
for bench in registration register_api lifecycle observability many_drivers; do
  echo "=== $bench"
  cargo bench --quiet --bench "$bench" 2>&1 | grep -Ev '^(kcsi WARN|[EW][0-9]{4} )'
done
