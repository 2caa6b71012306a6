// Command pods (make bench-kubelet; a short run in scripts/test-kubelet.sh) times pods to
// Running and torn down in the real kubelet, kcsi's plugin and upstream's side by side: a real
// kube-apiserver + etcd and, per plugin, a node as tests/kubelet's suite starts it (the real
// hostpath driver, node-driver-registrar, and a kubelet and attach/detach controller run by
// the kubelet-e2e binary, -e2e). The attach-required run goes once per plugin (one controller
// at a time); the filesystem and block runs go in rounds, ABBA, then are compared pair by
// pair. Figures, never assertions; a failed run or a node that leaves mounts behind fails it.
//
//	pods -repo DIR -e2e BIN [-bench N,..] [-bench-rounds R] [-bench-volumes fs,block] [-bench-attach=false] [-kubelet-api-qps Q] [-keep]
package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"kcsi.dev/kcsi/benches/kubelet/benchsuite"
	"kcsi.dev/kcsi/tests/kubelet/pkg/cluster"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

func main() { benchsuite.Main("pods", run) }

func run(args []string) error {
	fs := flag.NewFlagSet("pods", flag.ExitOnError)
	common := benchsuite.Register(fs)
	bench := fs.String("bench", "32", "pods per benchmark, comma-separated counts")
	rounds := fs.Int("bench-rounds", 1, "rounds of the filesystem and block benchmarks, the plugins in ABBA order")
	volumes := fs.String("bench-volumes", "fs", "volume kinds of the ABBA benchmarks: fs, block")
	benchAttach := fs.Bool("bench-attach", true, "also the attach-required benchmark, once per plugin")
	apiQPS := fs.Int("kubelet-api-qps", 0, "the kubelet's kubeAPIQPS, burst twice that (0: its defaults, 50 and 100)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	counts, err := benchCounts(*bench)
	if err != nil {
		return err
	}
	ctx, s, done, err := common.Start("kcsi-bench-pods.")
	if err != nil {
		return err
	}
	defer done()
	started := time.Now()
	stopAPI, err := s.StartCluster(ctx, false, false)
	if err != nil {
		return err
	}
	defer stopAPI()

	var kubeletArgs []string
	if *apiQPS > 0 {
		kubeletArgs = append(kubeletArgs, fmt.Sprintf("-api-qps=%d", *apiQPS))
	}
	runs := benchRuns{}
	benchErrors := 0
	nodes := map[string]*cluster.Node{}
	defer func() {
		for _, n := range nodes {
			n.Stop()
		}
	}()
	for _, plugin := range observe.Plugins {
		n, err := s.StartNode(ctx, plugin, kubeletArgs...)
		nodes[plugin] = n
		if err != nil {
			return err
		}
		// Attaching needs this plugin's attach/detach controller, and only one may run.
		for _, count := range counts {
			if *benchAttach {
				benchErrors += runs.run(ctx, n, count, "attach")
			}
		}
		n.Attach.Stop()
		n.Attach = nil
	}
	// Filesystem and block pods with both nodes up, ABBA: round r runs kcsi then upstream
	// when r is even, upstream then kcsi when odd, so drift in the machine's load falls on
	// both alike.
	for _, count := range counts {
		for _, kind := range strings.Split(*volumes, ",") {
			for r := range *rounds {
				order := observe.Plugins
				if r%2 == 1 {
					order = []string{observe.Plugins[1], observe.Plugins[0]}
				}
				for _, p := range order {
					benchErrors += runs.run(ctx, nodes[p], count, kind)
				}
			}
		}
	}
	leftBehind := cluster.StopNodes(nodes)

	runs.print(*apiQPS)
	runs.printPaired()
	fmt.Printf("\nbenchmark time %.1f s\n", time.Since(started).Seconds())
	for _, l := range leftBehind {
		fmt.Println("\nFAILED: " + l)
	}
	if benchErrors > 0 || len(leftBehind) > 0 {
		return fmt.Errorf("%d benchmark run(s) failed, %d node(s) left mounts behind or could not be checked (logs kept in %s: run with -keep)",
			benchErrors, len(leftBehind), s.Work)
	}
	return nil
}
