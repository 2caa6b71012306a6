package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type suite struct {
	repo, work          string
	self                string
	hostpath, registrar string
	resizer             string // external-resizer, for the expand scenarios
	faultDriver         string // only where a fault no real peer makes is needed
	kubeconfig          string
	client              *clientset.Clientset
}

var plugins = []string{"kcsi", "upstream"}

func runSuite(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	repo := fs.String("repo", ".", "the kcsi repository (for scripts/peers)")
	work := fs.String("work", "", "work directory (default: a new one under /tmp)")
	only := fs.String("scenarios", "", "comma-separated scenarios to run (default: all; none: only the benchmarks)")
	bench := fs.String("bench", "32", "pods in the start/teardown benchmarks, comma-separated counts (0: skip them)")
	rounds := fs.Int("bench-rounds", 1, "rounds of the filesystem and block benchmarks, the plugins in ABBA order")
	volumes := fs.String("bench-volumes", "fs", "volume kinds of the ABBA benchmarks: fs, block")
	benchAttach := fs.Bool("bench-attach", true, "also the attach-required benchmark, once per plugin")
	apiQPS := fs.Int("kubelet-api-qps", 0, "the kubelet's kubeAPIQPS, burst twice that (0: its defaults, 50 and 100)")
	keep := fs.Bool("keep", false, "keep the work directory")
	show := fs.Bool("show", false, "print every observation, not only the differences")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("run: the kubelet and the drivers mount volumes and loop devices: run as root")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	s, err := newSuite(*repo, *work, "kcsi-kubelet-e2e.")
	if err != nil {
		return err
	}
	if !*keep {
		defer s.removeWork()
	}
	if s.resizer, err = s.peer("resizer"); err != nil {
		return err
	}
	if s.faultDriver, err = s.peer("faultdriver"); err != nil {
		return err
	}
	started := time.Now()
	stopAPI, err := s.startAPIServer(filepath.Join(s.work, "api"))
	if err != nil {
		return err
	}
	defer stopAPI()
	for _, d := range []*storagev1.CSIDriver{hostpathCSIDriver(), attachCSIDriver()} {
		if _, err := s.client.StorageV1().CSIDrivers().Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	fmt.Printf("kube-apiserver up in %.1f s\n", time.Since(started).Seconds())

	selected := scenarios
	if *only == "none" { // the benchmarks alone
		selected = nil
	} else if *only != "" {
		selected = nil
		for _, name := range strings.Split(*only, ",") {
			found := false
			for _, sc := range scenarios {
				if sc.name == name {
					selected, found = append(selected, sc), true
				}
			}
			if !found {
				return fmt.Errorf("no scenario %q", name)
			}
		}
	}

	counts, err := benchCounts(*bench)
	if err != nil {
		return err
	}
	obs := map[string]map[string]*observation{} // plugin -> scenario -> observation
	errs := map[string]map[string]error{}
	runs := benchRuns{}
	benchErrors := 0
	nodes := map[string]*node{}
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	for _, plugin := range plugins {
		obs[plugin], errs[plugin] = map[string]*observation{}, map[string]error{}
		n := s.newNode(plugin)
		if *apiQPS > 0 {
			n.kubeletArgs = append(n.kubeletArgs, fmt.Sprintf("-api-qps=%d", *apiQPS))
		}
		if len(selected) > 0 {
			n.kubeletArgs = append(n.kubeletArgs, "-volume-stats-period=1s")
		}
		if _, err := s.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n.ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		nodes[plugin] = n
		t0 := time.Now()
		if err := n.start(ctx); err != nil {
			return fmt.Errorf("%s node: %w (logs in %s)", plugin, err, n.dir)
		}
		fmt.Printf("[%s] node Ready with the driver registered in %.1f s\n", plugin, time.Since(t0).Seconds())
		for _, sc := range selected {
			o := &observation{}
			t := time.Now()
			err := sc.run(ctx, n, o)
			obs[plugin][sc.name], errs[plugin][sc.name] = o, err
			status := "done"
			if err != nil {
				status = "ERROR: " + err.Error()
			}
			fmt.Printf("[%s] %s: %s (%.1f s)\n", plugin, sc.name, status, time.Since(t).Seconds())
		}
		// Attaching needs this plugin's attach/detach controller, and only one may run.
		for _, count := range counts {
			if *benchAttach {
				benchErrors += runs.run(ctx, n, count, "attach")
			}
		}
		n.attach.stop()
		n.attach = nil
	}
	// Filesystem and block pods with both nodes up, ABBA: round r runs kcsi then upstream
	// when r is even, upstream then kcsi when odd, so drift in the machine's load falls on
	// both alike.
	for _, count := range counts {
		for _, kind := range strings.Split(*volumes, ",") {
			for r := range *rounds {
				order := plugins
				if r%2 == 1 {
					order = []string{plugins[1], plugins[0]}
				}
				for _, p := range order {
					benchErrors += runs.run(ctx, nodes[p], count, kind)
				}
			}
		}
	}
	// What the processes left mounted is read once they have stopped and before the clean-up
	// unmounts everything.
	var leftBehind []string
	for plugin, n := range nodes {
		n.stopProcesses()
		left, err := n.leftMounts()
		n.cleanUp()
		delete(nodes, plugin)
		if err != nil {
			leftBehind = append(leftBehind, fmt.Sprintf("%s node: reading the mount table: %v", plugin, err))
		} else if len(left) > 0 {
			leftBehind = append(leftBehind, fmt.Sprintf("%s node left mounts behind: %v", plugin, left))
		}
	}

	failed := report(selected, obs, errs, *show)
	runs.print(*apiQPS)
	runs.printPaired()
	fmt.Printf("\nsuite time %.1f s\n", time.Since(started).Seconds())
	for _, l := range leftBehind {
		fmt.Println("\nFAILED: " + l)
	}
	if failed > 0 || benchErrors > 0 || len(leftBehind) > 0 {
		return fmt.Errorf("%d scenario(s) failed or differ from upstream, %d benchmark run(s) failed, %d node(s) left mounts behind or could not be checked (logs kept in %s: run with -keep)",
			failed, benchErrors, len(leftBehind), s.work)
	}
	return nil
}

// newSuite finds this binary and the peers, and makes the work directory (a new one under
// /tmp named prefix* if work is empty).
func newSuite(repo, work, prefix string) (*suite, error) {
	s := &suite{repo: repo, work: work}
	var err error
	if s.self, err = os.Executable(); err != nil {
		return nil, err
	}
	if s.hostpath, err = s.peer("hostpath"); err != nil {
		return nil, err
	}
	if s.registrar, err = s.peer("registrar"); err != nil {
		return nil, err
	}
	if s.work == "" {
		s.work, err = os.MkdirTemp("/tmp", prefix)
	}
	return s, err
}

func (s *suite) removeWork() {
	unmountUnder(s.work)
	os.RemoveAll(s.work)
}

// startAPIServer starts etcd and kube-apiserver in dir (env: apiserver.sh's settings) and
// points s.kubeconfig and s.client at them; the returned func stops both.
func (s *suite) startAPIServer(dir string, env ...string) (func(), error) {
	if err := s.apiserver("start", dir, env...); err != nil {
		return nil, err
	}
	stop := func() { s.apiserver("stop", dir) }
	s.kubeconfig = filepath.Join(dir, "kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		stop()
		return nil, err
	}
	cfg.QPS, cfg.Burst = 200, 400
	cfg.UserAgent = observerAgent
	if s.client, err = clientset.NewForConfig(cfg); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// observerAgent is the suite's own client, which the fleet leaves out of its counts.
const observerAgent = "kcsi-e2e-observer"

// apiserver runs scripts/peers/apiserver.sh cmd dir.
func (s *suite) apiserver(cmd, dir string, env ...string) error {
	c := exec.Command(filepath.Join(s.repo, "scripts/peers/apiserver.sh"), cmd, dir)
	c.Env = append(os.Environ(), env...)
	if out, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("apiserver.sh %s: %v\n%s", cmd, err, out)
	}
	return nil
}

func (s *suite) peer(name string) (string, error) {
	out, err := exec.Command(filepath.Join(s.repo, "scripts/peers/path.sh"), name).Output()
	if err != nil {
		return "", fmt.Errorf("peer %s is not built (scripts/peers/build.sh %s): %v", name, name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// report prints each scenario's observations side by side where they differ; it returns how
// many scenarios failed (an error, a failed check, or a key that differs and is not on the
// allowlist).
func report(selected []scenario, obs map[string]map[string]*observation, errs map[string]map[string]error, show bool) int {
	failed := 0
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for _, sc := range selected {
		k, u := obs["kcsi"][sc.name], obs["upstream"][sc.name]
		var problems []string
		for _, p := range plugins {
			o := obs[p][sc.name]
			if err := errs[p][sc.name]; err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", p, err))
			}
			for _, why := range o.problems {
				problems = append(problems, fmt.Sprintf("%s: %s", p, why))
			}
			if o.publishes == 0 {
				problems = append(problems, p+": no NodePublishVolume in any snapshot: the scenario ran no volume")
			}
		}
		keys := append([]string{}, k.keys...)
		for _, key := range u.keys {
			if _, ok := k.values[key]; !ok {
				keys = append(keys, key)
			}
		}
		var diffs, infos, same []string
		compared := 0
		for _, key := range keys {
			if !strings.HasPrefix(key, "info: ") {
				compared++
			}
			kv, uv := strings.Join(k.values[key], "\n"), strings.Join(u.values[key], "\n")
			if strings.HasPrefix(key, "check: ") && kv != "true" {
				problems = append(problems, "kcsi failed "+strings.TrimPrefix(key, "check: ")+" ("+strings.Join(k.values["info: failed check "+strings.TrimPrefix(key, "check: ")], "")+")")
			}
			if kv == uv {
				if show {
					same = append(same, fmt.Sprintf("  %s\n%s", key, indent(k.values[key])))
				}
				continue
			}
			block := fmt.Sprintf("  %s\n    kcsi:\n%s\n    upstream:\n%s", key, indent(k.values[key]), indent(u.values[key]))
			if reason, ok := allowedDifference(key, k.values[key], u.values[key]); ok {
				infos = append(infos, block+"\n    allowed: "+reason)
			} else if strings.HasPrefix(key, "info: ") {
				infos = append(infos, block)
			} else {
				diffs = append(diffs, block)
			}
		}
		if compared == 0 {
			problems = append(problems, "no key compared: the scenario observed nothing")
		}
		status := "SAME as upstream"
		if len(problems) > 0 || len(diffs) > 0 {
			status = "FAILED"
			failed++
		}
		fmt.Fprintf(w, "\n=== %s: %s\n", sc.name, status)
		for _, p := range problems {
			fmt.Fprintf(w, "  error: %s\n", p)
		}
		for _, d := range diffs {
			fmt.Fprintf(w, "differs:\n%s\n", d)
		}
		for _, d := range infos {
			fmt.Fprintf(w, "differs (allowed or detail of a failed check):\n%s\n", d)
		}
		for _, d := range same {
			fmt.Fprintf(w, "same for both:\n%s\n", d)
		}
		if len(diffs) == 0 {
			fmt.Fprintf(w, "  compared: %d keys, %d lines equal\n", compared, countLines(k))
		}
	}
	return failed
}

func countLines(o *observation) int {
	n := 0
	for key, v := range o.values {
		if !strings.HasPrefix(key, "info: ") {
			n += len(v)
		}
	}
	return n
}

func indent(lines []string) string {
	if len(lines) == 0 {
		return "      (none)"
	}
	return "      " + strings.Join(lines, "\n      ")
}
