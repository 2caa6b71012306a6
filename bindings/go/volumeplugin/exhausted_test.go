package volumeplugin

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/volume"

	"kcsi.dev/kcsi/volumeplugin/volumeplugintest"
)

// TestVerifyExhaustedResourceIsTrueOnlyForTheAttachTheDriversLimitRefused: the real hostpath
// driver with -attach-limit=1 behind the real external-attacher attaches one volume and
// refuses the second with ResourceExhausted, which the attacher records in its
// VolumeAttachment's attachError.errorCode. VerifyExhaustedResource is true for the refused
// volume and false for the attached one, as upstream's csiPlugin.VerifyExhaustedResource
// (pkg/volume/csi/csi_plugin.go) answers on the same objects.
func TestVerifyExhaustedResourceIsTrueOnlyForTheAttachTheDriversLimitRefused(t *testing.T) {
	volumeplugintest.NeedsRoot(t)
	c := startClusterWithNode(t)
	ctx := context.Background()
	// Attachable, and with the allocatable refresh period without which upstream never
	// looks at the attachment (getNodeAllocatableUpdatePeriod).
	driver := volumeplugintest.HostpathCSIDriver()
	attach, period := true, int64(10)
	driver.Spec.AttachRequired = &attach
	driver.Spec.NodeAllocatableUpdatePeriodSeconds = &period
	if _, err := c.client.StorageV1().CSIDrivers().Create(ctx, driver, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := newEnvIn(t, c, "-enable-attach", "-attach-limit=1")
	volumeplugintest.StartPeer(t, "attacher", "--csi-address="+e.Socket, "--kubeconfig="+c.kubeconfig, "--timeout=30s", "-v=5")

	attached := e.attachThroughTheAttacher(t, c, "fits", func(va *storagev1.VolumeAttachment) bool { return va.Status.Attached })
	refused := e.attachThroughTheAttacher(t, c, "over", func(va *storagev1.VolumeAttachment) bool {
		err := va.Status.AttachError
		return err != nil && err.ErrorCode != nil && *err.ErrorCode == int32(codes.ResourceExhausted)
	})

	upstream := volumeplugintest.UpstreamPluginOn(t, t.TempDir(), c.client, driver).(volume.AttachableVolumePlugin)
	for _, tc := range []struct {
		name string
		spec *volume.Spec
		want bool
	}{{"attached", attached, false}, {"refused as exhausted", refused, true}} {
		if got := e.plugin.VerifyExhaustedResource(tc.spec); got != tc.want {
			t.Errorf("%s: VerifyExhaustedResource = %v, want %v", tc.name, got, tc.want)
		}
		if got := upstream.VerifyExhaustedResource(tc.spec); got != tc.want {
			t.Errorf("%s: upstream's VerifyExhaustedResource = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// attachThroughTheAttacher creates a driver volume, its PV and the VolumeAttachment the
// attach/detach controller would, and waits until the external-attacher's status satisfies
// reached; it returns the PV's spec.
func (e *env) attachThroughTheAttacher(t *testing.T, c *cluster, name string, reached func(*storagev1.VolumeAttachment) bool) *volume.Spec {
	t.Helper()
	ctx := context.Background()
	handle := e.CreateVolume(t, name, false)
	spec := volumeplugintest.PVSpec("pv-"+name, handle, false)
	pv := spec.PersistentVolume.DeepCopy()
	pv.Spec.Capacity = v1.ResourceList{v1.ResourceStorage: resource.MustParse("16Mi")}
	if _, err := c.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The name upstream's getAttachmentName gives it.
	vaName := fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+volumeplugintest.DriverName+volumeplugintest.NodeName)))
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: vaName},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: volumeplugintest.DriverName, NodeName: volumeplugintest.NodeName,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv.Name}}}
	if _, err := c.client.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := c.client.StorageV1().VolumeAttachments().Get(ctx, vaName, metav1.GetOptions{})
		if err == nil && reached(got) {
			return spec
		}
		if time.Now().After(deadline) {
			t.Fatalf("VolumeAttachment of %s: %+v, %v", name, got, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
