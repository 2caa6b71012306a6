package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kcsi.dev/kcsi/internal/mountinfo"
	"kcsi.dev/kcsi/tests/kubelet/pkg/cluster"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// windowGrace is kcsi's OrphanGracePeriod (volumeplugin.Config, the kubelet's
// -orphan-grace-period) for the kubelet these scenarios restart. kcsi unstages a leftover on
// the check at least one grace period after the first that found no pod using it, and checks
// every half grace period: with the default 30 s each run would wait about 45 s for it, and
// upstream's run, which never unstages, as long. A few seconds still covers what the grace
// period is for here: the restarted kubelet registers the driver and sees the pods bound to it
// within a second or two on this node.
const windowGrace = 3 * time.Second

// windowWait bounds the wait for the unstage after the restart: the first check half a grace
// period after the kubelet starts, the unstage a grace period after it, another grace period
// if the driver was not registered yet, and the kubelet's start.
const windowWait = 3*windowGrace + 15*time.Second

// unstageWindow and unstageWindowBlock: kubernetes#85476, a kubelet killed between a volume's
// last NodeUnpublishVolume and its NodeUnstageVolume, then restarted with no pod using the
// volume. The kubelet rebuilds its state from the pod dirs only, so it never learns of the
// staged volume again: upstream's plugin leaves it staged for good; kcsi's (orphans.go)
// unstages it once no pod bound to the node has referenced it for the grace period.
//
// An INJECTED HOLD, as in driver-killed-during-publish: the node's driver is the fault driver,
// whose --hang-rpc=NodeUnstageVolume:1 holds the first NodeUnstageVolume until its caller
// goes, so the SIGKILL lands in the window for sure (asserted from the driver's log: the
// NodeUnpublishVolume answered, no NodeUnstageVolume). Its NodeStage is bookkeeping, as
// csi-driver-host-path's: "staged" is the driver's state file and the plugin's global mount
// dir (filesystem) or block staging dir with its vol_data.json, and "unstaged" that neither is
// left and nothing is mounted there.
//
// The other side, never unstaging what a pod uses: a second pod with its own claim runs
// through the kill and the restart, and its volume must stay staged and published and the pod
// Running, with either plugin (compared). What differs on purpose is checked for kcsi alone
// (CheckKcsi) and upstream's outcome reported beside it: the unstage, and how long after the
// restart it came. What upstream left is then unstaged by hand, as an operator would, and
// the pod's deletion compared in full.
func unstageWindow(ctx context.Context, n *cluster.Node, o *observe.Observation) error {
	return unstageWindowRun(ctx, n, o, false)
}

func unstageWindowBlock(ctx context.Context, n *cluster.Node, o *observe.Observation) error {
	return unstageWindowRun(ctx, n, o, true)
}

func unstageWindowRun(ctx context.Context, n *cluster.Node, o *observe.Observation, block bool) (err error) {
	o.RequestsDifferBecause("after the restart kcsi's plugin lists the pods bound to its node to find the volumes no pod uses (bindings/go/volumeplugin/orphans.go), which upstream's never does; and in this scenario upstream's restarted kubelet created and deleted its CSINode where kcsi's only updated it (seen once, cause not yet known)")
	kubeletArgs := n.KubeletArgs
	cluster.StopProc(n.Driver)
	defer func() {
		n.KubeletArgs = kubeletArgs
		cluster.StopProc(n.Driver)
		if rerr := n.StartHostpath(context.Background()); rerr != nil && err == nil {
			err = fmt.Errorf("restarting the hostpath driver: %w", rerr)
		}
		if n.Kubelet == nil { // failed between the kill and the restart
			if rerr := n.StartKubelet(context.Background()); rerr != nil && err == nil {
				err = fmt.Errorf("restarting the kubelet: %w", rerr)
			}
		}
	}()
	if err := startFaultDriver(ctx, n, "--hang-rpc=NodeUnstageVolume:1"); err != nil {
		return err
	}
	suffix := ""
	if block {
		suffix = "-blk"
	}
	keptName, windowName := "kept"+suffix, "window"+suffix
	kept, err := n.CreateClaim(ctx, keptName, block)
	if err != nil {
		return err
	}
	defer n.DeleteClaim(context.Background(), kept)
	window, err := n.CreateClaim(ctx, windowName, block)
	if err != nil {
		return err
	}
	defer n.DeleteClaim(context.Background(), window)

	// One pod after the other, so the driver sees their requests in one order with either plugin.
	m := n.Mark()
	var pods []*v1.Pod
	for _, c := range []struct {
		name  string
		claim *cluster.Claim
	}{{keptName, kept}, {windowName, window}} {
		pod := n.ClaimPod(c.name, c.claim)
		if block {
			pod = n.Pod(c.name, []v1.Volume{cluster.ClaimVolume(c.claim)}, nil, []v1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}})
		}
		pod, err := n.Suite.Client.CoreV1().Pods(n.NS).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		defer n.Suite.Client.CoreV1().Pods(n.NS).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
		if pod, err = n.WaitRunning(ctx, pod.Name, podTimeout); err != nil {
			return err
		}
		pods = append(pods, pod)
	}
	keptPod, windowPod := pods[0], pods[1]
	z := n.Normalizer(map[string]string{keptName: kept.Handle, windowName: window.Handle}, keptPod, windowPod)
	n.Snapshot(ctx, o, "running:", m, z)
	staging, err := faultStaged(n, window.Handle)
	if err != nil {
		return err
	}
	if staging == "" {
		return fmt.Errorf("the fault driver does not record %s staged while its pod runs", windowName)
	}

	// The kill, in the window.
	m = n.Mark()
	if err := n.Suite.Client.CoreV1().Pods(n.NS).Delete(ctx, windowPod.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	hold := holdLine("NodeUnstageVolume")
	if err := cluster.WaitFor(ctx, podTimeout, "the driver to hold NodeUnstageVolume", func() (bool, error) {
		log, err := n.LogSince(m)
		return strings.Contains(log, hold), err
	}); err != nil {
		return err
	}
	// Read before the kill: the held call is logged, failed, once the killed kubelet's
	// connection goes.
	calls, err := n.CallsSince(m)
	if err != nil {
		return err
	}
	cluster.KillProc(n.Kubelet)
	n.Kubelet = nil
	unpublished, unstages := 0, 0
	for _, c := range calls {
		if c.Request["volume_id"] != window.Handle {
			continue
		}
		switch {
		case c.Method == "NodeUnpublishVolume" && c.Error == "":
			unpublished++
		case c.Method == "NodeUnstageVolume":
			unstages++
		}
	}
	o.Check("the kubelet was killed after its NodeUnpublishVolume was answered and before its NodeUnstageVolume was",
		unpublished > 0 && unstages == 0, fmt.Sprintf("%d NodeUnpublishVolume answered, %d NodeUnstageVolume", unpublished, unstages))
	compared, _ := z.CallLines(calls)
	o.Add("killed: csi requests", compared...)
	// The held call ends when the killed kubelet's connection goes.
	held := "(still held after 10 s)"
	cluster.WaitFor(ctx, 10*time.Second, "the held NodeUnstageVolume to end", func() (bool, error) {
		calls, err := n.CallsSince(m)
		for _, c := range calls {
			if c.Method == "NodeUnstageVolume" {
				held = "error: " + c.Error
				return true, nil
			}
		}
		return false, err
	})
	o.Add("info: killed: the held NodeUnstageVolume ended with", held)

	// The restart: the driver on its saved state without the hold, the kubelet with the
	// short grace period.
	cluster.StopProc(n.Driver)
	if err := startFaultDriver(ctx, n); err != nil {
		return err
	}
	n.KubeletArgs = append(slices.Clone(kubeletArgs), "-orphan-grace-period="+windowGrace.String())
	kubeletLog := filepath.Join(n.Dir, "kubelet.log")
	logFrom := observe.LogSize(kubeletLog)
	m = n.Mark()
	if err := n.StartKubelet(ctx); err != nil {
		return err
	}
	n.KubeletArgs = kubeletArgs
	// Both plugins publish the running pod's volume again (reconstructed, uncertain).
	err = cluster.WaitFor(ctx, 20*time.Second, "the re-publish of "+keptName+" after the restart", func() (bool, error) {
		calls, err := n.CallsSince(m)
		return slices.ContainsFunc(calls, func(c observe.Call) bool {
			return c.Method == "NodePublishVolume" && c.Request["volume_id"] == kept.Handle
		}), err
	})
	if err != nil && !errors.Is(err, cluster.ErrTimedOut) {
		return err
	}
	// The fault driver's request lines have no time of their own: the time is when a poll
	// (every 100 ms) first saw it unstaged.
	var unstagedAt time.Time
	err = cluster.WaitFor(ctx, windowWait-time.Since(m.At), windowName+" unstaged after the restart", func() (bool, error) {
		st, err := faultStaged(n, window.Handle)
		done := st == "" && len(stagedFiles(staging, window, block)) == 0
		if done {
			unstagedAt = time.Now()
		}
		return done, err
	})
	if err != nil && !errors.Is(err, cluster.ErrTimedOut) {
		return err
	}
	if keptPod, err = n.WaitRunning(ctx, keptPod.Name, podTimeout); err != nil {
		return err
	}

	// What each plugin did after the restart, and what is left.
	if calls, err = n.CallsSince(m); err != nil {
		return err
	}
	var keptCalls, windowCalls []observe.Call
	unstages = 0
	for _, c := range calls {
		switch c.Request["volume_id"] {
		case kept.Handle:
			keptCalls = append(keptCalls, c)
		case window.Handle:
			windowCalls = append(windowCalls, c)
			if c.Method == "NodeUnstageVolume" {
				unstages++
			}
		}
	}
	compared, _ = z.CallLines(keptCalls)
	o.Add("restarted: csi requests of the volume the running pod uses", compared...)
	compared, _ = z.CallLines(windowCalls)
	o.Add("info: restarted: csi requests of the volume no pod uses", compared...)
	when := fmt.Sprintf("not within %.0f s of the kubelet restart", windowWait.Seconds())
	if !unstagedAt.IsZero() {
		when = fmt.Sprintf("%.1f s after the kubelet restart (grace period %s)", unstagedAt.Sub(m.At).Seconds(), windowGrace)
	}
	o.Add("info: restarted: the volume no pod uses was unstaged", when)
	// kcsi's own account of it, in the kubelet's log.
	if b, err := os.ReadFile(kubeletLog); err == nil && int64(len(b)) >= logFrom {
		var lines []string
		for _, l := range strings.Split(string(b[logFrom:]), "\n") {
			if strings.Contains(l, "kcsi: unstaged a volume") || strings.Contains(l, "kcsi: volumes staged before this start") {
				lines = append(lines, z.Apply(l[strings.Index(l, "kcsi: "):]))
			}
		}
		o.Add("info: restarted: the kubelet's log", lines...)
	}
	o.CheckKcsi("the restarted kubelet's plugin sent the volume no pod uses one NodeUnstageVolume", unstages == 1,
		fmt.Sprintf("%d NodeUnstageVolume", unstages))
	st, err := faultStaged(n, window.Handle)
	if err != nil {
		return err
	}
	o.CheckKcsi("the driver no longer has the volume no pod uses staged", st == "", z.Apply("the driver records it staged at "+st))
	left := stagedFiles(staging, window, block)
	o.CheckKcsi("the global mount of the volume no pod uses was unstaged after the restart", len(left) == 0,
		z.Apply("left: "+strings.Join(left, ", ")))
	var leftLines []string
	if st != "" {
		leftLines = append(leftLines, z.Apply("the driver records it staged at "+st))
	}
	for _, l := range left {
		leftLines = append(leftLines, z.Apply(l))
	}
	if len(leftLines) == 0 {
		leftLines = []string{"nothing"}
	}
	o.Add("info: restarted: left staged of the volume no pod uses", leftLines...)

	st, err = faultStaged(n, kept.Handle)
	if err != nil {
		return err
	}
	o.Check("the volume the running pod uses is still staged in the driver", st != "", "the driver records it unstaged")
	if block {
		dev := filepath.Join(n.Root, "pods", string(keptPod.UID), "volumeDevices", "kubernetes.io~csi", kept.PV)
		var sb syscall.Stat_t
		err := syscall.Stat(dev, &sb)
		o.Check("the running pod's device map path is still a block device", err == nil && sb.Mode&syscall.S_IFMT == syscall.S_IFBLK, fmt.Sprintf("%s: %v", dev, err))
	} else {
		o.CheckMounted("the volume the running pod uses is still mounted at its mount path", n.MountPath(keptPod, kept.PV))
	}
	o.Check("the pod that uses a volume is Running through the restart", keptPod.Status.Phase == v1.PodRunning, string(keptPod.Status.Phase))

	// What upstream left, unstaged by hand; then the running pod's deletion, compared in full.
	if err := unstageByHand(ctx, n, window, staging, block); err != nil {
		return err
	}
	if err := n.DeletePod(ctx, windowPod, podTimeout); err != nil {
		return err
	}
	m = n.Mark()
	if err := n.DeletePod(ctx, keptPod, podTimeout); err != nil {
		return err
	}
	n.Snapshot(ctx, o, "deleted:", m, z)
	return nil
}

// faultStaged is where the fault driver's state file records the volume staged ("": not).
func faultStaged(n *cluster.Node, handle string) (string, error) {
	file := filepath.Join(faultState(n), "state.json")
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	var s struct {
		Volumes map[string]struct {
			StagedPath string `json:"stagedPath"`
		} `json:"volumes"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	v, ok := s.Volumes[handle]
	if !ok {
		return "", fmt.Errorf("%s: no volume %s", file, handle)
	}
	return v.StagedPath, nil
}

// stagedDirs are the dirs the CSI plugin keeps for a staged volume, as upstream's plugin
// removes them when it unstages: a filesystem volume's <driver>/<sha256(handle)> with its
// globalmount and vol_data.json (csi_attacher.go UnmountDevice, removeMountDir); a block
// volume's volumeDevices/staging/<spec>, volumeDevices/publish/<spec> and volumeDevices/<spec>
// with data/vol_data.json (csi_block.go TearDownDevice, cleanupOrphanDeviceFiles).
func stagedDirs(staging string, c *cluster.Claim, block bool) []string {
	if !block {
		return []string{filepath.Dir(staging)}
	}
	devDir := filepath.Dir(filepath.Dir(staging))
	return []string{staging, filepath.Join(devDir, "publish", c.PV), filepath.Join(devDir, c.PV)}
}

// stagedFiles lists what is left of a staged volume: its stagedDirs that exist, and any mount
// point under them.
func stagedFiles(staging string, c *cluster.Claim, block bool) []string {
	var left []string
	for _, d := range stagedDirs(staging, c, block) {
		if _, err := os.Lstat(d); err == nil {
			left = append(left, d)
		}
		points, err := mountinfo.Under(d)
		if err != nil {
			left = append(left, "the mount table: "+err.Error())
		}
		for _, p := range points {
			left = append(left, p+" (mounted)")
		}
	}
	return left
}

// unstageByHand unstages what a plugin left staged (upstream's, in these scenarios), as an
// operator would: NodeUnstageVolume to the driver, then the plugin's dirs (stagedDirs), each
// only if nothing is mounted under it.
func unstageByHand(ctx context.Context, n *cluster.Node, c *cluster.Claim, staging string, block bool) error {
	st, err := faultStaged(n, c.Handle)
	if err != nil {
		return err
	}
	if st != "" {
		_, err := csi.NewNodeClient(n.CSI).NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: c.Handle, StagingTargetPath: st})
		if err != nil {
			return fmt.Errorf("unstaging %s by hand: %w", c.PV, err)
		}
	}
	for _, d := range stagedDirs(staging, c, block) {
		points, err := mountinfo.Under(d)
		if err != nil {
			return err
		}
		if len(points) > 0 {
			return fmt.Errorf("unstaging %s by hand: %v still mounted", c.PV, points)
		}
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	return nil
}
