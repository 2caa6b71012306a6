package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Volume expansion end to end: the real external-resizer calls ControllerExpandVolume and
// raises the PV's capacity, then the kubelet calls NodeExpandVolume through the plugin and
// records the outcome on the PVC.
func init() {
	scenarios = append(scenarios,
		scenario{"expand", expand},
		scenario{"expand-refused", expandRefused},
	)
}

const expandableClass = "kcsi-expandable"

// withExpandableClass creates the StorageClass an expanded claim names: the API server's
// PersistentVolumeClaimResize admission refuses to resize a claim whose class does not set
// allowVolumeExpansion. It returns the undo.
func (n *node) withExpandableClass(ctx context.Context) (func(), error) {
	t := true
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: expandableClass},
		Provisioner: driverName, AllowVolumeExpansion: &t}
	classes := n.s.client.StorageV1().StorageClasses()
	if _, err := classes.Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	return func() { classes.Delete(context.Background(), expandableClass, metav1.DeleteOptions{}) }, nil
}

// startResizer runs the real external-resizer against the node's driver with the suite's
// kubeconfig (one replica, so no leader election). It serves every namespace; the plugins'
// nodes run one after the other, so only the current node's claims are there to resize.
func (n *node) startResizer() (*exec.Cmd, error) {
	return startProc(filepath.Join(n.dir, "resizer.log"), n.s.resizer, "--csi-address="+n.socket,
		"--kubeconfig="+n.s.kubeconfig, "--leader-election=false", "-v=3")
}

// expandClaim runs a pod on an expandable claim, asks for newSize while it runs and waits
// until the kubelet has finished with the expansion (done), then records "expanded:".
func expandClaim(ctx context.Context, n *node, o *observation, name, newSize string, done func(*v1.PersistentVolumeClaim) bool, checks func(calls []call, pvc *v1.PersistentVolumeClaim)) error {
	undo, err := n.withExpandableClass(ctx)
	if err != nil {
		return err
	}
	defer undo()
	class := expandableClass
	c, err := n.createClaim(ctx, name, false, func(pv *v1.PersistentVolume, pvc *v1.PersistentVolumeClaim) {
		pv.Spec.StorageClassName = class
		pvc.Spec.StorageClassName = &class
	})
	if err != nil {
		return err
	}
	defer n.deleteClaim(context.Background(), c)
	pod := n.claimPod(name, c)
	return n.runPod(ctx, o, pod, map[string]string{name: c.handle}, func(pod *v1.Pod, z *normalizer) error {
		m := n.mark()
		resizer, err := n.startResizer()
		if err != nil {
			return err
		}
		defer stopProc(resizer)
		claims := n.s.client.CoreV1().PersistentVolumeClaims(n.ns)
		patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, newSize)
		if _, err := claims.Patch(ctx, c.pvc, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
		// The resizer is stopped once its part is done (ControllerExpandVolume, the PV's new
		// capacity, the claim marked NodeResizePending: its FileSystemResizeRequired event).
		// Left running, it answers a NodeResizeInfeasible claim by resetting it to
		// NodeResizePending at once (external-resizer pkg/controller/expand_and_recover.go),
		// so the kubelet tries again in a loop paced only by its backoff and what a snapshot
		// holds would depend on timing.
		if err := waitFor(ctx, 30*time.Second, "the resizer to expand "+c.pvc+" on the controller side", func() (bool, error) {
			return n.hasEvent(ctx, c.pvc, "FileSystemResizeRequired")
		}); err != nil {
			return err
		}
		stopProc(resizer)
		var pvc *v1.PersistentVolumeClaim
		err = waitFor(ctx, 60*time.Second, "the kubelet to finish expanding "+c.pvc, func() (bool, error) {
			var err error
			pvc, err = claims.Get(ctx, c.pvc, metav1.GetOptions{})
			return err == nil && done(pvc), err
		})
		if err != nil {
			return fmt.Errorf("%w (PVC status %+v)", err, pvc.Status)
		}
		calls, err := n.callsSince(m)
		if err != nil {
			return err
		}
		checks(calls, pvc)
		n.snapshot(ctx, o, "expanded:", m, z)
		return nil
	})
}

// hasEvent says whether an event with reason is recorded about the object called name.
func (n *node) hasEvent(ctx context.Context, name, reason string) (bool, error) {
	events, err := n.s.client.CoreV1().Events(n.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return false, err
	}
	for _, e := range events.Items {
		if e.Reason == reason {
			return true, nil
		}
	}
	return false, nil
}

// expansionCalls lists the expansion requests with their outcome: "<method> <required bytes>
// <error or ok>".
func expansionCalls(calls []call) []string {
	var lines []string
	for _, c := range calls {
		if c.Method != "ControllerExpandVolume" && c.Method != "NodeExpandVolume" {
			continue
		}
		bytes := ""
		if r, ok := c.Request["capacity_range"].(map[string]any); ok {
			if b, ok := r["required_bytes"].(float64); ok { // a JSON number
				bytes = fmt.Sprint(int64(b))
			}
		}
		outcome := "ok"
		if c.Error != "" {
			outcome = c.Error
		}
		lines = append(lines, fmt.Sprintf("%s %s %s", c.Method, bytes, outcome))
	}
	return lines
}

func bytesOf(size string) string {
	q := resource.MustParse(size)
	return fmt.Sprint(q.Value())
}

func hasCondition(pvc *v1.PersistentVolumeClaim, t v1.PersistentVolumeClaimConditionType) bool {
	for _, c := range pvc.Status.Conditions {
		if c.Type == t && c.Status == v1.ConditionTrue {
			return true
		}
	}
	return false
}

// expand: 16Mi -> 32Mi while the pod runs: ControllerExpandVolume, then the kubelet's
// NodeExpandVolume (pkg/volume/csi/expander.go NodeExpand), and the PVC's status.capacity
// becomes the new size with no resize condition or status left.
func expand(ctx context.Context, n *node, o *observation) error {
	const newSize = "32Mi"
	done := func(pvc *v1.PersistentVolumeClaim) bool {
		return pvc.Status.Capacity.Storage().Cmp(resource.MustParse(newSize)) == 0 &&
			len(pvc.Status.Conditions) == 0 && len(pvc.Status.AllocatedResourceStatuses) == 0
	}
	return expandClaim(ctx, n, o, "expand", newSize, done, func(calls []call, pvc *v1.PersistentVolumeClaim) {
		got := strings.Join(expansionCalls(calls), "; ")
		want := fmt.Sprintf("ControllerExpandVolume %[1]s ok; NodeExpandVolume %[1]s ok", bytesOf(newSize))
		o.check("the resizer's ControllerExpandVolume and the kubelet's NodeExpandVolume expand to the new size", got == want, got)
	})
}

// expandRefused: 16Mi -> 2Gi: the controller allows it, but the real hostpath driver refuses
// NodeExpandVolume above its -max-volume-size-node (1Gi) with OutOfRange. Upstream's
// expander.go NodeExpand makes that an infeasible (final) error, so the kubelet's
// node_expander.go marks the expansion failed: the PVC gets the NodeResizeError condition
// and allocatedResourceStatuses NodeResizeInfeasible, and its capacity stays.
func expandRefused(ctx context.Context, n *node, o *observation) error {
	const newSize = "2Gi"
	done := func(pvc *v1.PersistentVolumeClaim) bool {
		return hasCondition(pvc, v1.PersistentVolumeClaimNodeResizeError)
	}
	return expandClaim(ctx, n, o, "refused", newSize, done, func(calls []call, pvc *v1.PersistentVolumeClaim) {
		lines := expansionCalls(calls)
		refused := len(lines) == 2 && lines[0] == "ControllerExpandVolume "+bytesOf(newSize)+" ok" &&
			strings.HasPrefix(lines[1], "NodeExpandVolume "+bytesOf(newSize)+" rpc error: code = OutOfRange")
		o.check("the driver refuses NodeExpandVolume once, with OutOfRange, after the controller expanded", refused, strings.Join(lines, "; "))
		status := pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
		o.check("the PVC is marked NodeResizeInfeasible with its old capacity",
			status == v1.PersistentVolumeClaimNodeResizeInfeasible && pvc.Status.Capacity.Storage().Cmp(resource.MustParse("16Mi")) == 0,
			fmt.Sprintf("status %q, capacity %s", status, pvc.Status.Capacity.Storage()))
	})
}
