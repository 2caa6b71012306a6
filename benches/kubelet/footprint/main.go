// Command footprint (make bench-footprint; a short run in scripts/test-kubelet.sh) measures
// what kcsi's plugin costs a node's kubelet and the kube-controller-manager in memory, beside
// upstream's plugin: on a real kube-apiserver + etcd with Node,RBAC authorization, per plugin a
// node as tests/kubelet's suite starts it (the real hostpath drivers, registrars and
// external-attacher; the kubelet and the attach/detach controller run by the kubelet-e2e
// binary, -e2e, each with its real identity) runs one pod on an attach-required CSI volume;
// once it is Running both processes are read every -every for -steady, and the medians are
// printed by where the memory lies. Figures, never assertions; a failed run or a node that
// leaves mounts behind fails it.
//
//	footprint -repo DIR -e2e BIN [-steady D] [-every D] [-keep]
package main

import (
	"flag"
	"fmt"
	"time"

	"kcsi.dev/kcsi/benches/kubelet/benchsuite"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

func main() { benchsuite.Main("footprint", run) }

func run(args []string) error {
	fs := flag.NewFlagSet("footprint", flag.ExitOnError)
	common := benchsuite.Register(fs)
	steady := fs.Duration("steady", time.Minute, "how long the pod runs while the processes are read")
	every := fs.Duration("every", 10*time.Second, "how often the processes are read")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, s, done, err := common.Start("kcsi-bench-footprint.")
	if err != nil {
		return err
	}
	defer done()
	stopAPI, err := s.StartCluster(ctx, false, true)
	if err != nil {
		return err
	}
	defer stopAPI()

	results := map[string]*footprint{}
	// One node at a time: one attach/detach controller may run, and neither plugin's
	// processes share the machine with the other's while they are read.
	for _, plugin := range observe.Plugins {
		r, err := measure(ctx, s, plugin, *steady, *every)
		if err != nil {
			return fmt.Errorf("%s: %w (logs in %s: run with -keep)", plugin, err, s.Work)
		}
		results[plugin] = r
	}
	print(results, *steady, *every)
	return nil
}
