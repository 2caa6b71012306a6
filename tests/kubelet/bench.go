package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

type benchResult struct {
	running, torndown time.Duration
	// With attach-required volumes: all VolumeAttachments attached, all detached (pods gone
	// and every VolumeAttachment deleted), and per volume the time from the external-attacher
	// setting status.attached to the controller's Attach returning, seen as the volume
	// entering node.status.volumesAttached (the controller's status updater, 100 ms loop).
	attached, detached time.Duration
	attachReturn       []time.Duration
}

// benchmark creates count pods with one PVC each at once and times until all are Running
// and, after deleting them all at once, until all are gone with their pod dirs (and, with
// attach, detached).
func (n *node) benchmark(ctx context.Context, count int, attach bool) (benchResult, error) {
	var r benchResult
	claims := make([]*claim, count)
	for i := range claims {
		name := fmt.Sprintf("bench-%02d", i)
		var c *claim
		var err error
		if attach {
			c, err = n.attachClaim(ctx, "attach-"+name)
		} else {
			c, err = n.createClaim(ctx, name, false)
		}
		if err != nil {
			return r, err
		}
		claims[i] = c
		defer n.deleteClaim(context.Background(), c)
	}
	var seen *attachTimes
	if attach {
		var err error
		if seen, err = n.watchAttach(ctx); err != nil {
			return r, err
		}
		defer seen.stop()
	}
	pods := make([]*v1.Pod, count)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, count)
	for i, c := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := n.s.client.CoreV1().Pods(n.ns).Create(ctx, n.pod(fmt.Sprintf("bench-%02d", i), []v1.Volume{claimVolume(c)},
				[]v1.VolumeMount{{Name: "data", MountPath: "/data"}}, nil), metav1.CreateOptions{})
			if err != nil {
				errs <- err
				return
			}
			pods[i] = p
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return r, err
	}
	for _, p := range pods {
		defer n.s.client.CoreV1().Pods(n.ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
	}
	for _, p := range pods {
		if _, err := n.waitRunning(ctx, p.Name, 5*time.Minute); err != nil {
			return r, err
		}
	}
	r.running = time.Since(start)
	if attach {
		var err error
		if r.attached, r.attachReturn, err = seen.result(claims, start); err != nil {
			return r, err
		}
	}

	start = time.Now()
	for _, p := range pods {
		if err := n.s.client.CoreV1().Pods(n.ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			return r, err
		}
	}
	for _, p := range pods {
		if err := n.deletePod(ctx, p, 5*time.Minute); err != nil {
			return r, err
		}
	}
	r.torndown = time.Since(start)
	kind := "one CSI PVC each"
	if attach {
		if err := n.attach.waitDetached(ctx); err != nil {
			return r, err
		}
		r.detached = time.Since(start)
		kind = "one attach-required CSI PVC each"
	}
	fmt.Printf("[%s] benchmark: %d pods with %s Running in %.1f s, torn down in %.1f s\n", n.plugin, count, kind, r.running.Seconds(), r.torndown.Seconds())
	return r, nil
}

// attachTimes records when the suite's watches first saw each VolumeAttachment of the node
// attached (by PV name) and each volume in the Node's status.volumesAttached.
type attachTimes struct {
	mu               sync.Mutex
	attached, inNode map[string]time.Time
	watches          []watch.Interface
}

func (n *node) watchAttach(ctx context.Context) (*attachTimes, error) {
	t := &attachTimes{attached: map[string]time.Time{}, inNode: map[string]time.Time{}}
	vas, err := n.s.client.StorageV1().VolumeAttachments().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	nodes, err := n.s.client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", n.name).String()})
	if err != nil {
		vas.Stop()
		return nil, err
	}
	t.watches = []watch.Interface{vas, nodes}
	first := func(m map[string]time.Time, key string, now time.Time) {
		if _, ok := m[key]; !ok {
			m[key] = now
		}
	}
	go func() {
		for ev := range vas.ResultChan() {
			va, ok := ev.Object.(*storagev1.VolumeAttachment)
			if ok && va.Spec.NodeName == n.name && va.Status.Attached && va.Spec.Source.PersistentVolumeName != nil {
				now := time.Now()
				t.mu.Lock()
				first(t.attached, *va.Spec.Source.PersistentVolumeName, now)
				t.mu.Unlock()
			}
		}
	}()
	go func() {
		for ev := range nodes.ResultChan() {
			nd, ok := ev.Object.(*v1.Node)
			if !ok {
				continue
			}
			now := time.Now()
			t.mu.Lock()
			for _, v := range nd.Status.VolumesAttached {
				first(t.inNode, string(v.Name), now)
			}
			t.mu.Unlock()
		}
	}()
	return t, nil
}

func (t *attachTimes) stop() {
	for _, w := range t.watches {
		w.Stop()
	}
}

// result: the time from start to the last attachment, and each volume's attach-return time.
func (t *attachTimes) result(claims []*claim, start time.Time) (time.Duration, []time.Duration, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var last time.Time
	var lat []time.Duration
	for _, c := range claims {
		at, ok := t.attached[c.pv]
		in, inOK := t.inNode["kubernetes.io/csi/"+attachDriverName+"^"+c.handle]
		if !ok || !inOK {
			return 0, nil, fmt.Errorf("benchmark: the watches missed volume %s (attached seen %v, in node status seen %v)", c.pv, ok, inOK)
		}
		if at.After(last) {
			last = at
		}
		lat = append(lat, in.Sub(at))
	}
	slices.Sort(lat)
	return last.Sub(start), lat, nil
}

// printBenchmarks prints the figures of both plugins side by side.
func printBenchmarks(count int, benches, attachBenches map[string]benchResult) {
	fmt.Printf("\nbenchmark: %d pods created at once (same run, same machine)\n", count)
	for _, p := range plugins {
		if b, ok := benches[p]; ok {
			fmt.Printf("  one CSI PVC each       %-8s all Running %6.1f s   all torn down %6.1f s\n", p, b.running.Seconds(), b.torndown.Seconds())
		}
	}
	for _, p := range plugins {
		b, ok := attachBenches[p]
		if !ok {
			continue
		}
		l := b.attachReturn
		fmt.Printf("  attach-required PVC    %-8s all attached %5.1f s   all Running %6.1f s   all detached %6.1f s\n", p, b.attached.Seconds(), b.running.Seconds(), b.detached.Seconds())
		fmt.Printf("    status.attached -> in node.status.volumesAttached (Attach returned): median %4.0f ms  p90 %4.0f ms  max %4.0f ms\n",
			ms(l[len(l)/2]), ms(l[len(l)*9/10]), ms(l[len(l)-1]))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
