package scenarios

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"kcsi.dev/kcsi/tests/kubelet/pkg/cluster"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// podWithPVC: a pre-bound PVC; the bind mount is there and data written through it lands in
// the driver's volume; deleting the pod unpublishes, unstages and removes the pod dir.
func podWithPVC(ctx context.Context, n *cluster.Node, o *observe.Observation) error {
	c, err := n.CreateClaim(ctx, "fs", false)
	if err != nil {
		return err
	}
	defer n.DeleteClaim(context.Background(), c)
	pod := n.ClaimPod("pvc", c)
	return runPod(ctx, n, o, pod, map[string]string{"fs": c.Handle}, func(pod *v1.Pod, z *observe.Normalizer) error {
		target := n.MountPath(pod, c.PV)
		o.CheckMounted("the volume is bind-mounted at the pod's mount path", target)
		werr := os.WriteFile(filepath.Join(target, "hello.txt"), []byte("written through the kubelet's mount"), 0o644)
		b, rerr := os.ReadFile(filepath.Join(n.State, c.Handle, "hello.txt"))
		o.Check("data written through the mount lands in the driver's volume",
			werr == nil && rerr == nil && string(b) == "written through the kubelet's mount", fmt.Sprintf("write %v, read %v", werr, rerr))
		return nil
	})
}

// kubeletRestart: the kubelet stops while the pod runs and starts again; it reconstructs the
// volume from disk and then tears it down cleanly when the pod goes.
func kubeletRestart(ctx context.Context, n *cluster.Node, o *observe.Observation) error {
	c, err := n.CreateClaim(ctx, "restart", false)
	if err != nil {
		return err
	}
	defer n.DeleteClaim(context.Background(), c)
	pod := n.ClaimPod("restart", c)
	return runPod(ctx, n, o, pod, map[string]string{"restart": c.Handle}, func(pod *v1.Pod, z *observe.Normalizer) error {
		n.StopKubelet()
		m := n.Mark()
		ready, err := n.WatchReady(ctx)
		if err != nil {
			return err
		}
		err = n.StartKubelet(ctx)
		if err == nil {
			err = ready.WaitPostedReady(ctx, 30*time.Second)
		}
		// When the restarted node said Ready (the scheduler and any alert on node readiness
		// see a blip until it does).
		ready.Record(o, "restarted:")
		if err != nil {
			return err
		}
		// Upstream reconstructs the volume as uncertain and publishes it again; wait for the
		// volume manager to settle (the re-publish, or 20 s without it).
		err = cluster.WaitFor(ctx, 20*time.Second, "the re-publish after the restart", func() (bool, error) {
			calls, err := n.CallsSince(m)
			return slices.ContainsFunc(calls, func(c observe.Call) bool { return c.Method == "NodePublishVolume" }), err
		})
		if err != nil && !errors.Is(err, cluster.ErrTimedOut) {
			return err
		}
		time.Sleep(2 * time.Second)
		if _, err := n.WaitRunning(ctx, pod.Name, podTimeout); err != nil {
			return err
		}
		n.Snapshot(ctx, o, "restarted:", m, z)
		o.CheckMounted("the volume is still mounted after the restart", n.MountPath(pod, c.PV))
		return volumeStats(ctx, n, o, "restarted:", pod, z)
	})
}

// blockPVC: a volumeMode: Block PVC mapped into the pod as a device.
func blockPVC(ctx context.Context, n *cluster.Node, o *observe.Observation) error {
	c, err := n.CreateClaim(ctx, "block", true)
	if err != nil {
		return err
	}
	defer n.DeleteClaim(context.Background(), c)
	pod := n.Pod("block", []v1.Volume{cluster.ClaimVolume(c)}, nil, []v1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}})
	return runPod(ctx, n, o, pod, map[string]string{"block": c.Handle}, func(pod *v1.Pod, z *observe.Normalizer) error {
		dev := filepath.Join(n.Root, "pods", string(pod.UID), "volumeDevices", "kubernetes.io~csi", c.PV)
		var st syscall.Stat_t
		err := syscall.Stat(dev, &st)
		o.Check("the pod's device map path is a block device", err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFBLK, fmt.Sprintf("%s: %v", dev, err))
		return nil
	})
}

// inlineEphemeral: a CSI ephemeral inline volume (no PV; its handle is made from the pod UID
// and the volume name, which the normalizer rewrites only as upstream makes it: cluster.AddPod).
func inlineEphemeral(ctx context.Context, n *cluster.Node, o *observe.Observation) error {
	vol := v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{
		Driver: cluster.DriverName, VolumeAttributes: map[string]string{"size": "1Mi"}}}}
	pod := n.Pod("inline", []v1.Volume{vol}, []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}, nil)
	return runPod(ctx, n, o, pod, nil, func(pod *v1.Pod, z *observe.Normalizer) error {
		target := n.MountPath(pod, "scratch")
		o.CheckMounted("the inline volume is mounted", target)
		return nil
	})
}

// fsGroup: the pod's fsGroup is applied to the volume (CSIDriver fsGroupPolicy: File; the
// hostpath driver has no VOLUME_MOUNT_GROUP, so the plugin changes ownership itself).
func fsGroup(ctx context.Context, n *cluster.Node, o *observe.Observation) error {
	c, err := n.CreateClaim(ctx, "fsgroup", false)
	if err != nil {
		return err
	}
	defer n.DeleteClaim(context.Background(), c)
	if err := os.WriteFile(filepath.Join(n.State, c.Handle, "existing.txt"), []byte("x"), 0o600); err != nil {
		return err
	}
	pod := n.ClaimPod("fsgroup", c)
	gid := int64(2345)
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: &gid}
	return runPod(ctx, n, o, pod, map[string]string{"fsgroup": c.Handle}, func(pod *v1.Pod, z *observe.Normalizer) error {
		target := n.MountPath(pod, c.PV)
		var lines []string
		for _, name := range []string{"", "existing.txt"} {
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(target, name), &st); err != nil {
				lines = append(lines, name+": "+err.Error())
				continue
			}
			lines = append(lines, fmt.Sprintf("%q gid %d mode %o", name, st.Gid, st.Mode&0o7777))
		}
		o.Add("running: ownership", lines...)
		o.Check("fsGroup is applied", strings.Contains(strings.Join(lines, ";"), "gid 2345"), strings.Join(lines, "; "))
		return nil
	})
}
