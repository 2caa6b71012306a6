package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kcsi.dev/kcsi/internal/mountinfo"
	"kcsi.dev/kcsi/tests/kubelet/pkg/cluster"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// The chaos run (`kubelet-e2e chaos`, issue #39): on each plugin's node, with one schedule
// drawn from the seed, pods on filesystem, block and attach-required claims are created and
// deleted while the kubelet or the node's driver is SIGKILLed, N times, each restarted at
// once. A share of the kills is made to land INSIDE a CSI call: the node's driver is the
// project's fault driver (real bind mounts and loop devices, its state kept across restarts)
// restarted with --hang-rpc=<RPC>:1, the call is triggered (a pod created for
// NodeStageVolume/NodePublishVolume, deleted for NodeUnpublishVolume/NodeUnstageVolume), and
// the kill comes once the hold is in the driver's log and no such call was answered (the
// landing is asserted; a kill that did not land is a failure of the run). The others land
// at a random delay after a pod was created or deleted. After the N kills every pod is
// deleted, the node is given a bounded time to converge, and what is stranded is counted.
// A kill inside NodeExpandVolume grows the running pod's block claim with the real
// external-resizer (the fault driver, like hostpath, needs node expansion for block volumes
// only) and comes once the kubelet's NodeExpandVolume is held.

// chaosRPCs are the calls a kill is made to land inside.
var chaosRPCs = []string{"NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume", "NodeExpandVolume"}

// noHold is held's missed when the driver logged no hold within holdWait of the pod's creation
// or deletion: the call was answered by a driver without the hold or never sent. Seen in kcsi's
// and upstream's runs of seed 1 (kill 14, a held NodeUnstageVolume after a kill inside the same
// claim kind's NodeUnpublishVolume), whose volume was still unstaged: not understood yet, so
// reported and not failed, and the kill is counted as a random one.
const noHold = "no hold"

// holdWait bounds the wait for the hold.
const holdWait = 30 * time.Second

// chaosGrace is the kubelet's -orphan-grace-period in the chaos run (as unstage-window's).
const chaosGrace = 3 * time.Second

// chaosStep is one kill of the schedule: what is killed, where (an RPC's hold, or "random":
// after a random delay), on which claim, and the delay.
type chaosStep struct {
	Target string // kubelet or driver
	Phase  string // one of chaosRPCs, or "random"
	Claim  int    // index into the node's claims
	Delay  time.Duration
}

// chaosClaims are the kinds of claim each node churns pods on, one pod at a time each: 2
// filesystem, 1 block and (with the attach stack) 1 attach-required; holds land only on the
// fault driver's (the first three). Every pod gets a claim of its own, made for it, so a
// volume one kill stranded is never healed by a later pod that stages the same volume again.
var chaosClaims = []struct {
	name          string
	block, attach bool
}{{"cfs0", false, false}, {"cfs1", false, false}, {"cblk0", true, false}, {"catt0", false, true}}

const chaosHeldClaims = 3

// chaosBlockClaim is the block claim's index: the one a held NodeExpandVolume grows.
const chaosBlockClaim = 2

// chaosSchedule draws n kills from seed: the same for every plugin.
func chaosSchedule(seed uint64, n int) []chaosStep {
	r := rand.New(rand.NewPCG(seed, 0x6b637369))
	steps := make([]chaosStep, n)
	for i := range steps {
		st := chaosStep{Target: "kubelet", Phase: "random"}
		if r.IntN(2) == 1 {
			st.Target = "driver"
		}
		if r.IntN(2) == 1 {
			st.Phase = chaosRPCs[r.IntN(len(chaosRPCs))]
			st.Claim = r.IntN(chaosHeldClaims)
			if st.Phase == "NodeExpandVolume" {
				st.Claim = chaosBlockClaim
			}
		} else {
			st.Claim = r.IntN(len(chaosClaims))
		}
		st.Delay = time.Duration(r.IntN(2500)) * time.Millisecond
		steps[i] = st
	}
	return steps
}

// chaosResult is one plugin's run.
type chaosResult struct {
	Kills     map[string]int // "<target> <phase>" -> kills
	NotLanded []string       // kills meant to land inside a call that did not
	NoHold    []string       // kills meant inside a call whose hold never showed (done after holdWait)
	Skipped   []string       // held kills whose call could not be set up (done as random kills)
	Stranded  strandings
	Errors    []string // operations of the run that failed (pods that did not come up, ...)
	// RegistrarRestarts counts node-driver-registrar's exits after a failed registration.
	RegistrarRestarts int
	Took              time.Duration
}

// strandKinds are what is counted after the run, in the table's order.
var strandKinds = []string{
	"mounts under the kubelet root",
	"loop devices of the node's volumes",
	"staged global mounts (dirs)",
	"pod dirs",
	"vol_data.json files",
	"pods stuck Terminating",
	"VolumeAttachments",
	"driver: volumes staged",
	"driver: volumes published",
}

// Chaos is `kubelet-e2e chaos`.
func Chaos(args []string) error {
	fset := flag.NewFlagSet("chaos", flag.ExitOnError)
	repo := fset.String("repo", ".", "the kcsi repository (for scripts/peers)")
	work := fset.String("work", "", "work directory (default: a new one under /tmp)")
	kills := fset.Int("kills", 20, "SIGKILLs per plugin")
	seed := fset.Uint64("seed", 1, "the schedule's seed")
	plugins := fset.String("plugins", "kcsi,upstream", "plugins to run, comma-separated")
	attach := fset.Bool("attach", true, "churn an attach-required claim too (the attach stack)")
	keep := fset.Bool("keep", false, "keep the work directory")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("chaos: the kubelet and the drivers mount volumes and loop devices: run as root")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	s, err := cluster.NewSuite(*repo, *work, "kcsi-kubelet-chaos.", "")
	if err != nil {
		return err
	}
	if !*keep {
		defer s.RemoveWork()
	}
	if s.FaultDriver, err = s.Peer("faultdriver"); err != nil {
		return err
	}
	if s.Resizer, err = s.Peer("resizer"); err != nil {
		return err
	}
	stopAPI, err := s.StartCluster(ctx, false, true)
	if err != nil {
		return err
	}
	defer stopAPI()

	steps := chaosSchedule(*seed, *kills)
	fmt.Printf("chaos: %d kills per plugin, seed %d\n", *kills, *seed)
	results := map[string]*chaosResult{}
	var order []string
	for _, plugin := range strings.Split(*plugins, ",") {
		order = append(order, plugin)
		res, err := chaosNode(ctx, s, plugin, steps, *attach)
		if err != nil {
			return fmt.Errorf("[%s] %w (logs in %s: run with -keep)", plugin, err, s.Work)
		}
		results[plugin] = res
	}
	failed := chaosReport(order, results, *kills, *seed)
	if failed != "" {
		return fmt.Errorf("%s (logs in %s: run with -keep)", failed, s.Work)
	}
	return nil
}

// chaosNode runs the schedule on the plugin's node and counts what is stranded.
func chaosNode(ctx context.Context, s *cluster.Suite, plugin string, steps []chaosStep, attach bool) (res *chaosResult, err error) {
	started := time.Now()
	res = &chaosResult{Kills: map[string]int{}, Stranded: strandings{}}
	n, err := s.StartNode(ctx, plugin, "-orphan-grace-period="+chaosGrace.String())
	nodes := map[string]*cluster.Node{plugin: n}
	defer func() {
		if len(nodes) > 0 {
			cluster.StopNodes(nodes)
		}
	}()
	if err != nil {
		return nil, err
	}
	if !attach {
		n.Attach.Stop()
		n.Attach = nil
	}
	cluster.StopProc(n.Driver)
	if err := startFaultDriver(ctx, n); err != nil {
		return nil, err
	}
	undoClass, err := withExpandableClass(ctx, n)
	if err != nil {
		return nil, err
	}
	defer undoClass()
	r := &chaosRunner{n: n, res: res}
	for _, cc := range chaosClaims {
		if !cc.attach || n.Attach != nil {
			r.claims = append(r.claims, &chaosClaim{name: cc.name, block: cc.block, attach: cc.attach})
		}
	}
	for i, st := range steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := r.step(ctx, i, st); err != nil {
			return nil, fmt.Errorf("kill %d (%s %s): %w", i+1, st.Target, st.Phase, err)
		}
		if (i+1)%10 == 0 || i+1 == len(steps) {
			fmt.Printf("[%s] %d/%d kills (%.0f s)\n", plugin, i+1, len(steps), time.Since(started).Seconds())
		}
	}
	if err := r.converge(ctx); err != nil {
		return nil, err
	}
	res.Took = time.Since(started)
	for _, c := range r.made {
		n.DeleteClaim(context.Background(), c) // a volume left staged cannot be deleted: counted already
	}
	if n.Attach != nil { // only one attach/detach controller may run
		n.Attach.Stop()
		n.Attach = nil
	}
	for _, l := range cluster.StopNodes(nodes) {
		res.Errors = append(res.Errors, "after the processes stopped: "+l)
	}
	return res, nil
}

type chaosClaim struct {
	name          string
	c             *cluster.Claim // the claim of its current (or last) pod
	block, attach bool
	pod           string // the pod object using it, if any ("" none)
}

type chaosRunner struct {
	n      *cluster.Node
	res    *chaosResult
	claims []*chaosClaim
	made   []*cluster.Claim // every claim made, for the clean-up
	pods   int
}

// step does one kill of the schedule.
func (r *chaosRunner) step(ctx context.Context, i int, st chaosStep) error {
	if err := r.ensureRegistrar(ctx); err != nil {
		return err
	}
	c := r.claims[st.Claim%len(r.claims)]
	if st.Phase != "random" {
		missed, why, err := r.held(ctx, st, c)
		if err != nil {
			return err
		}
		if why != "" {
			r.res.Skipped = append(r.res.Skipped, fmt.Sprintf("kill %d (%s in %s on %s): %s", i+1, st.Target, st.Phase, c.c.PVC, why))
		} else {
			where := st.Phase
			switch {
			case missed == noHold:
				// Reported, not failed: the kill still came, after the wait, outside any call.
				r.res.NoHold = append(r.res.NoHold, fmt.Sprintf("kill %d: %s in %s on %s", i+1, st.Target, st.Phase, c.c.PVC))
				where = "random (no hold)"
			case missed != "":
				r.res.NotLanded = append(r.res.NotLanded, fmt.Sprintf("kill %d: %s in %s on %s: %s", i+1, st.Target, st.Phase, c.c.PVC, missed))
			}
			r.res.Kills[st.Target+" "+where]++
			return r.restart(ctx, st.Target)
		}
	}
	// A random kill: a pod created or deleted, then the kill after the delay.
	if c.pod == "" {
		if err := r.createPod(ctx, c); err != nil {
			return err
		}
	} else if err := r.deletePod(ctx, c); err != nil {
		return err
	}
	time.Sleep(st.Delay)
	r.kill(st.Target)
	r.res.Kills[st.Target+" random"]++
	return r.restart(ctx, st.Target)
}

// held makes the kill land inside st.Phase on c: the driver restarted with the hold, the call
// triggered, the kill once it is held. missed says why the kill did not land inside the call
// ("" if it did); why, why it could not be set up (then no kill was done).
func (r *chaosRunner) held(ctx context.Context, st chaosStep, c *chaosClaim) (missed, why string, err error) {
	n := r.n
	var resizer *exec.Cmd
	defer func() {
		if resizer != nil {
			cluster.StopProc(resizer)
		}
	}()
	switch st.Phase {
	case "NodeStageVolume", "NodePublishVolume":
		if c.pod != "" { // the new pod gets a new claim: nothing to wait for
			if err := r.deletePod(ctx, c); err != nil {
				return "", "", err
			}
		}
	default:
		if c.pod == "" {
			if err := r.createPod(ctx, c); err != nil {
				return "", "", err
			}
		}
		if _, err := n.WaitRunning(ctx, c.pod, podTimeout); err != nil {
			r.res.Errors = append(r.res.Errors, "setting up a held "+st.Phase+": "+err.Error())
			return "", "its pod did not come up: " + err.Error(), nil
		}
	}
	cluster.StopProc(n.Driver)
	if err := startFaultDriver(ctx, n, "--hang-rpc="+st.Phase+":1"); err != nil {
		return "", "", err
	}
	m := n.Mark()
	switch st.Phase {
	case "NodeStageVolume", "NodePublishVolume":
		err = r.createPod(ctx, c)
	case "NodeExpandVolume":
		if resizer, err = startResizer(n); err == nil {
			err = r.grow(ctx, c)
		}
	default:
		err = r.deletePod(ctx, c)
	}
	if err != nil {
		return "", "", err
	}
	hold := holdLine(st.Phase)
	held := cluster.WaitFor(ctx, holdWait, "the driver to hold "+st.Phase, func() (bool, error) {
		log, err := n.LogSince(m)
		return strings.Contains(log, hold), err
	})
	// Read before the kill: the held call is logged, failed with its caller's Canceled or
	// DeadlineExceeded, only once it ended. The hold takes the first such call after the
	// driver's start, which may be another volume's (the kubelet retrying an operation an
	// earlier kill left): the kill lands inside that one then.
	calls, err := n.CallsSince(m)
	if err != nil {
		return "", "", err
	}
	answered := 0
	for _, call := range calls {
		if call.Method == st.Phase && (strings.Contains(call.Error, "Canceled") || strings.Contains(call.Error, "DeadlineExceeded")) {
			answered++
		}
	}
	r.kill(st.Target)
	if resizer != nil {
		cluster.StopProc(resizer)
		resizer = nil
	}
	if st.Target == "kubelet" {
		// The hold is spent; the driver goes on without it.
		cluster.StopProc(n.Driver)
		if err := startFaultDriver(ctx, n); err != nil {
			return "", "", err
		}
	}
	switch {
	case held != nil:
		missed = noHold
	case answered > 0:
		missed = fmt.Sprintf("the held %s ended before the kill", st.Phase)
	}
	return missed, "", nil
}

func (r *chaosRunner) kill(target string) {
	if target == "kubelet" {
		cluster.KillProc(r.n.Kubelet)
		r.n.Kubelet = nil
	} else {
		cluster.KillProc(r.n.Driver)
	}
}

// restart starts what was killed again: the kubelet (until Ready with the driver, and the
// registrar told the driver is registered again), or the fault driver on its saved state,
// without a hold.
func (r *chaosRunner) restart(ctx context.Context, target string) error {
	if target == "kubelet" {
		if r.n.Kubelet != nil {
			return nil
		}
		return r.startKubelet(ctx)
	}
	cluster.StopProc(r.n.Driver) // gone already unless the kubelet was the one killed
	if err := startFaultDriver(ctx, r.n); err != nil {
		return err
	}
	return r.ensureRegistrar(ctx)
}

// registeredLine is what node-driver-registrar logs when the kubelet registered the driver.
const registeredLine = `status="plugin_registered:true"`

// startKubelet starts the kubelet and waits (bounded) until the registrar has been told the
// driver is registered: a registration still running when the next kill restarts the driver
// fails, and node-driver-registrar then exits, as it does in a pod for the kubelet to restart.
func (r *chaosRunner) startKubelet(ctx context.Context) error {
	log := filepath.Join(r.n.Dir, "registrar.log")
	from := observe.LogSize(log)
	if err := r.n.StartKubelet(ctx); err != nil {
		return err
	}
	cluster.WaitFor(ctx, 15*time.Second, "the driver registered again", func() (bool, error) {
		b, err := os.ReadFile(log)
		return err == nil && int64(len(b)) > from && strings.Contains(string(b[from:]), registeredLine), nil
	})
	return r.ensureRegistrar(ctx)
}

// ensureRegistrar starts node-driver-registrar again if it exited (after a registration that
// failed while the driver was down: in a cluster the kubelet restarts its container).
func (r *chaosRunner) ensureRegistrar(ctx context.Context) error {
	if r.n.Registrar != nil && r.n.Registrar.Process.Signal(syscall.Signal(0)) == nil {
		return nil
	}
	r.res.RegistrarRestarts++
	return r.n.StartRegistrar()
}

func (r *chaosRunner) createPod(ctx context.Context, c *chaosClaim) error {
	r.pods++
	name := fmt.Sprintf("chaos-%d", r.pods)
	var err error
	if c.attach {
		c.c, err = r.n.AttachClaim(ctx, fmt.Sprintf("%s-%d", c.name, r.pods))
	} else {
		class := expandableClass
		c.c, err = r.n.CreateClaim(ctx, fmt.Sprintf("%s-%d", c.name, r.pods), c.block, func(pv *v1.PersistentVolume, pvc *v1.PersistentVolumeClaim) {
			pv.Spec.StorageClassName = class
			pvc.Spec.StorageClassName = &class
		})
	}
	if err != nil {
		return err
	}
	r.made = append(r.made, c.c)
	pod := r.n.ClaimPod(name, c.c)
	if c.block {
		pod = r.n.Pod(name, []v1.Volume{cluster.ClaimVolume(c.c)}, nil, []v1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}})
	}
	if _, err := r.n.Suite.Client.CoreV1().Pods(r.n.NS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return err
	}
	c.pod = name
	return nil
}

// grow asks for c's claim to grow by 1 MiB over its current request.
func (r *chaosRunner) grow(ctx context.Context, c *chaosClaim) error {
	claims := r.n.Suite.Client.CoreV1().PersistentVolumeClaims(r.n.NS)
	pvc, err := claims.Get(ctx, c.c.PVC, metav1.GetOptions{})
	if err != nil {
		return err
	}
	size := pvc.Spec.Resources.Requests[v1.ResourceStorage]
	size.Add(resource.MustParse("1Mi"))
	patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, size.String())
	_, err = claims.Patch(ctx, c.c.PVC, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func (r *chaosRunner) deletePod(ctx context.Context, c *chaosClaim) error {
	err := r.n.Suite.Client.CoreV1().Pods(r.n.NS).Delete(ctx, c.pod, metav1.DeleteOptions{})
	if err := cluster.IgnoreNotFound(err); err != nil {
		return err
	}
	c.pod = ""
	return nil
}

// converge deletes every pod, with the kubelet and the driver up, and waits (bounded) until
// the node has let go of everything; what is left then is stranded.
func (r *chaosRunner) converge(ctx context.Context) error {
	n := r.n
	if n.Kubelet == nil {
		if err := r.startKubelet(ctx); err != nil {
			return err
		}
	}
	if err := r.ensureRegistrar(ctx); err != nil {
		return err
	}
	pods, err := n.Suite.Client.CoreV1().Pods(n.NS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if err := n.Suite.Client.CoreV1().Pods(n.NS).Delete(ctx, p.Name, metav1.DeleteOptions{}); cluster.IgnoreNotFound(err) != nil {
			return err
		}
	}
	for _, c := range r.claims {
		c.pod = ""
	}
	// Pods go within the pod timeout; then the plugin's own clean-up (kcsi's orphan check:
	// a few grace periods) and the detach.
	err = cluster.WaitFor(ctx, 2*podTimeout, "every pod gone and the node clean", func() (bool, error) {
		return r.count(ctx).total() == 0, nil
	})
	if err != nil && !errors.Is(err, cluster.ErrTimedOut) {
		return err
	}
	r.res.Stranded = r.count(ctx)
	return nil
}

type strandings map[string][]string

func (s strandings) total() int {
	t := 0
	for _, l := range s {
		t += len(l)
	}
	return t
}

// count lists what is left on the node, by kind (strandKinds).
func (r *chaosRunner) count(ctx context.Context) strandings {
	n := r.n
	s := strandings{}
	add := func(kind, what string) { s[kind] = append(s[kind], what) }
	if points, err := mountinfo.Under(n.Root); err != nil {
		add(strandKinds[0], "the mount table: "+err.Error())
	} else {
		for _, p := range points {
			if p != n.Root {
				add(strandKinds[0], p)
			}
		}
	}
	if out, err := exec.Command("losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[1], n.Dir+"/") {
				add(strandKinds[1], f[0]+" "+f[1])
			}
		}
	}
	csiDir := filepath.Join(n.Root, "plugins", "kubernetes.io", "csi")
	for _, pattern := range []string{"*/*/globalmount", "volumeDevices/staging/*"} {
		matches, _ := filepath.Glob(filepath.Join(csiDir, pattern))
		for _, m := range matches {
			add(strandKinds[2], m)
		}
	}
	if entries, err := os.ReadDir(filepath.Join(n.Root, "pods")); err == nil {
		for _, e := range entries {
			add(strandKinds[3], e.Name())
		}
	}
	filepath.WalkDir(n.Root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "vol_data.json" {
			add(strandKinds[4], path)
		}
		return nil
	})
	if pods, err := n.Suite.Client.CoreV1().Pods(n.NS).List(ctx, metav1.ListOptions{}); err != nil {
		add(strandKinds[5], "listing pods: "+err.Error())
	} else {
		for _, p := range pods.Items {
			add(strandKinds[5], p.Name)
		}
	}
	if n.Attach != nil {
		if vas, err := n.Attach.Attachments(ctx); err != nil {
			add(strandKinds[6], "listing: "+err.Error())
		} else {
			for _, va := range vas {
				add(strandKinds[6], va.Name)
			}
		}
	}
	// The fault driver's state, and the attach driver's (hostpath's state.json).
	if b, err := os.ReadFile(filepath.Join(faultState(n), "state.json")); err != nil {
		add(strandKinds[7], "the fault driver's state: "+err.Error())
	} else {
		var st struct {
			Volumes map[string]struct {
				Name       string              `json:"name"`
				StagedPath string              `json:"stagedPath"`
				Published  map[string]struct{} `json:"published"`
			} `json:"volumes"`
		}
		if err := json.Unmarshal(b, &st); err != nil {
			add(strandKinds[7], "the fault driver's state: "+err.Error())
		}
		for _, v := range st.Volumes {
			if v.StagedPath != "" {
				add(strandKinds[7], v.Name+" at "+v.StagedPath)
			}
			for p := range v.Published {
				add(strandKinds[8], v.Name+" at "+p)
			}
		}
	}
	if n.Attach != nil {
		if b, err := os.ReadFile(filepath.Join(n.Attach.State, "state.json")); err == nil {
			var st struct {
				Volumes []struct {
					VolID     string
					Staged    []string
					Published []string
				}
			}
			if err := json.Unmarshal(b, &st); err != nil {
				add(strandKinds[7], "the attach driver's state: "+err.Error())
			}
			for _, v := range st.Volumes {
				for _, p := range v.Staged {
					add(strandKinds[7], v.VolID+" at "+p)
				}
				for _, p := range v.Published {
					add(strandKinds[8], v.VolID+" at "+p)
				}
			}
		}
	}
	return s
}

// chaosReport prints the table and returns why the run failed ("" if it did not): kcsi
// stranded something, a kill meant to land inside a call did not, or a plugin's run errored.
func chaosReport(order []string, results map[string]*chaosResult, kills int, seed uint64) string {
	keys := map[string]bool{}
	for _, res := range results {
		for k := range res.Kills {
			keys[k] = true
		}
	}
	var kk []string
	for k := range keys {
		kk = append(kk, k)
	}
	sort.Strings(kk)
	fmt.Printf("\nchaos: %d kills per plugin, seed %d\n", kills, seed)
	fmt.Printf("%-44s", "")
	for _, p := range order {
		fmt.Printf(" %10s", p)
	}
	fmt.Println()
	row := func(name string, f func(*chaosResult) int) {
		fmt.Printf("%-44s", name)
		for _, p := range order {
			fmt.Printf(" %10d", f(results[p]))
		}
		fmt.Println()
	}
	for _, k := range kk {
		row("kills: "+k, func(r *chaosResult) int { return r.Kills[k] })
	}
	row("kills meant inside a call that missed", func(r *chaosResult) int { return len(r.NotLanded) })
	row("held kills whose hold never showed", func(r *chaosResult) int { return len(r.NoHold) })
	row("held kills not set up (done as random)", func(r *chaosResult) int { return len(r.Skipped) })
	row("registrar restarted (it exited)", func(r *chaosResult) int { return r.RegistrarRestarts })
	for _, kind := range strandKinds {
		row("stranded: "+kind, func(r *chaosResult) int { return len(r.Stranded[kind]) })
	}
	fmt.Printf("%-44s", "run time (s)")
	for _, p := range order {
		fmt.Printf(" %10.0f", results[p].Took.Seconds())
	}
	fmt.Println()
	var failed []string
	for _, p := range order {
		res := results[p]
		for _, kind := range strandKinds {
			for _, what := range res.Stranded[kind] {
				fmt.Printf("[%s] stranded: %s: %s\n", p, kind, what)
			}
		}
		for _, l := range res.NotLanded {
			fmt.Printf("[%s] did not land inside the call: %s\n", p, l)
		}
		for _, l := range res.NoHold {
			fmt.Printf("[%s] the hold never showed (%s), killed outside the call: %s\n", p, holdWait, l)
		}
		for _, l := range res.Skipped {
			fmt.Printf("[%s] not set up: %s\n", p, l)
		}
		for _, l := range res.Errors {
			fmt.Printf("[%s] error: %s\n", p, l)
		}
		// Upstream's are reported: a call it never sends (a volume it strands) is a finding.
		if p == "kcsi" && (res.Stranded.total() > 0 || len(res.Errors) > 0 || len(res.NotLanded) > 0) {
			failed = append(failed, fmt.Sprintf("kcsi stranded %d thing(s), %d error(s), %d kill(s) did not land inside their call",
				res.Stranded.total(), len(res.Errors), len(res.NotLanded)))
		}
	}
	return strings.Join(failed, "; ")
}
