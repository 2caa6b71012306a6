package main

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

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// observation is what one scenario saw with one plugin, by key. Keys starting with "info:"
// are reported but not compared.
type observation struct {
	keys   []string
	values map[string][]string
	// problems kept the scenario from being observed (a log or the mount table the suite
	// could not read); any fails it.
	problems []string
	// publishes counts the NodePublishVolume requests the snapshots saw: a scenario that
	// published nothing tested nothing.
	publishes int
}

func (o *observation) add(key string, lines ...string) {
	if o.values == nil {
		o.values = map[string][]string{}
	}
	if _, ok := o.values[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.values[key] = append(o.values[key], lines...)
}

func (o *observation) check(key string, ok bool, detail string) {
	o.add("check: "+key, fmt.Sprintf("%v", ok))
	if !ok {
		o.add("info: failed check "+key, detail)
	}
}

// checkMounted checks that path is a mount point.
func (o *observation) checkMounted(key, path string) {
	ok, detail := isMountPoint(path)
	o.check(key, ok, detail)
}

func (o *observation) fail(what string, err error) {
	o.problems = append(o.problems, what+": "+err.Error())
}

// snapshot records, under prefix, the CSI requests since m, the plugin's files, the node
// objects and the namespace's pods, claims, volumes and events.
func (n *node) snapshot(ctx context.Context, o *observation, prefix string, m logMark, z *normalizer) {
	calls, err := n.callsSince(m)
	if err != nil {
		o.fail(prefix+" the driver's requests", err)
	}
	o.addCalls(prefix, calls, m, z)
	files, err := z.fileLines(n.root)
	if err != nil {
		o.fail(prefix+" the plugin's files", err)
	}
	o.add(prefix+" files", files...)
	o.add(prefix+" node objects", n.nodeLines(ctx, z)...)
	o.add(prefix+" api objects", n.objectLines(ctx, z)...)
	if n.attach != nil {
		n.attach.snapshot(ctx, o, prefix, m, z)
	}
}

// addCalls records a driver's requests since m under prefix: the stateful ones in full, the
// others by count.
func (o *observation) addCalls(prefix string, calls []call, m logMark, z *normalizer) {
	compared, counts := z.callLines(calls)
	o.add(prefix+" csi requests", compared...)
	countKeys(o, prefix, counts, time.Since(m.at))
	for _, c := range calls {
		if c.Method == "NodePublishVolume" {
			o.publishes++
		}
	}
}

// volumeStats waits until the kubelet asks the drivers for the stats of each volume it
// published for the pod (a NodeGetVolumeStats with the volume's id; the kubelet runs with
// volumeStatsAggPeriod 1 s), checks that it did, and records those requests under prefix,
// de-duplicated (their paths are compared there: a block volume's is its device map path,
// not its publish target).
func (n *node) volumeStats(ctx context.Context, o *observation, prefix string, pod *v1.Pod, z *normalizer) error {
	m := n.mark()
	all, err := n.allCallsSince(logMark{})
	if err != nil {
		return err
	}
	published := map[string]bool{} // volume ids
	for _, c := range all {
		path, _ := c.Request["target_path"].(string)
		id, _ := c.Request["volume_id"].(string)
		if c.Method == "NodePublishVolume" && c.Error == "" && strings.Contains(path, string(pod.UID)) {
			published[id] = true
		}
	}
	var stats []call
	var missing []string
	err = waitFor(ctx, 30*time.Second, "NodeGetVolumeStats of each volume of pod "+pod.Name, func() (bool, error) {
		calls, err := n.allCallsSince(m)
		if err != nil {
			return false, err
		}
		stats, missing = nil, nil
		asked := map[string]bool{}
		for _, c := range calls {
			if c.Method == "NodeGetVolumeStats" {
				stats = append(stats, c)
				id, _ := c.Request["volume_id"].(string)
				asked[id] = true
			}
		}
		for id := range published {
			if !asked[id] {
				missing = append(missing, z.apply(id))
			}
		}
		return len(published) > 0 && len(missing) == 0, nil
	})
	if err != nil && !errors.Is(err, errTimedOut) {
		return err
	}
	o.check(prefix+" the kubelet asks for the stats of each volume it published", err == nil,
		fmt.Sprintf("%d volumes published, no NodeGetVolumeStats for %v", len(published), missing))
	var lines []string
	for _, c := range stats {
		b, _ := json.Marshal(c.Request) // volume_id, volume_path, staging_target_path
		lines = append(lines, z.apply(string(b)))
	}
	slices.Sort(lines)
	o.add(prefix+" NodeGetVolumeStats requests (de-duplicated)", slices.Compact(lines)...)
	return nil
}

type scenario struct {
	name string
	run  func(ctx context.Context, n *node, o *observation) error
}

var scenarios = []scenario{
	{"pod-with-pvc", podWithPVC},
	{"kubelet-restart", kubeletRestart},
	{"block-pvc", blockPVC},
	{"inline-ephemeral", inlineEphemeral},
	{"fsgroup", fsGroup},
}

func statPodDir(root string, pod *v1.Pod) (os.FileInfo, error) {
	return os.Stat(filepath.Join(root, "pods", string(pod.UID)))
}

func mountPath(n *node, pod *v1.Pod, volume string) string {
	return filepath.Join(n.root, "pods", string(pod.UID), "volumes", "kubernetes.io~csi", volume, "mount")
}

const podTimeout = 90 * time.Second

// runPod creates pod, waits for Running, records "running" and deletes it, recording
// "deleted". between runs while the pod runs.
func (n *node) runPod(ctx context.Context, o *observation, pod *v1.Pod, handles map[string]string, between func(*v1.Pod, *normalizer) error) error {
	m := n.mark()
	start := m
	pod, err := n.s.client.CoreV1().Pods(n.ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	defer n.s.client.CoreV1().Pods(n.ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	if pod, err = n.waitRunning(ctx, pod.Name, podTimeout); err != nil {
		return err
	}
	z := n.normalizer(map[string]string{pod.Name: string(pod.UID)}, handles)
	n.snapshot(ctx, o, "running:", m, z)
	if err := n.volumeStats(ctx, o, "running:", pod, z); err != nil {
		return err
	}
	if between != nil {
		if err := between(pod, z); err != nil {
			return err
		}
	}
	m = n.mark()
	if err := n.deletePod(ctx, pod, podTimeout); err != nil {
		return err
	}
	if n.attach != nil {
		if err := n.attach.waitDetached(ctx); err != nil {
			return err
		}
	}
	n.snapshot(ctx, o, "deleted:", m, z)
	// A timer's requests land between the snapshots too (while the suite waits): their
	// buckets over the pod's whole life bound them.
	calls, err := n.allCallsSince(start)
	if err != nil {
		o.fail("pod lifetime: the drivers' requests", err)
	}
	_, counts := z.callLines(calls)
	bucketKeys(o, "pod lifetime:", counts, time.Since(start.at))
	return nil
}

// podWithPVC: a pre-bound PVC; the bind mount is there and data written through it lands in
// the driver's volume; deleting the pod unpublishes, unstages and removes the pod dir.
func podWithPVC(ctx context.Context, n *node, o *observation) error {
	c, err := n.createClaim(ctx, "fs", false)
	if err != nil {
		return err
	}
	defer n.deleteClaim(context.Background(), c)
	pod := n.claimPod("pvc", c)
	return n.runPod(ctx, o, pod, map[string]string{"fs": c.handle}, func(pod *v1.Pod, z *normalizer) error {
		target := mountPath(n, pod, c.pv)
		o.checkMounted("the volume is bind-mounted at the pod's mount path", target)
		werr := os.WriteFile(filepath.Join(target, "hello.txt"), []byte("written through the kubelet's mount"), 0o644)
		b, rerr := os.ReadFile(filepath.Join(n.state, c.handle, "hello.txt"))
		o.check("data written through the mount lands in the driver's volume",
			werr == nil && rerr == nil && string(b) == "written through the kubelet's mount", fmt.Sprintf("write %v, read %v", werr, rerr))
		return nil
	})
}

// kubeletRestart: the kubelet stops while the pod runs and starts again; it reconstructs the
// volume from disk and then tears it down cleanly when the pod goes.
func kubeletRestart(ctx context.Context, n *node, o *observation) error {
	c, err := n.createClaim(ctx, "restart", false)
	if err != nil {
		return err
	}
	defer n.deleteClaim(context.Background(), c)
	pod := n.claimPod("restart", c)
	return n.runPod(ctx, o, pod, map[string]string{"restart": c.handle}, func(pod *v1.Pod, z *normalizer) error {
		n.stopKubelet()
		m := n.mark()
		if err := n.startKubelet(ctx); err != nil {
			return err
		}
		// Upstream reconstructs the volume as uncertain and publishes it again; wait for the
		// volume manager to settle (the re-publish, or 20 s without it).
		err := waitFor(ctx, 20*time.Second, "the re-publish after the restart", func() (bool, error) {
			calls, err := n.callsSince(m)
			return slices.ContainsFunc(calls, func(c call) bool { return c.Method == "NodePublishVolume" }), err
		})
		if err != nil && !errors.Is(err, errTimedOut) {
			return err
		}
		time.Sleep(2 * time.Second)
		if _, err := n.waitRunning(ctx, pod.Name, podTimeout); err != nil {
			return err
		}
		n.snapshot(ctx, o, "restarted:", m, z)
		o.checkMounted("the volume is still mounted after the restart", mountPath(n, pod, c.pv))
		return n.volumeStats(ctx, o, "restarted:", pod, z)
	})
}

// blockPVC: a volumeMode: Block PVC mapped into the pod as a device.
func blockPVC(ctx context.Context, n *node, o *observation) error {
	c, err := n.createClaim(ctx, "block", true)
	if err != nil {
		return err
	}
	defer n.deleteClaim(context.Background(), c)
	pod := n.pod("block", []v1.Volume{claimVolume(c)}, nil, []v1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}})
	return n.runPod(ctx, o, pod, map[string]string{"block": c.handle}, func(pod *v1.Pod, z *normalizer) error {
		dev := filepath.Join(n.root, "pods", string(pod.UID), "volumeDevices", "kubernetes.io~csi", c.pv)
		var st syscall.Stat_t
		err := syscall.Stat(dev, &st)
		o.check("the pod's device map path is a block device", err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFBLK, fmt.Sprintf("%s: %v", dev, err))
		return nil
	})
}

// inlineEphemeral: a CSI ephemeral inline volume (no PV; handle from pod UID and name).
func inlineEphemeral(ctx context.Context, n *node, o *observation) error {
	vol := v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{
		Driver: driverName, VolumeAttributes: map[string]string{"size": "1Mi"}}}}
	pod := n.pod("inline", []v1.Volume{vol}, []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}, nil)
	return n.runPod(ctx, o, pod, nil, func(pod *v1.Pod, z *normalizer) error {
		target := mountPath(n, pod, "scratch")
		o.checkMounted("the inline volume is mounted", target)
		return nil
	})
}

// fsGroup: the pod's fsGroup is applied to the volume (CSIDriver fsGroupPolicy: File; the
// hostpath driver has no VOLUME_MOUNT_GROUP, so the plugin changes ownership itself).
func fsGroup(ctx context.Context, n *node, o *observation) error {
	c, err := n.createClaim(ctx, "fsgroup", false)
	if err != nil {
		return err
	}
	defer n.deleteClaim(context.Background(), c)
	if err := os.WriteFile(filepath.Join(n.state, c.handle, "existing.txt"), []byte("x"), 0o600); err != nil {
		return err
	}
	pod := n.claimPod("fsgroup", c)
	gid := int64(2345)
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: &gid}
	return n.runPod(ctx, o, pod, map[string]string{"fsgroup": c.handle}, func(pod *v1.Pod, z *normalizer) error {
		target := mountPath(n, pod, c.pv)
		var lines []string
		for _, name := range []string{"", "existing.txt"} {
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(target, name), &st); err != nil {
				lines = append(lines, name+": "+err.Error())
				continue
			}
			lines = append(lines, fmt.Sprintf("%q gid %d mode %o", name, st.Gid, st.Mode&0o7777))
		}
		o.add("running: ownership", lines...)
		o.check("fsGroup is applied", strings.Contains(strings.Join(lines, ";"), "gid 2345"), strings.Join(lines, "; "))
		return nil
	})
}
