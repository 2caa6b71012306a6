package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A driver that dies under an RPC: the kubelet cannot know what the driver did, so the
// operation is uncertain and retried once the driver is back.
func init() {
	scenarios = append(scenarios, scenario{"driver-killed-during-publish", driverKilledDuringPublish})
}

// holdHook is what the fault driver logs when its --hang-rpc hook starts holding a call.
const holdHook = "test hook: NodePublishVolume hangs until its context ends"

// driverKilledDuringPublish: an INJECTED HOLD. The real hostpath driver answers NodePublish in
// milliseconds, so no kill could be sure to land inside one; for this scenario the node's
// driver is the project's fault driver (real bind mounts, same socket, driver name and node
// ID), whose --hang-rpc=NodePublishVolume:1 holds the first NodePublishVolume until the
// caller gives up. The driver is SIGKILLed while it holds it (asserted: the hold is in its log
// and no NodePublishVolume was answered), so the kubelet's call fails with Unavailable, which
// upstream's csi_mounter.go SetUp treats as uncertain (not final). The driver then restarts
// on its saved state without the hold, and the kubelet's retry must bring the pod to Running.
func driverKilledDuringPublish(ctx context.Context, n *node, o *observation) (err error) {
	stopProc(n.driver)
	defer func() {
		stopProc(n.driver)
		if rerr := n.startHostpath(context.Background()); rerr != nil && err == nil {
			err = fmt.Errorf("restarting the hostpath driver: %w", rerr)
		}
	}()
	startFaultDriver := func(hooks ...string) error {
		return n.startDriver(ctx, n.s.faultDriver, append([]string{"--endpoint=unix://" + n.socket, "--nodeid=" + n.name,
			"--statedir=" + filepath.Join(n.dir, "fault-state"), "--drivername=" + driverName, "-v=5"}, hooks...)...)
	}
	if err := startFaultDriver("--hang-rpc=NodePublishVolume:1"); err != nil {
		return err
	}
	c, err := n.createClaim(ctx, "killed", false)
	if err != nil {
		return err
	}
	defer n.deleteClaim(context.Background(), c)

	m := n.mark()
	pod, err := n.s.client.CoreV1().Pods(n.ns).Create(ctx, n.claimPod("killed", c), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	defer n.s.client.CoreV1().Pods(n.ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	if err := waitFor(ctx, podTimeout, "the driver to hold NodePublishVolume", func() (bool, error) {
		log, err := n.logSince(m)
		return strings.Contains(log, holdHook), err
	}); err != nil {
		return err
	}
	killProc(n.driver)
	calls, err := n.callsSince(m)
	if err != nil {
		return err
	}
	answered := 0
	for _, c := range calls {
		if c.Method == "NodePublishVolume" {
			answered++
		}
	}
	o.check("the kill landed while the driver held a NodePublishVolume it had not answered", answered == 0,
		fmt.Sprintf("%d NodePublishVolume answered before the kill", answered))
	if p, err := n.s.client.CoreV1().Pods(n.ns).Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
		o.check("the pod is not Running while its publish is uncertain", p.Status.Phase != v1.PodRunning, string(p.Status.Phase))
	}

	if err := startFaultDriver(); err != nil {
		return err
	}
	if pod, err = n.waitRunning(ctx, pod.Name, podTimeout); err != nil {
		return err
	}
	z := n.normalizer(map[string]string{pod.Name: string(pod.UID)}, map[string]string{"killed": c.handle})
	o.checkMounted("the volume is mounted after the driver restarted", mountPath(n, pod, c.pv))
	n.snapshot(ctx, o, "recovered:", m, z)
	if err := n.volumeStats(ctx, o, "recovered:", pod, z); err != nil {
		return err
	}
	m = n.mark()
	if err := n.deletePod(ctx, pod, podTimeout); err != nil {
		return err
	}
	n.snapshot(ctx, o, "deleted:", m, z)
	return nil
}
