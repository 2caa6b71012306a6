package scenarios

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"kcsi.dev/kcsi/tests/kubelet/pkg/cluster"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// holdLine is what the fault driver logs when its --hang-rpc hook starts holding a call of
// method.
func holdLine(method string) string { return "test hook: " + method + " hangs until its context ends" }

// faultState is the fault driver's state dir on the node: its volumes and state.json, kept
// across its restarts.
func faultState(n *cluster.Node) string { return filepath.Join(n.Dir, "fault-state") }

// startFaultDriver starts the fault driver as the node's driver (the same socket, driver name
// and node ID as the hostpath driver's) on its state dir, with hooks.
func startFaultDriver(ctx context.Context, n *cluster.Node, hooks ...string) error {
	return n.StartDriver(ctx, n.Suite.FaultDriver, append([]string{"--endpoint=unix://" + n.Socket, "--nodeid=" + n.Name,
		"--statedir=" + faultState(n), "--drivername=" + cluster.DriverName, "-v=5"}, hooks...)...)
}

// driverKilledDuringPublish: an INJECTED HOLD. The real hostpath driver answers NodePublish in
// milliseconds, so no kill could be sure to land inside one; for this scenario the node's
// driver is the project's fault driver (real bind mounts, same socket, driver name and node
// ID), whose --hang-rpc=NodePublishVolume:1 holds the first NodePublishVolume until the
// caller gives up. The driver is SIGKILLed while it holds it (asserted: the hold is in its log
// and no NodePublishVolume was answered), so the kubelet's call fails with Unavailable, which
// upstream's csi_mounter.go SetUp treats as uncertain (not final). The driver then restarts
// on its saved state without the hold, and the kubelet's retry must bring the pod to Running.
func driverKilledDuringPublish(ctx context.Context, n *cluster.Node, o *observe.Observation) (err error) {
	cluster.StopProc(n.Driver)
	defer func() {
		cluster.StopProc(n.Driver)
		if rerr := n.StartHostpath(context.Background()); rerr != nil && err == nil {
			err = fmt.Errorf("restarting the hostpath driver: %w", rerr)
		}
	}()
	if err := startFaultDriver(ctx, n, "--hang-rpc=NodePublishVolume:1"); err != nil {
		return err
	}
	c, err := n.CreateClaim(ctx, "killed", false)
	if err != nil {
		return err
	}
	defer n.DeleteClaim(context.Background(), c)

	m := n.Mark()
	pod, err := n.Suite.Client.CoreV1().Pods(n.NS).Create(ctx, n.ClaimPod("killed", c), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	defer n.Suite.Client.CoreV1().Pods(n.NS).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	if err := cluster.WaitFor(ctx, podTimeout, "the driver to hold NodePublishVolume", func() (bool, error) {
		log, err := n.LogSince(m)
		return strings.Contains(log, holdLine("NodePublishVolume")), err
	}); err != nil {
		return err
	}
	cluster.KillProc(n.Driver)
	calls, err := n.CallsSince(m)
	if err != nil {
		return err
	}
	answered := 0
	for _, c := range calls {
		if c.Method == "NodePublishVolume" {
			answered++
		}
	}
	o.Check("the kill landed while the driver held a NodePublishVolume it had not answered", answered == 0,
		fmt.Sprintf("%d NodePublishVolume answered before the kill", answered))
	if p, err := n.Suite.Client.CoreV1().Pods(n.NS).Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
		o.Check("the pod is not Running while its publish is uncertain", p.Status.Phase != v1.PodRunning, string(p.Status.Phase))
	}

	if err := startFaultDriver(ctx, n); err != nil {
		return err
	}
	if pod, err = n.WaitRunning(ctx, pod.Name, podTimeout); err != nil {
		return err
	}
	z := n.Normalizer(map[string]string{"killed": c.Handle}, pod)
	o.CheckMounted("the volume is mounted after the driver restarted", n.MountPath(pod, c.PV))
	n.Snapshot(ctx, o, "recovered:", m, z)
	if err := volumeStats(ctx, n, o, "recovered:", pod, z); err != nil {
		return err
	}
	m = n.Mark()
	if err := n.DeletePod(ctx, pod, podTimeout); err != nil {
		return err
	}
	n.Snapshot(ctx, o, "deleted:", m, z)
	return nil
}
