package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"kcsi.dev/kcsi/benches/kubelet/benchsuite"
	"kcsi.dev/kcsi/benches/kubelet/procmem"
	"kcsi.dev/kcsi/tests/kubelet/pkg/cluster"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// A fleet is N hollow nodes (kubemark style: the real kubelet code with fake containers, each
// with its own hostpath driver and registrar) on one kube-apiserver, whose audit log counts
// what the nodes ask of it: while they register, at rest, and around an API server restart.
// Each plugin gets a fresh etcd + API server, so neither fleet's objects, watches or
// leftover heartbeats weigh on the other's figures.
type fleetOpts struct {
	nodes int
	// settle: after the last node is Ready, still counted as registration (late CSINode or
	// Node writes belong to it); rest: the quiet window; down: how long the API server is
	// gone; after: the window counted once it is back.
	settle, rest, down, after time.Duration
}

type fleetResult struct {
	nodes int
	// ready: from starting the first node to every node Ready with the driver in its
	// CSINode; back: from the restarted API server answering to every node's Lease renewed.
	ready, back                 time.Duration
	registration, rest, restart tally
	restMinutes, restartMinutes float64
	// Per kubelet process (the plugin included), at the end of the rest window.
	rss, lib []int64
	conns    []int
	// registrarRestarts: registrars that exited (a failed registration) and were restarted.
	registrarRestarts int
}

// runFleet runs each selected plugin's fleet in turn and prints the figures.
func runFleet(args []string) error {
	fs := flag.NewFlagSet("fleet", flag.ExitOnError)
	common := benchsuite.Register(fs)
	count := fs.Int("nodes", 20, "hollow nodes per plugin")
	plugin := fs.String("plugin", "both", "kcsi, upstream or both")
	o := fleetOpts{}
	fs.DurationVar(&o.settle, "settle", 20*time.Second, "counted as registration after the last node is Ready")
	fs.DurationVar(&o.rest, "rest", 6*time.Minute, "the window at rest (kcsi's watch renews every 290 s, the kubelet's every 5-10 min)")
	fs.DurationVar(&o.down, "down", 10*time.Second, "how long the API server is stopped")
	fs.DurationVar(&o.after, "after", time.Minute, "the window counted after the API server is back")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.nodes = *count
	selected := observe.Plugins
	if *plugin != "both" {
		selected = []string{*plugin}
	}
	ctx, s, done, err := common.Start("kcsi-fleet.")
	if err != nil {
		return err
	}
	defer done()
	results := map[string]*fleetResult{}
	for _, p := range selected {
		r, err := runPluginFleet(ctx, s, p, o)
		if err != nil {
			return fmt.Errorf("%s fleet: %w (logs under %s: run with -keep)", p, err, filepath.Join(s.Work, p))
		}
		r.print(p)
		results[p] = r
	}
	printFleets(selected, results)
	return nil
}

// fleet is one plugin's nodes while they run.
type fleet struct {
	s     *cluster.Suite
	nodes []*cluster.Node
	// A registrar whose registration fails exits ("restarting registration container"), and
	// the kubelet restarts a DaemonSet's container after 10 s, doubling up to 5 min
	// (CrashLoopBackOff): the fleet does the same.
	exited   map[*cluster.Node]time.Time
	restarts map[*cluster.Node]int
}

func runPluginFleet(ctx context.Context, s *cluster.Suite, plugin string, o fleetOpts) (_ *fleetResult, err error) {
	dir := filepath.Join(s.Work, plugin)
	api := filepath.Join(dir, "api")
	stopAPI, err := s.StartAPIServer(api, "KCSI_APISERVER_AUDIT=1")
	if err != nil {
		return nil, err
	}
	defer stopAPI()
	if _, err := s.Client.StorageV1().CSIDrivers().Create(ctx, cluster.HostpathCSIDriver(), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	f := &fleet{s: s, exited: map[*cluster.Node]time.Time{}, restarts: map[*cluster.Node]int{}}
	defer func() {
		if serr := f.stop(); err == nil {
			err = serr
		}
	}()
	r := &fleetResult{nodes: o.nodes}

	fmt.Printf("[%s] starting %d nodes\n", plugin, o.nodes)
	start := time.Now()
	for i := 0; i < o.nodes; i++ {
		n := s.NodeIn(filepath.Join(dir, fmt.Sprintf("node-%02d", i)), plugin, fmt.Sprintf("%s-%02d", plugin, i))
		// The kubelet's default status period, so the counts are a real node's; -v=1 keeps
		// 20 kubelets' logging off the 2 cores.
		n.KubeletArgs = []string{"-node-status-update=10s", "-v=1"}
		f.nodes = append(f.nodes, n)
		if err := n.LaunchKubelet(); err != nil {
			return nil, err
		}
	}
	if err := f.startDrivers(ctx); err != nil {
		return nil, err
	}
	if _, err := f.waitReady(ctx, 5*time.Minute, time.Time{}); err != nil {
		return nil, err
	}
	r.ready = time.Since(start)
	fmt.Printf("[%s] %d nodes Ready with the driver in %.1f s\n", plugin, o.nodes, r.ready.Seconds())
	if err := f.run(ctx, o.settle); err != nil {
		return nil, err
	}
	registered := time.Now()

	fmt.Printf("[%s] at rest for %s\n", plugin, o.rest)
	if err := f.run(ctx, o.rest); err != nil {
		return nil, err
	}
	rested := time.Now()
	r.restMinutes = rested.Sub(registered).Minutes()
	port, err := apiPort(api)
	if err != nil {
		return nil, err
	}
	for _, n := range f.nodes {
		pid := n.Kubelet.Process.Pid
		// The upstream kubelet links libkcsi.so too but never calls it. The Rust heap cannot
		// be told apart from Go's in smaps, so kcsi's share of it shows only beside upstream.
		m, err := procmem.Read(pid)
		if err != nil {
			return nil, err
		}
		r.rss, r.lib = append(r.rss, m.Total), append(r.lib, m.Lib)
		r.conns = append(r.conns, connections(pid, port))
	}

	fmt.Printf("[%s] restarting the API server (down %s)\n", plugin, o.down)
	down := time.Now()
	if err := s.APIServer("stop-apiserver", api); err != nil {
		return nil, err
	}
	if err := f.run(ctx, o.down); err != nil {
		return nil, err
	}
	if err := s.APIServer("start-apiserver", api); err != nil {
		return nil, err
	}
	up := time.Now()
	if r.back, err = f.waitReady(ctx, 2*time.Minute, up); err != nil {
		return nil, err
	}
	if err := f.run(ctx, time.Until(up.Add(o.after))); err != nil {
		return nil, err
	}
	counts, err := readAudit(filepath.Join(api, "audit.log"), []window{{start, registered}, {registered, rested}, {down, up.Add(o.after)}})
	if err != nil {
		return nil, err
	}
	r.registration, r.rest, r.restart = counts[0], counts[1], counts[2]
	r.restartMinutes = up.Add(o.after).Sub(down).Minutes()
	for _, c := range f.restarts {
		r.registrarRestarts += c
	}
	return r, nil
}

// check fails if a driver or kubelet exited, and restarts registrars as the kubelet would.
func (f *fleet) check() error {
	for _, n := range f.nodes {
		for what, cmd := range map[string]*exec.Cmd{"driver": n.Driver, "kubelet": n.Kubelet} {
			if exited(cmd) {
				return fmt.Errorf("%s's %s died", n.Name, what)
			}
		}
		if !exited(n.Registrar) {
			continue
		}
		if f.exited[n].IsZero() {
			f.exited[n] = time.Now()
		}
		backoff := min(10*time.Second<<f.restarts[n], 5*time.Minute)
		if time.Since(f.exited[n]) < backoff {
			continue
		}
		if err := n.StartRegistrar(); err != nil {
			return err
		}
		f.restarts[n]++
		delete(f.exited, n)
	}
	return nil
}

// exited: the process has ended (Signal reports os.ErrProcessDone once startProc's Wait has
// reaped it); nil is not started yet.
func exited(cmd *exec.Cmd) bool {
	return cmd != nil && cmd.Process.Signal(syscall.Signal(0)) != nil
}

// run lets the fleet run for d, checking it every 500 ms.
func (f *fleet) run(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	for {
		if err := f.check(); err != nil {
			return err
		}
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(left, 500*time.Millisecond)):
		}
	}
}

// startDrivers starts each node's driver and registrar once the node is Ready, as a
// DaemonSet's pods land on it only then (they do not tolerate the not-ready:NoSchedule taint).
// Started as soon as the Node exists, upstream's registrar loses a race under load: its
// CSINode is created with the Node's UID only once the plugin's start-up has read it (between
// backoff pauses of up to 15 s), before that the create fails (ownerReferences.uid empty) and
// the registrar exits, while kcsi reads the UID when it creates the CSINode.
func (f *fleet) startDrivers(ctx context.Context) error {
	return cluster.WaitEvery(ctx, 500*time.Millisecond, 5*time.Minute, "every node Ready", func() (bool, error) {
		if err := f.check(); err != nil {
			return false, err
		}
		nl, err := f.s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := map[string]bool{}
		for i := range nl.Items {
			ready[nl.Items[i].Name] = cluster.NodeReady(&nl.Items[i])
		}
		started := 0
		for _, n := range f.nodes {
			if n.Driver == nil && ready[n.Name] {
				if err := n.StartDriverAndRegistrar(ctx); err != nil {
					return false, err
				}
			}
			if n.Driver != nil {
				started++
			}
		}
		return started == len(f.nodes), nil
	})
}

// waitReady waits until every node is Ready with the driver in its CSINode and, if renewed
// is set, has renewed its Lease since then; it returns how long after renewed the last node
// first did (from the Leases' renewTime, not the 500 ms polls).
func (f *fleet) waitReady(ctx context.Context, timeout time.Duration, renewed time.Time) (time.Duration, error) {
	first := map[string]time.Time{} // node -> its first renewal after renewed
	var last time.Duration
	what := "every node Ready with the driver in its CSINode"
	if !renewed.IsZero() {
		what += " and its Lease renewed"
	}
	err := cluster.WaitEvery(ctx, 500*time.Millisecond, timeout, what, func() (bool, error) {
		if err := f.check(); err != nil {
			return false, err
		}
		ready := map[string]bool{}
		nl, err := f.s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil // the restarted API server may not answer yet
		}
		for i := range nl.Items {
			ready[nl.Items[i].Name] = cluster.NodeReady(&nl.Items[i])
		}
		cl, err := f.s.Client.StorageV1().CSINodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		driver := map[string]bool{}
		for i := range cl.Items {
			driver[cl.Items[i].Name] = cluster.HasDriver(&cl.Items[i], cluster.DriverName)
		}
		if !renewed.IsZero() {
			ll, err := f.s.Client.CoordinationV1().Leases(v1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, l := range ll.Items {
				if t := l.Spec.RenewTime; t != nil && t.After(renewed) && first[l.Name].IsZero() {
					first[l.Name] = t.Time
				}
			}
		}
		for _, n := range f.nodes {
			if !ready[n.Name] || !driver[n.Name] || (!renewed.IsZero() && first[n.Name].IsZero()) {
				return false, nil
			}
			if d := first[n.Name].Sub(renewed); d > last {
				last = d
			}
		}
		return true, nil
	})
	return last, err
}

// stop stops the nodes in parallel (each kubelet takes a few seconds to go), then cleans up
// after them; it fails if, before the clean-up, a node had left anything mounted.
func (f *fleet) stop() error {
	var wg sync.WaitGroup
	for _, n := range f.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.StopProcesses() }()
	}
	wg.Wait()
	var errs []error
	for _, n := range f.nodes {
		if left, err := n.LeftMounts(); err != nil {
			errs = append(errs, fmt.Errorf("node %s: reading the mount table: %w", n.Name, err))
		} else if len(left) > 0 {
			errs = append(errs, fmt.Errorf("node %s left mounts behind: %v", n.Name, left))
		}
		n.CleanUp()
	}
	return errors.Join(errs...)
}
