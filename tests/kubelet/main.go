// Command kubelet-e2e runs kcsi inside the real kubelet code and compares it with upstream's
// CSI plugin.
//
//	kubelet-e2e kubelet -plugin kcsi|upstream -root DIR -kubeconfig FILE -node NAME
//	    runs one kubelet (cmd/kubelet/app.RunKubelet, as kubemark's hollow node does) with
//	    the real mounter, host utils, subpather and prober, and fakes only for containers.
//	kubelet-e2e controller -plugin kcsi|upstream -kubeconfig FILE -flex-dir DIR
//	    runs the real attach/detach controller (pkg/controller/volume/attachdetach) as
//	    kube-controller-manager starts it, with kcsi's or upstream's attachable plugins.
//	kubelet-e2e run -repo DIR -work DIR [-scenarios a,b|none] [-bench N,..] [-bench-rounds R] [-bench-volumes fs,block]
//	    the suite: a real kube-apiserver + etcd, then for each plugin the real hostpath
//	    driver, node-driver-registrar and a kubelet process (sending its events to the API
//	    server); every scenario runs with both plugins and the suite FAILS on any difference
//	    not on allowlist.go: the CSI requests the driver received (stateful ones in order and
//	    in full, the others by count), the files under the kubelet root, the Node/CSINode
//	    objects, the namespace's pod phases, PVC and PV status and conditions, and the
//	    reasons of its events; a failed benchmark run fails it too.
//	kubelet-e2e fleet -repo DIR -nodes N [-plugin kcsi|upstream|both]
//	    N hollow nodes per plugin (driver, registrar, kubelet) on one kube-apiserver: its
//	    audit log's requests per node at registration, at rest and around an API server
//	    restart, and each kubelet's memory (fleet.go).
//
// The expand scenarios (scenarios_expand.go) also run the real external-resizer against
// the node's driver. Only driver-killed-during-publish (scenarios_driver_kill.go) swaps
// the real hostpath driver for the project's fault driver, to hold a NodePublishVolume
// until the driver is killed: no real peer makes such a kill land mid-RPC on demand.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kubelet-e2e kubelet|controller|run|fleet [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "kubelet":
		err = runKubelet(os.Args[2:])
	case "controller":
		err = runController(os.Args[2:])
	case "run":
		err = runSuite(os.Args[2:])
	case "fleet":
		err = runFleet(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (want kubelet, controller, run or fleet)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-e2e:", err)
		os.Exit(1)
	}
}
