// Command fleet (make bench-fleet, scripts/bench-fleet.sh) runs N hollow nodes per plugin on
// one kube-apiserver, kubemark style: each the real kubelet code with fake containers (run by
// the kubelet-e2e binary of tests/kubelet, -e2e), the real node-driver-registrar and hostpath
// driver; it prints per node the API requests from the API server's audit log while they
// register, at rest and around an API server restart, and each kubelet's memory, kcsi's
// plugin and upstream's side by side. Figures, never assertions; a node that leaves mounts
// behind fails it.
//
//	fleet -repo DIR -e2e BIN [-nodes N] [-plugin kcsi|upstream|both] [-rest D] [-keep]
package main

import "kcsi.dev/kcsi/benches/kubelet/benchsuite"

func main() { benchsuite.Main("fleet", runFleet) }
