package scenarios

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"kcsi.dev/kcsi/tests/kubelet/pkg/cluster"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// Run is `kubelet-e2e run`: a real kube-apiserver + etcd, then for each plugin a node (the
// real hostpath driver, node-driver-registrar and a kubelet process, and the attach stack)
// on which every selected scenario runs; it fails on any difference between the plugins not
// on the allowlist, a failed check, or a node that left mounts behind.
func Run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	repo := fs.String("repo", ".", "the kcsi repository (for scripts/peers)")
	work := fs.String("work", "", "work directory (default: a new one under /tmp)")
	only := fs.String("scenarios", "", "comma-separated scenarios to run (default: all)")
	keep := fs.Bool("keep", false, "keep the work directory")
	show := fs.Bool("show", false, "print every observation, not only the differences")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("run: the kubelet and the drivers mount volumes and loop devices: run as root")
	}
	selected, err := selectScenarios(*only)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	s, err := cluster.NewSuite(*repo, *work, "kcsi-kubelet-e2e.", "")
	if err != nil {
		return err
	}
	if !*keep {
		defer s.RemoveWork()
	}
	if s.Resizer, err = s.Peer("resizer"); err != nil {
		return err
	}
	if s.FaultDriver, err = s.Peer("faultdriver"); err != nil {
		return err
	}
	started := time.Now()
	stopAPI, err := s.StartCluster(ctx, true, true)
	if err != nil {
		return err
	}
	defer stopAPI()

	obs := map[string]map[string]*observe.Observation{} // plugin -> scenario -> observation
	errs := map[string]map[string]error{}
	nodes := map[string]*cluster.Node{}
	defer func() {
		for _, n := range nodes {
			n.Stop()
		}
	}()
	var names []string
	for _, sc := range selected {
		names = append(names, sc.name)
	}
	for _, plugin := range observe.Plugins {
		obs[plugin], errs[plugin] = map[string]*observe.Observation{}, map[string]error{}
		nodeStart := time.Now()
		n, err := s.StartNode(ctx, plugin, "-volume-stats-period=1s")
		nodes[plugin] = n
		if err != nil {
			return err
		}
		var observed []*observe.Observation
		var windows []cluster.Window
		for i, sc := range selected {
			o := &observe.Observation{}
			t := time.Now()
			err := n.ForgetEvents(ctx)
			if err == nil {
				err = sc.run(ctx, n, o)
			}
			obs[plugin][sc.name], errs[plugin][sc.name] = o, err
			status := "done"
			if err != nil {
				status = "ERROR: " + err.Error()
			}
			fmt.Printf("[%s] %s: %s (%.1f s)\n", plugin, sc.name, status, time.Since(t).Seconds())
			// The first scenario's API requests include the node's start-up's.
			from := t
			if i == 0 {
				from = nodeStart
			}
			observed, windows = append(observed, o), append(windows, cluster.Window{From: from, To: time.Now()})
		}
		// Only one attach/detach controller may run.
		n.Attach.Stop()
		n.Attach = nil
		n.AuditRequests(observed, nodeStart, windows)
	}
	leftBehind := cluster.StopNodes(nodes)

	failed := observe.Report(names, obs, errs, *show)
	fmt.Printf("\nsuite time %.1f s\n", time.Since(started).Seconds())
	for _, l := range leftBehind {
		fmt.Println("\nFAILED: " + l)
	}
	if failed > 0 || len(leftBehind) > 0 {
		return fmt.Errorf("%d scenario(s) failed or differ from upstream, %d node(s) left mounts behind or could not be checked (logs kept in %s: run with -keep)",
			failed, len(leftBehind), s.Work)
	}
	return nil
}

// selectScenarios is the scenarios -scenarios names, in the order given (all if empty).
func selectScenarios(only string) ([]scenario, error) {
	if only == "" {
		return scenarios, nil
	}
	var selected []scenario
	for _, name := range strings.Split(only, ",") {
		found := false
		for _, sc := range scenarios {
			if sc.name == name {
				selected, found = append(selected, sc), true
			}
		}
		if !found {
			return nil, fmt.Errorf("no scenario %q", name)
		}
	}
	return selected, nil
}
