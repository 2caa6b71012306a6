// Command kubelet-e2e runs kcsi inside the real kubelet code and compares it with upstream's
// CSI plugin.
//
//	kubelet-e2e kubelet -plugin kcsi|upstream -root DIR -kubeconfig FILE -node NAME
//	    runs one kubelet (cmd/kubelet/app.RunKubelet, as kubemark's hollow node does) with
//	    the real mounter, host utils, subpather and prober, and fakes only for containers
//	    (pkg/hollow).
//	kubelet-e2e controller -plugin kcsi|upstream -kubeconfig FILE -flex-dir DIR
//	    runs the real attach/detach controller (pkg/controller/volume/attachdetach) as
//	    kube-controller-manager starts it, with kcsi's or upstream's attachable plugins
//	    (pkg/hollow).
//	kubelet-e2e run -repo DIR [-work DIR] [-scenarios a,b] [-keep] [-show]
//	    the suite (pkg/scenarios, whose table lists every scenario): a real kube-apiserver +
//	    etcd, then for each plugin the real hostpath driver, node-driver-registrar and a
//	    kubelet process (sending its events to the API server) (pkg/cluster); every scenario
//	    runs with both plugins and the suite FAILS on any difference not on the allowlist
//	    (pkg/observe/allowlist.go): the CSI requests the driver received (stateful ones in
//	    order and in full, the others by count), the files under the kubelet root, the
//	    Node/CSINode objects, the namespace's pod phases, PVC and PV status and conditions,
//	    the reasons of its events (pkg/observe), and the API requests of the kubelet and the
//	    attach/detach controller by user, verb and resource (the API server's audit log). The
//	    cluster runs as a real one does: Node,RBAC and NodeRestriction, each kubelet with its
//	    node's client certificate, the controller and the sidecars with their service
//	    accounts' RBAC (pkg/cluster/identity.go); any of their requests answered Forbidden
//	    fails the scenario.
//	kubelet-e2e chaos -repo DIR [-kills N] [-seed S] [-plugins kcsi,upstream] [-attach=false] [-keep]
//	    the chaos run (pkg/scenarios/chaos.go, issue #39): for each plugin, with one schedule
//	    drawn from the seed, pods on filesystem, block and attach-required claims come and go
//	    while the kubelet or the node's driver is SIGKILLed N times (a share of the kills
//	    inside a held CSI call, asserted) and restarted; then every pod is deleted and what is
//	    stranded on the node is counted and printed. It FAILS if kcsi stranded anything or a
//	    kill missed its call; upstream's strandings are reported.
//
// The kubelet benchmarks (benches/kubelet) run their nodes' kubelets and controllers through
// this binary's kubelet and controller commands.
package main

import (
	"fmt"
	"os"

	"kcsi.dev/kcsi/tests/kubelet/pkg/hollow"
	"kcsi.dev/kcsi/tests/kubelet/pkg/scenarios"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kubelet-e2e kubelet|controller|run|chaos [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "kubelet":
		err = hollow.RunKubelet(os.Args[2:])
	case "controller":
		err = hollow.RunController(os.Args[2:])
	case "run":
		err = scenarios.Run(os.Args[2:])
	case "chaos":
		err = scenarios.Chaos(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (want kubelet, controller, run or chaos)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-e2e:", err)
		os.Exit(1)
	}
}
