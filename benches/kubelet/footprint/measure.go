package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kcsi.dev/kcsi/benches/kubelet/procmem"
	"kcsi.dev/kcsi/tests/kubelet/pkg/cluster"
)

// footprint is the readings of one plugin's kubelet and attach/detach controller.
type footprint struct {
	kubelet, controller []procmem.Usage
}

// measure starts the plugin's node, runs one pod on an attach-required volume, reads the
// kubelet and the controller while it runs, then tears it all down and checks that nothing
// is left mounted.
func measure(ctx context.Context, s *cluster.Suite, plugin string, steady, every time.Duration) (_ *footprint, err error) {
	n, err := s.StartNode(ctx, plugin)
	nodes := map[string]*cluster.Node{plugin: n}
	defer func() {
		if left := cluster.StopNodes(nodes); len(left) > 0 && err == nil {
			err = fmt.Errorf("%v", left)
		}
	}()
	if err != nil {
		return nil, err
	}
	c, err := n.AttachClaim(ctx, "footprint")
	if err != nil {
		return nil, err
	}
	defer n.DeleteClaim(context.Background(), c)
	pod, err := n.Suite.Client.CoreV1().Pods(n.NS).Create(ctx, n.ClaimPod("footprint", c), metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	if _, err := n.WaitRunning(ctx, pod.Name, 2*time.Minute); err != nil {
		return nil, err
	}
	fmt.Printf("[%s] one pod Running on an attach-required volume; reading for %s\n", plugin, steady)
	r := &footprint{}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for end := time.Now().Add(steady); ; {
		k, err := procmem.Read(n.Kubelet.Process.Pid)
		if err != nil {
			return nil, fmt.Errorf("reading the kubelet: %w", err)
		}
		ctl, err := procmem.Read(n.Attach.Controller.Process.Pid)
		if err != nil {
			return nil, fmt.Errorf("reading the attach/detach controller: %w", err)
		}
		r.kubelet, r.controller = append(r.kubelet, k), append(r.controller, ctl)
		if !time.Now().Before(end) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	if err := n.DeletePod(ctx, pod, 2*time.Minute); err != nil {
		return nil, err
	}
	return r, n.Attach.WaitDetached(ctx)
}
