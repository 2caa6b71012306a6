package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"kcsi.dev/kcsi/tests/kubelet/pkg/cluster"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

const podTimeout = 90 * time.Second

// runPod creates pod, waits for Running, records "running" and deletes it, recording
// "deleted". between runs while the pod runs.
func runPod(ctx context.Context, n *cluster.Node, o *observe.Observation, pod *v1.Pod, handles map[string]string, between func(*v1.Pod, *observe.Normalizer) error) error {
	m := n.Mark()
	start := m
	pod, err := n.Suite.Client.CoreV1().Pods(n.NS).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	defer n.Suite.Client.CoreV1().Pods(n.NS).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	if pod, err = n.WaitRunning(ctx, pod.Name, podTimeout); err != nil {
		return err
	}
	z := n.Normalizer(handles, pod)
	n.Snapshot(ctx, o, "running:", m, z)
	if err := volumeStats(ctx, n, o, "running:", pod, z); err != nil {
		return err
	}
	if between != nil {
		if err := between(pod, z); err != nil {
			return err
		}
	}
	m = n.Mark()
	if err := n.DeletePod(ctx, pod, podTimeout); err != nil {
		return err
	}
	if n.Attach != nil {
		if err := n.Attach.WaitDetached(ctx); err != nil {
			return err
		}
	}
	n.Snapshot(ctx, o, "deleted:", m, z)
	// A timer's requests land between the snapshots too (while the suite waits): their
	// buckets over the pod's whole life bound them.
	calls, err := n.AllCallsSince(start)
	if err != nil {
		o.Fail("pod lifetime: the drivers' requests", err)
	}
	_, counts := z.CallLines(calls)
	observe.BucketKeys(o, "pod lifetime:", counts, time.Since(start.At))
	return nil
}

// volumeStats waits until the kubelet asks the drivers for the stats of each volume it
// published for the pod (a NodeGetVolumeStats with the volume's id; the kubelet runs with
// volumeStatsAggPeriod 1 s), checks that it did, and records those requests under prefix,
// de-duplicated (their paths are compared there: a block volume's is its device map path,
// not its publish target).
func volumeStats(ctx context.Context, n *cluster.Node, o *observe.Observation, prefix string, pod *v1.Pod, z *observe.Normalizer) error {
	m := n.Mark()
	all, err := n.AllCallsSince(observe.Mark{})
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
	var stats []observe.Call
	var missing []string
	err = cluster.WaitFor(ctx, 30*time.Second, "NodeGetVolumeStats of each volume of pod "+pod.Name, func() (bool, error) {
		calls, err := n.AllCallsSince(m)
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
				missing = append(missing, z.Apply(id))
			}
		}
		return len(published) > 0 && len(missing) == 0, nil
	})
	if err != nil && !errors.Is(err, cluster.ErrTimedOut) {
		return err
	}
	o.Check(prefix+" the kubelet asks for the stats of each volume it published", err == nil,
		fmt.Sprintf("%d volumes published, no NodeGetVolumeStats for %v", len(published), missing))
	var lines []string
	for _, c := range stats {
		b, _ := json.Marshal(c.Request) // volume_id, volume_path, staging_target_path
		lines = append(lines, z.Apply(string(b)))
	}
	slices.Sort(lines)
	o.Add(prefix+" NodeGetVolumeStats requests (de-duplicated)", slices.Compact(lines)...)
	return nil
}
