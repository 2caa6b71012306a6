package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"kcsi.dev/kcsi/benches/kubelet/stats"
	"kcsi.dev/kcsi/internal/mountinfo"
	"kcsi.dev/kcsi/tests/kubelet/pkg/cluster"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

type benchResult struct {
	running time.Duration
	teardown
	// With attach-required volumes: all VolumeAttachments attached, all detached (pods gone
	// and every VolumeAttachment deleted), and per volume the time from the external-attacher
	// setting status.attached to the controller's Attach returning, seen as the volume
	// entering node.status.volumesAttached (the controller's status updater, 100 ms loop).
	attached, detached time.Duration
	attachReturn       []time.Duration
}

// benchmark creates count pods with one PVC each at once (kind: fs, block or attach, an
// attach-required filesystem PVC) and times until all are Running and, after deleting them
// all at once, until all are gone with their pod dirs (and, with attach, detached).
func benchmark(ctx context.Context, n *cluster.Node, count int, kind string) (benchResult, error) {
	var r benchResult
	attach := kind == "attach"
	claims := make([]*cluster.Claim, count)
	for i := range claims {
		name := fmt.Sprintf("bench-%03d", i)
		var c *cluster.Claim
		var err error
		switch kind {
		case "fs":
			c, err = n.CreateClaim(ctx, name, false)
		case "block":
			c, err = n.CreateClaim(ctx, "block-"+name, true)
		case "attach":
			c, err = n.AttachClaim(ctx, "attach-"+name)
		default:
			err = fmt.Errorf("benchmark: volume kind %q, want fs, block or attach", kind)
		}
		if err != nil {
			return r, err
		}
		claims[i] = c
		defer n.DeleteClaim(context.Background(), c)
	}
	var seen *attachTimes
	if attach {
		var err error
		if seen, err = watchAttach(ctx, n); err != nil {
			return r, err
		}
		defer seen.Stop()
	}
	before, err := mountinfo.Under(n.Root)
	if err != nil {
		return r, err
	}
	mountsBefore := len(before)
	pods := make([]*v1.Pod, count)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, count)
	for i, c := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pod := n.ClaimPod(fmt.Sprintf("bench-%03d", i), c)
			if kind == "block" {
				pod.Spec.Containers[0].VolumeMounts = nil
				pod.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}}
			}
			p, err := n.Suite.Client.CoreV1().Pods(n.NS).Create(ctx, pod, metav1.CreateOptions{})
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
		defer n.Suite.Client.CoreV1().Pods(n.NS).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
	}
	for _, p := range pods {
		if _, err := n.WaitRunning(ctx, p.Name, 5*time.Minute); err != nil {
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
		if err := n.Suite.Client.CoreV1().Pods(n.NS).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			return r, err
		}
	}
	td, err := watchTeardown(ctx, n, pods, mountsBefore, start)
	if err != nil {
		return r, err
	}
	r.teardown = td
	if attach {
		if err := n.Attach.WaitDetached(ctx); err != nil {
			return r, err
		}
		r.detached = time.Since(start)
	}
	fmt.Printf("[%s] benchmark: %d pods with one %s PVC each Running in %.1f s; deleted in %.1f s, unmounted in %.1f s, dirs removed in %.1f s (at most %.1f s after their pod)\n",
		n.Plugin, count, kind, r.running.Seconds(), r.deleted.Seconds(), r.unmounted.Seconds(), r.dirsRemoved.Seconds(), r.dirLag.Seconds())
	return r, nil
}

// teardown times a benchmark's teardown from the deletes: until every pod object is gone (the
// kubelet deletes one once its volumes are unpublished), every mount of the pods' volumes is
// gone (unpublished and unstaged), and every pod dir is removed (the kubelet's housekeeping
// does that every 2 s, so a round moves by up to 2 s by its phase); dirLag is the longest a
// pod's dir outlived its object, which a dir removed in the first pass keeps under 2.1 s.
type teardown struct {
	deleted, unmounted, dirsRemoved, dirLag time.Duration
}

// watchTeardown polls every 100 ms until the pods, their mounts above mountsBefore under the
// kubelet's root, and their dirs are gone.
func watchTeardown(ctx context.Context, n *cluster.Node, pods []*v1.Pod, mountsBefore int, start time.Time) (teardown, error) {
	var t teardown
	goneAt := map[string]time.Duration{}
	dirGone := map[string]bool{}
	err := cluster.WaitFor(ctx, 5*time.Minute, "the benchmark's pods deleted, unmounted and their dirs removed", func() (bool, error) {
		list, err := n.Suite.Client.CoreV1().Pods(n.NS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		now := time.Since(start)
		listed := map[string]bool{}
		for _, p := range list.Items {
			listed[p.Name] = true
		}
		done := true
		for _, p := range pods {
			if listed[p.Name] {
				done = false
				continue
			}
			if _, seen := goneAt[p.Name]; !seen {
				goneAt[p.Name] = now
				t.deleted = max(t.deleted, now)
			}
			if dirGone[p.Name] {
				continue
			}
			if _, err := cluster.StatPodDir(n.Root, p); err == nil {
				done = false
				continue
			}
			dirGone[p.Name] = true
			t.dirsRemoved = max(t.dirsRemoved, now)
			t.dirLag = max(t.dirLag, now-goneAt[p.Name])
		}
		if t.unmounted == 0 {
			mounts, err := mountinfo.Under(n.Root)
			if err != nil || len(mounts) > mountsBefore {
				return false, err
			}
			t.unmounted = now
		}
		return done, nil
	})
	return t, err
}

// attachTimes records when the suite's informers first saw each VolumeAttachment of the node
// attached (by PV name) and each volume in the Node's status.volumesAttached.
type attachTimes struct {
	mu               sync.Mutex
	attached, inNode map[string]time.Time
	stopCh           chan struct{}
}

func watchAttach(ctx context.Context, n *cluster.Node) (*attachTimes, error) {
	t := &attachTimes{attached: map[string]time.Time{}, inNode: map[string]time.Time{}, stopCh: make(chan struct{})}
	first := func(m map[string]time.Time, key string) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if _, ok := m[key]; !ok {
			m[key] = time.Now()
		}
	}
	factory := informers.NewSharedInformerFactory(n.Suite.Client, 0)
	onVA := func(obj any) {
		if va, ok := obj.(*storagev1.VolumeAttachment); ok && va.Spec.NodeName == n.Name && va.Status.Attached && va.Spec.Source.PersistentVolumeName != nil {
			first(t.attached, *va.Spec.Source.PersistentVolumeName)
		}
	}
	onNode := func(obj any) {
		if nd, ok := obj.(*v1.Node); ok && nd.Name == n.Name {
			for _, v := range nd.Status.VolumesAttached {
				first(t.inNode, string(v.Name))
			}
		}
	}
	for inf, on := range map[cache.SharedIndexInformer]func(any){
		factory.Storage().V1().VolumeAttachments().Informer(): onVA,
		factory.Core().V1().Nodes().Informer():                onNode,
	} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, obj any) { on(obj) }}); err != nil {
			return nil, err
		}
	}
	factory.Start(t.stopCh)
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			close(t.stopCh)
			return nil, fmt.Errorf("benchmark: the %v informer did not sync", typ)
		}
	}
	return t, nil
}

func (t *attachTimes) Stop() { close(t.stopCh) }

// result: the time from start to the last attachment, and each volume's attach-return time.
func (t *attachTimes) result(claims []*cluster.Claim, start time.Time) (time.Duration, []time.Duration, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var last time.Time
	var lat []time.Duration
	for _, c := range claims {
		at, ok := t.attached[c.PV]
		in, inOK := t.inNode["kubernetes.io/csi/"+cluster.AttachDriverName+"^"+c.Handle]
		if !ok || !inOK {
			return 0, nil, fmt.Errorf("benchmark: the watches missed volume %s (attached seen %v, in node status seen %v)", c.PV, ok, inOK)
		}
		if at.After(last) {
			last = at
		}
		lat = append(lat, in.Sub(at))
	}
	slices.Sort(lat)
	return last.Sub(start), lat, nil
}

// benchCounts parses -bench: comma-separated pod counts, "0" for none.
func benchCounts(list string) ([]int, error) {
	var counts []int
	for _, f := range strings.Split(list, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 0 {
			return nil, fmt.Errorf("-bench %q: want comma-separated pod counts", list)
		}
		if c > 0 {
			counts = append(counts, c)
		}
	}
	return counts, nil
}

// benchMeasures are the times every benchmark reports, in the order printed.
var benchMeasures = []struct {
	name string
	of   func(benchResult) time.Duration
}{
	{"all Running", func(r benchResult) time.Duration { return r.running }},
	{"all deleted", func(r benchResult) time.Duration { return r.deleted }},
	{"all unmounted", func(r benchResult) time.Duration { return r.unmounted }},
	{"all dirs removed", func(r benchResult) time.Duration { return r.dirsRemoved }},
}

// benchConfig is one benchmark's configuration: how many pods, with which kind of volume.
type benchConfig struct {
	count int
	kind  string
}

func (c benchConfig) String() string {
	return fmt.Sprintf("%3d pods, one %s PVC each", c.count, c.kind)
}

// benchRuns holds each benchmark run by configuration and plugin, in the order they ran, so a
// configuration's i-th kcsi and i-th upstream runs are the same round.
type benchRuns map[benchConfig]map[string][]benchResult

// run runs one benchmark and records it; it returns 1 if it failed (and says why), else 0.
func (b benchRuns) run(ctx context.Context, n *cluster.Node, count int, kind string) int {
	r, err := benchmark(ctx, n, count, kind)
	if err != nil {
		fmt.Printf("[%s] benchmark (%d pods, %s): ERROR: %v\n", n.Plugin, count, kind, err)
		return 1
	}
	key := benchConfig{count, kind}
	if b[key] == nil {
		b[key] = map[string][]benchResult{}
	}
	b[key][n.Plugin] = append(b[key][n.Plugin], r)
	return 0
}

// configs lists the configurations run, by pod count, then kind.
func (b benchRuns) configs() []benchConfig {
	keys := make([]benchConfig, 0, len(b))
	for k := range b {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y benchConfig) int {
		return cmp.Or(cmp.Compare(x.count, y.count), cmp.Compare(x.kind, y.kind))
	})
	return keys
}

// print prints each configuration's figures, the plugins side by side: the median and, over
// several runs, the range; apiQPS is the kubelets' kubeAPIQPS (0: the default).
func (b benchRuns) print(apiQPS int) {
	if len(b) == 0 {
		return
	}
	limit := "the kubelet's API client at its default 50 QPS, burst 100"
	if apiQPS > 0 {
		limit = fmt.Sprintf("the kubelet's API client at %d QPS, burst %d", apiQPS, 2*apiQPS)
	}
	fmt.Printf("\nbenchmark: pods created at once, then deleted at once (same run, same machine, %s; median [min-max] over the runs)\n", limit)
	for _, k := range b.configs() {
		fmt.Printf("  %s\n", k)
		for _, p := range observe.Plugins {
			rs := b[k][p]
			if len(rs) == 0 {
				continue
			}
			pick := func(f func(benchResult) time.Duration) string {
				var d []time.Duration
				for _, r := range rs {
					d = append(d, f(r))
				}
				slices.Sort(d)
				if len(d) == 1 {
					return fmt.Sprintf("%5.1f s", d[0].Seconds())
				}
				return fmt.Sprintf("%5.1f s [%.1f-%.1f]", stats.Median(d).Seconds(), d[0].Seconds(), d[len(d)-1].Seconds())
			}
			fmt.Printf("    %-8s x%d ", p, len(rs))
			for _, m := range benchMeasures {
				fmt.Printf("  %s %s ", m.name, pick(m.of))
			}
			fmt.Printf("(%.1f s at most after their pod)", slices.MaxFunc(rs, func(a, b benchResult) int { return cmp.Compare(a.dirLag, b.dirLag) }).dirLag.Seconds())
			if rs[0].attachReturn != nil {
				l := rs[0].attachReturn
				fmt.Printf("   all attached %s   all detached %s\n      status.attached -> in node.status.volumesAttached (Attach returned): median %4.0f ms  p90 %4.0f ms  max %4.0f ms",
					pick(func(r benchResult) time.Duration { return r.attached }), pick(func(r benchResult) time.Duration { return r.detached }),
					ms(l[len(l)/2]), ms(l[len(l)*9/10]), ms(l[len(l)-1]))
			}
			fmt.Println()
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
