package scenarios

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
	"kcsi.dev/kcsi/tests/kubelet/pkg/cluster"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

const expandableClass = "kcsi-expandable"

// withExpandableClass creates the StorageClass an expanded claim names: the API server's
// PersistentVolumeClaimResize admission refuses to resize a claim whose class does not set
// allowVolumeExpansion. It returns the undo.
func withExpandableClass(ctx context.Context, n *cluster.Node) (func(), error) {
	t := true
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: expandableClass},
		Provisioner: cluster.DriverName, AllowVolumeExpansion: &t}
	classes := n.Suite.Client.StorageV1().StorageClasses()
	if _, err := classes.Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	return func() { classes.Delete(context.Background(), expandableClass, metav1.DeleteOptions{}) }, nil
}

// startResizer runs the real external-resizer against the node's driver with its service
// account's token, bound to its deploy manifest's RBAC in a secure cluster (one replica, so
// no leader election). It serves every namespace; the plugins'
// nodes run one after the other, so only the current node's claims are there to resize.
func startResizer(n *cluster.Node) (*exec.Cmd, error) {
	return cluster.StartProc(filepath.Join(n.Dir, "resizer.log"), n.Suite.Resizer, "--csi-address="+n.Socket,
		"--kubeconfig="+n.Suite.KubeconfigOf(cluster.User(cluster.ResizerIdentity.NS, cluster.ResizerIdentity.SA)), "--leader-election=false", "-v=3")
}

// expandClaim runs a pod on an expandable claim, asks for newSize while it runs and waits
// until the kubelet has finished with the expansion (done), then records "expanded:".
func expandClaim(ctx context.Context, n *cluster.Node, o *observe.Observation, name, newSize string, done func(*v1.PersistentVolumeClaim) bool, checks func(calls []observe.Call, pvc *v1.PersistentVolumeClaim)) error {
	undo, err := withExpandableClass(ctx, n)
	if err != nil {
		return err
	}
	defer undo()
	class := expandableClass
	c, err := n.CreateClaim(ctx, name, false, func(pv *v1.PersistentVolume, pvc *v1.PersistentVolumeClaim) {
		pv.Spec.StorageClassName = class
		pvc.Spec.StorageClassName = &class
	})
	if err != nil {
		return err
	}
	defer n.DeleteClaim(context.Background(), c)
	pod := n.ClaimPod(name, c)
	return runPod(ctx, n, o, pod, map[string]string{name: c.Handle}, func(pod *v1.Pod, z *observe.Normalizer) error {
		m := n.Mark()
		resizer, err := startResizer(n)
		if err != nil {
			return err
		}
		defer cluster.StopProc(resizer)
		claims := n.Suite.Client.CoreV1().PersistentVolumeClaims(n.NS)
		patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, newSize)
		if _, err := claims.Patch(ctx, c.PVC, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
		// The resizer is stopped once its part is done (ControllerExpandVolume, the PV's new
		// capacity, the claim marked NodeResizePending: its FileSystemResizeRequired event).
		// Left running, it answers a NodeResizeInfeasible claim by resetting it to
		// NodeResizePending at once (external-resizer pkg/controller/expand_and_recover.go),
		// so the kubelet tries again in a loop paced only by its backoff and what a snapshot
		// holds would depend on timing.
		if err := cluster.WaitFor(ctx, 30*time.Second, "the resizer to expand "+c.PVC+" on the controller side", func() (bool, error) {
			return hasEvent(ctx, n, c.PVC, "FileSystemResizeRequired")
		}); err != nil {
			return err
		}
		cluster.StopProc(resizer)
		var pvc *v1.PersistentVolumeClaim
		err = cluster.WaitFor(ctx, 60*time.Second, "the kubelet to finish expanding "+c.PVC, func() (bool, error) {
			var err error
			pvc, err = claims.Get(ctx, c.PVC, metav1.GetOptions{})
			return err == nil && done(pvc), err
		})
		if err != nil {
			return fmt.Errorf("%w (PVC status %+v)", err, pvc.Status)
		}
		calls, err := n.CallsSince(m)
		if err != nil {
			return err
		}
		checks(calls, pvc)
		n.Snapshot(ctx, o, "expanded:", m, z)
		return nil
	})
}

// hasEvent says whether an event with reason is recorded about the object called name.
func hasEvent(ctx context.Context, n *cluster.Node, name, reason string) (bool, error) {
	events, err := n.Suite.Client.CoreV1().Events(n.NS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
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
func expansionCalls(calls []observe.Call) []string {
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
func expand(ctx context.Context, n *cluster.Node, o *observe.Observation) error {
	const newSize = "32Mi"
	done := func(pvc *v1.PersistentVolumeClaim) bool {
		return pvc.Status.Capacity.Storage().Cmp(resource.MustParse(newSize)) == 0 &&
			len(pvc.Status.Conditions) == 0 && len(pvc.Status.AllocatedResourceStatuses) == 0
	}
	return expandClaim(ctx, n, o, "expand", newSize, done, func(calls []observe.Call, pvc *v1.PersistentVolumeClaim) {
		got := strings.Join(expansionCalls(calls), "; ")
		want := fmt.Sprintf("ControllerExpandVolume %[1]s ok; NodeExpandVolume %[1]s ok", bytesOf(newSize))
		o.Check("the resizer's ControllerExpandVolume and the kubelet's NodeExpandVolume expand to the new size", got == want, got)
	})
}

// expandRefused: 16Mi -> 2Gi: the controller allows it, but the real hostpath driver refuses
// NodeExpandVolume above its -max-volume-size-node (1Gi) with OutOfRange. Upstream's
// expander.go NodeExpand makes that an infeasible (final) error, so the kubelet's
// node_expander.go marks the expansion failed: the PVC gets the NodeResizeError condition
// and allocatedResourceStatuses NodeResizeInfeasible, and its capacity stays.
func expandRefused(ctx context.Context, n *cluster.Node, o *observe.Observation) error {
	const newSize = "2Gi"
	done := func(pvc *v1.PersistentVolumeClaim) bool {
		return hasCondition(pvc, v1.PersistentVolumeClaimNodeResizeError)
	}
	return expandClaim(ctx, n, o, "refused", newSize, done, func(calls []observe.Call, pvc *v1.PersistentVolumeClaim) {
		lines := expansionCalls(calls)
		refused := len(lines) == 2 && lines[0] == "ControllerExpandVolume "+bytesOf(newSize)+" ok" &&
			strings.HasPrefix(lines[1], "NodeExpandVolume "+bytesOf(newSize)+" rpc error: code = OutOfRange")
		o.Check("the driver refuses NodeExpandVolume once, with OutOfRange, after the controller expanded", refused, strings.Join(lines, "; "))
		status := pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
		o.Check("the PVC is marked NodeResizeInfeasible with its old capacity",
			status == v1.PersistentVolumeClaimNodeResizeInfeasible && pvc.Status.Capacity.Storage().Cmp(resource.MustParse("16Mi")) == 0,
			fmt.Sprintf("status %q, capacity %s", status, pvc.Status.Capacity.Storage()))
	})
}
