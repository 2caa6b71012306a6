package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// The attach scenarios: the attach/detach controller (with the node's plugin) and the
// external-attacher attach a volume before the kubelet (with the same plugin) stages it.
func init() {
	scenarios = append(scenarios,
		scenario{"attach-pod", attachPod},
		scenario{"attach-limit", attachLimit},
		scenario{"attach-controller-restart", attachControllerRestart},
	)
}

// attachPod: a pod with an attach-required PVC: VolumeAttachment created, attached by the
// external-attacher (ControllerPublish), NodeStage, NodePublish, Running; deleting the pod
// unpublishes, unstages, deletes the VolumeAttachment (ControllerUnpublish).
func attachPod(ctx context.Context, n *node, o *observation) error {
	a, c, pod, err := n.attachPodSetup(ctx, "att", "attach")
	if err != nil {
		return err
	}
	defer a.stop()
	defer n.deleteClaim(context.Background(), c)
	handles := map[string]string{"att": c.handle}
	m := a.mark()
	var z *normalizer
	err = n.runPod(ctx, o, pod, handles, func(pod *v1.Pod, _ *normalizer) error {
		z = a.normalizer(map[string]string{pod.Name: string(pod.UID)}, handles)
		a.observe(ctx, o, "running:", m, z)
		o.add("running: pod phase", string(pod.Status.Phase))
		o.check("the attached volume is mounted in the pod", isMountPoint(mountPath(n, pod, c.pv)), mountPath(n, pod, c.pv))
		m = a.mark()
		return nil
	})
	if err != nil {
		return err
	}
	if err := a.waitDetached(ctx, c.handle); err != nil {
		return err
	}
	a.observe(ctx, o, "detached:", m, z)
	return nil
}

// attachPodSetup starts the attach side and makes an attach-required claim and a pod using it.
func (n *node) attachPodSetup(ctx context.Context, claimName, podName string) (*attachSide, *claim, *v1.Pod, error) {
	a, err := n.startAttach(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := n.createClaimOn(ctx, attachDriverName, a.csi, claimName, false)
	if err != nil {
		a.stop()
		return nil, nil, nil, err
	}
	pod := n.pod(podName, []v1.Volume{claimVolume(c)}, []v1.VolumeMount{{Name: "data", MountPath: "/data"}}, nil)
	return a, c, pod, nil
}

// waitDetached waits until the VolumeAttachment is gone and the node no longer lists it.
func (a *attachSide) waitDetached(ctx context.Context, handle string) error {
	if err := a.waitAttachment(ctx, handle, "the VolumeAttachment deleted", isGone); err != nil {
		return err
	}
	return a.waitNodeVolumes(ctx, handle, false)
}

// attachLimit: the driver attaches one volume per node (-attach-limit=1); the second pod's
// attach fails with ResourceExhausted, the kubelet's VerifyExhaustedResource sees it after
// WaitForAttachAndMount times out (2 min) and the pod is rejected, as upstream's is.
func attachLimit(ctx context.Context, n *node, o *observation) error {
	a, err := n.startAttach(ctx, "-attach-limit=1")
	if err != nil {
		return err
	}
	defer a.stop()
	c1, err := n.createClaimOn(ctx, attachDriverName, a.csi, "lim1", false)
	if err != nil {
		return err
	}
	defer n.deleteClaim(context.Background(), c1)
	c2, err := n.createClaimOn(ctx, attachDriverName, a.csi, "lim2", false)
	if err != nil {
		return err
	}
	defer n.deleteClaim(context.Background(), c2)
	handles := map[string]string{"lim1": c1.handle, "lim2": c2.handle}
	m := a.mark()
	mounts := []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	first, err := n.s.client.CoreV1().Pods(n.ns).Create(ctx, n.pod("limit-1", []v1.Volume{claimVolume(c1)}, mounts, nil), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	defer n.deletePod(context.Background(), first, podTimeout)
	if first, err = n.waitRunning(ctx, first.Name, podTimeout); err != nil {
		return err
	}
	second, err := n.s.client.CoreV1().Pods(n.ns).Create(ctx, n.pod("limit-2", []v1.Volume{claimVolume(c2)}, mounts, nil), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	defer n.deletePod(context.Background(), second, podTimeout)
	z := a.normalizer(map[string]string{first.Name: string(first.UID), second.Name: string(second.UID)}, handles)
	if err := a.waitAttachment(ctx, c2.handle, "the second attach error", func(va *storagev1.VolumeAttachment) bool {
		return va != nil && va.Status.AttachError != nil
	}); err != nil {
		return err
	}
	// WaitForAttachAndMount gives up after 2m3s; then VerifyExhaustedResource decides.
	var phase, reason string
	waitFor(ctx, 3*time.Minute, "the second pod rejected", func() (bool, error) {
		p, err := n.s.client.CoreV1().Pods(n.ns).Get(ctx, second.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase, reason = string(p.Status.Phase), p.Status.Reason
		return p.Status.Phase == v1.PodFailed, nil
	})
	o.add("limited: second pod phase and reason", phase+" "+reason)
	a.observe(ctx, o, "limited:", m, z)
	m = a.mark()
	for _, p := range []*v1.Pod{second, first} {
		if err := n.deletePod(ctx, p, podTimeout); err != nil {
			return err
		}
	}
	for _, h := range []string{c1.handle, c2.handle} {
		if err := a.waitDetached(ctx, h); err != nil {
			return err
		}
	}
	a.observe(ctx, o, "detached:", m, z)
	return nil
}

// attachControllerRestart: the attach/detach controller restarts while the volume is
// attached; it rebuilds its state from node.status.volumesAttached and, at its first
// reconciler sync (every minute), asks the plugin's VolumesAreAttached: the volume stays
// attached and the pod keeps running; deleting it then detaches as usual.
func attachControllerRestart(ctx context.Context, n *node, o *observation) error {
	a, c, pod, err := n.attachPodSetup(ctx, "adcrestart", "adc-restart")
	if err != nil {
		return err
	}
	defer a.stop()
	defer n.deleteClaim(context.Background(), c)
	handles := map[string]string{"adcrestart": c.handle}
	m := a.mark()
	var z *normalizer
	err = n.runPod(ctx, o, pod, handles, func(pod *v1.Pod, _ *normalizer) error {
		z = a.normalizer(map[string]string{pod.Name: string(pod.UID)}, handles)
		a.stopController()
		if err := a.startController(); err != nil {
			return err
		}
		// One reconciler sync (60 s) after the restart, and some slack.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(70 * time.Second):
		}
		if _, err := n.waitRunning(ctx, pod.Name, podTimeout); err != nil {
			return err
		}
		a.observe(ctx, o, "restarted:", m, z)
		m = a.mark()
		return nil
	})
	if err != nil {
		return err
	}
	if err := a.waitDetached(ctx, c.handle); err != nil {
		return err
	}
	a.observe(ctx, o, "detached:", m, z)
	return nil
}

// attachBenchResult: from creating the pods until every VolumeAttachment is attached, every
// pod Running; from deleting them until every VolumeAttachment is gone; and per volume, the
// time from the external-attacher setting status.attached to the attach/detach controller
// listing the volume in node.status.volumesAttached (its Attach returned in between).
type attachBenchResult struct {
	attached, running, detached time.Duration
	attachToListed              []time.Duration
}

// attachBenchmark: count pods with one attach-required PVC each, created at once.
func (n *node) attachBenchmark(ctx context.Context, count int) (attachBenchResult, error) {
	var r attachBenchResult
	a, err := n.startAttach(ctx)
	if err != nil {
		return r, err
	}
	defer a.stop()
	claims := make([]*claim, count)
	for i := range claims {
		if claims[i], err = n.createClaimOn(ctx, attachDriverName, a.csi, fmt.Sprintf("abench-%02d", i), false); err != nil {
			return r, err
		}
		defer n.deleteClaim(context.Background(), claims[i])
	}
	times := newAttachTimes()
	stopWatch, err := times.watch(ctx, n)
	if err != nil {
		return r, err
	}
	defer stopWatch()

	start := time.Now()
	pods := make([]*v1.Pod, count)
	var wg sync.WaitGroup
	errs := make([]error, count)
	for i, c := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pods[i], errs[i] = n.s.client.CoreV1().Pods(n.ns).Create(ctx, n.pod(fmt.Sprintf("abench-%02d", i), []v1.Volume{claimVolume(c)},
				[]v1.VolumeMount{{Name: "data", MountPath: "/data"}}, nil), metav1.CreateOptions{})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return r, err
		}
	}
	for _, p := range pods {
		defer n.s.client.CoreV1().Pods(n.ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
	}
	names := map[string]string{} // attachment name -> unique volume name
	for _, c := range claims {
		names[a.attachmentName(c.handle)] = "kubernetes.io/csi/" + attachDriverName + "^" + c.handle
	}
	if err := waitFor(ctx, 5*time.Minute, "every VolumeAttachment attached", func() (bool, error) {
		return times.allAttached(names), nil
	}); err != nil {
		return r, err
	}
	r.attached = times.lastAttached(names).Sub(start)
	for _, p := range pods {
		if _, err := n.waitRunning(ctx, p.Name, 5*time.Minute); err != nil {
			return r, err
		}
	}
	r.running = time.Since(start)
	if err := waitFor(ctx, time.Minute, "every volume listed in node.status.volumesAttached", func() (bool, error) {
		return times.allListed(names), nil
	}); err != nil {
		return r, err
	}
	r.attachToListed = times.attachToListed(names)

	start = time.Now()
	for _, p := range pods {
		if err := n.s.client.CoreV1().Pods(n.ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			return r, err
		}
	}
	for _, c := range claims {
		if err := a.waitAttachment(ctx, c.handle, "the VolumeAttachment deleted", isGone); err != nil {
			return r, err
		}
	}
	r.detached = time.Since(start)
	fmt.Printf("[%s] attach benchmark: %d pods: all attached %.1f s, all Running %.1f s, all detached %.1f s; status.attached -> node lists it: %s\n",
		n.plugin, count, r.attached.Seconds(), r.running.Seconds(), r.detached.Seconds(), durationStats(r.attachToListed))
	return r, nil
}

// attachTimes records when the suite's own watches saw each VolumeAttachment attached and
// each volume appear in node.status.volumesAttached.
type attachTimes struct {
	mu       sync.Mutex
	attached map[string]time.Time // attachment name
	listed   map[string]time.Time // unique volume name
}

func newAttachTimes() *attachTimes {
	return &attachTimes{attached: map[string]time.Time{}, listed: map[string]time.Time{}}
}

func (t *attachTimes) watch(ctx context.Context, n *node) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	vas, err := n.s.client.StorageV1().VolumeAttachments().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		return nil, err
	}
	nodes, err := n.s.client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + n.name})
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		for ev := range vas.ResultChan() {
			if va, ok := ev.Object.(*storagev1.VolumeAttachment); ok && ev.Type != watch.Deleted && va.Status.Attached {
				t.mu.Lock()
				if _, seen := t.attached[va.Name]; !seen {
					t.attached[va.Name] = time.Now()
				}
				t.mu.Unlock()
			}
		}
	}()
	go func() {
		for ev := range nodes.ResultChan() {
			if nd, ok := ev.Object.(*v1.Node); ok {
				t.mu.Lock()
				for _, v := range nd.Status.VolumesAttached {
					if _, seen := t.listed[string(v.Name)]; !seen {
						t.listed[string(v.Name)] = time.Now()
					}
				}
				t.mu.Unlock()
			}
		}
	}()
	return func() { cancel(); vas.Stop(); nodes.Stop() }, nil
}

func (t *attachTimes) allAttached(names map[string]string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for va := range names {
		if _, ok := t.attached[va]; !ok {
			return false
		}
	}
	return true
}

func (t *attachTimes) allListed(names map[string]string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, vol := range names {
		if _, ok := t.listed[vol]; !ok {
			return false
		}
	}
	return true
}

func (t *attachTimes) lastAttached(names map[string]string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	var last time.Time
	for va := range names {
		if t.attached[va].After(last) {
			last = t.attached[va]
		}
	}
	return last
}

func (t *attachTimes) attachToListed(names map[string]string) []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []time.Duration
	for va, vol := range names {
		out = append(out, t.listed[vol].Sub(t.attached[va]))
	}
	return out
}

// durationStats: median and max.
func durationStats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	sorted := append([]time.Duration{}, ds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return fmt.Sprintf("median %d ms, max %d ms", sorted[len(sorted)/2].Milliseconds(), sorted[len(sorted)-1].Milliseconds())
}
