package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// HostpathCSIDriver is the CSIDriver object csi-driver-host-path's deployment installs.
func HostpathCSIDriver() *storagev1.CSIDriver {
	f, t := false, true
	file := storagev1.FileFSGroupPolicy
	return &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: DriverName},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:       &f,
			PodInfoOnMount:       &t,
			FSGroupPolicy:        &file,
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral},
		},
	}
}

// Claim is a PV pre-bound to a PVC, bound by hand: no persistent volume controller runs.
type Claim struct {
	PV, PVC, Handle string
	Driver          string // the CSI driver of the volume
}

// CreateClaim makes the main driver's volume and a PV and PVC bound to each other; edit, if
// given, changes both before they are created.
func (n *Node) CreateClaim(ctx context.Context, name string, block bool, edit ...func(*v1.PersistentVolume, *v1.PersistentVolumeClaim)) (*Claim, error) {
	return n.createClaimOn(ctx, n.CSI, DriverName, name, block, edit...)
}

func (n *Node) createClaimOn(ctx context.Context, conn *grpc.ClientConn, driver, name string, block bool, edit ...func(*v1.PersistentVolume, *v1.PersistentVolumeClaim)) (*Claim, error) {
	handle, err := createVolume(ctx, conn, n.Plugin+"-"+name, block)
	if err != nil {
		return nil, err
	}
	c := &Claim{PV: "pv-" + name + "-" + n.Plugin, PVC: "pvc-" + name, Handle: handle, Driver: driver}
	mode := v1.PersistentVolumeFilesystem
	if block {
		mode = v1.PersistentVolumeBlock
	}
	size := resource.MustParse("16Mi")
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: c.PV},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: size},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			VolumeMode:                    &mode,
			ClaimRef:                      &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: n.NS, Name: c.PVC},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: handle,
				VolumeAttributes: map[string]string{"kind": map[bool]string{true: "block", false: "file"}[block]},
			}},
		},
	}
	empty := ""
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: c.PVC, Namespace: n.NS},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			StorageClassName: &empty,
			VolumeName:       c.PV,
			VolumeMode:       &mode,
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: size}},
		},
	}
	for _, e := range edit {
		e(pv, pvc)
	}
	if pv, err = n.Suite.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if pvc, err = n.Suite.Client.CoreV1().PersistentVolumeClaims(n.NS).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	pvc.Status = v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound, AccessModes: pvc.Spec.AccessModes,
		Capacity: v1.ResourceList{v1.ResourceStorage: size}}
	if _, err := n.Suite.Client.CoreV1().PersistentVolumeClaims(n.NS).UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		return nil, err
	}
	pv.Spec.ClaimRef.UID = pvc.UID
	if pv, err = n.Suite.Client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		return nil, err
	}
	pv.Status.Phase = v1.VolumeBound
	if _, err := n.Suite.Client.CoreV1().PersistentVolumes().UpdateStatus(ctx, pv, metav1.UpdateOptions{}); err != nil {
		return nil, err
	}
	return c, nil
}

// DeleteClaim removes PVC and PV (stripping the protection finalizers no controller would
// ever remove) and the driver's volume.
func (n *Node) DeleteClaim(ctx context.Context, c *Claim) error {
	strip := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := n.Suite.Client.CoreV1().PersistentVolumeClaims(n.NS).Patch(ctx, c.PVC, types.MergePatchType, strip, metav1.PatchOptions{}); IgnoreNotFound(err) != nil {
		return err
	}
	if err := n.Suite.Client.CoreV1().PersistentVolumeClaims(n.NS).Delete(ctx, c.PVC, metav1.DeleteOptions{}); IgnoreNotFound(err) != nil {
		return err
	}
	if _, err := n.Suite.Client.CoreV1().PersistentVolumes().Patch(ctx, c.PV, types.MergePatchType, strip, metav1.PatchOptions{}); IgnoreNotFound(err) != nil {
		return err
	}
	if err := n.Suite.Client.CoreV1().PersistentVolumes().Delete(ctx, c.PV, metav1.DeleteOptions{}); IgnoreNotFound(err) != nil {
		return err
	}
	return deleteVolume(ctx, n.conn(c.Driver), c.Handle)
}

// Pod is a one-container pod bound to the node (no scheduler runs).
func (n *Node) Pod(name string, vols []v1.Volume, mounts []v1.VolumeMount, devices []v1.VolumeDevice) *v1.Pod {
	f := false
	grace := int64(1)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.NS},
		Spec: v1.PodSpec{
			NodeName:                      n.Name,
			AutomountServiceAccountToken:  &f,
			TerminationGracePeriodSeconds: &grace,
			Volumes:                       vols,
			Containers: []v1.Container{{
				Name: "app", Image: "registry.k8s.io/pause:3.10",
				VolumeMounts: mounts, VolumeDevices: devices,
			}},
		},
	}
}

// ClaimPod is a pod with c's volume mounted at /data.
func (n *Node) ClaimPod(name string, c *Claim) *v1.Pod {
	return n.Pod(name, []v1.Volume{ClaimVolume(c)}, []v1.VolumeMount{{Name: "data", MountPath: "/data"}}, nil)
}

// ClaimVolume is a pod volume named data of the claim.
func ClaimVolume(c *Claim) v1.Volume {
	return v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: c.PVC}}}
}

// WaitRunning waits until the pod is Running and Ready.
func (n *Node) WaitRunning(ctx context.Context, name string, timeout time.Duration) (*v1.Pod, error) {
	var pod *v1.Pod
	err := WaitFor(ctx, timeout, "pod "+name+" Running and Ready", func() (bool, error) {
		p, err := n.Suite.Client.CoreV1().Pods(n.NS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		if p.Status.Phase != v1.PodRunning {
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil && pod != nil {
		err = fmt.Errorf("%w (phase %s, conditions %+v)", err, pod.Status.Phase, pod.Status.Conditions)
	}
	return pod, err
}

// DeletePod deletes the pod gracefully and waits until the kubelet has finished with it: the
// object is gone (the kubelet deletes it once its volumes are torn down) and so is its dir.
func (n *Node) DeletePod(ctx context.Context, pod *v1.Pod, timeout time.Duration) error {
	if err := n.Suite.Client.CoreV1().Pods(n.NS).Delete(ctx, pod.Name, metav1.DeleteOptions{}); IgnoreNotFound(err) != nil {
		return err
	}
	return WaitFor(ctx, timeout, "pod "+pod.Name+" deleted and its dir removed", func() (bool, error) {
		_, err := n.Suite.Client.CoreV1().Pods(n.NS).Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil {
			return false, nil
		}
		if !apierrors.IsNotFound(err) {
			return false, err
		}
		_, err = StatPodDir(n.Root, pod)
		return err != nil, nil
	})
}

// StatPodDir stats the pod's dir under the kubelet root.
func StatPodDir(root string, pod *v1.Pod) (os.FileInfo, error) {
	return os.Stat(filepath.Join(root, "pods", string(pod.UID)))
}

// MountPath is where the kubelet mounts the pod's CSI volume (a PV's name, or an inline
// volume's).
func (n *Node) MountPath(pod *v1.Pod, volume string) string {
	return filepath.Join(n.Root, "pods", string(pod.UID), "volumes", "kubernetes.io~csi", volume, "mount")
}
