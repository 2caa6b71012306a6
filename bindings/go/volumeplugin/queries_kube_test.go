package volumeplugin

import (
	"context"
	"strings"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/volume"
	volumetest "k8s.io/kubernetes/pkg/volume/testing"

	"kcsi.dev/kcsi/volumeplugin/volumeplugintest"
)

// CanAttach of a plain CSI PersistentVolume is answered from the binding's cache while kcsi's
// CSIDriver generation stands still: it must still follow the CSIDriver object as the API
// server changes it, as upstream's lister-backed answer does.
func TestCanAttachFollowsItsCSIDriverCreatedAndDeletedThroughTheCache(t *testing.T) {
	canAttachFollowsItsCSIDriver(t, false)
}

// With Config.CSIDriversFromVolumeHost kcsi reads the kubelet's own CSIDriver informer, as
// upstream's plugin reads its lister, and its client sends no CSIDriver request.
func TestCanAttachFollowsTheVolumeHostsCSIDriverInformerWithoutAWatchOfItsOwn(t *testing.T) {
	p := canAttachFollowsItsCSIDriver(t, true)
	text, err := p.kcsi.Load().Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, `resource="csidrivers"`) {
		t.Fatalf("kcsi's own client asked for CSIDrivers:\n%s", text)
	}
}

func canAttachFollowsItsCSIDriver(t *testing.T, fromVolumeHost bool) *Plugin {
	c := startClusterWithNode(t)
	ctx := context.Background()
	p := New(Config{Kubeconfig: c.kubeconfig, CSIDriversFromVolumeHost: fromVolumeHost})
	t.Cleanup(p.Close)
	if !fromVolumeHost {
		volumetest.NewFakeKubeletVolumeHostWithCSINodeName(t, t.TempDir(), c.client, []volume.VolumePlugin{p}, volumeplugintest.NodeName, nil, nil)
	} else {
		// The fake host makes its informer factory only after it initialised its plugins,
		// where the kubelet's has it before: Init the plugin on it afterwards.
		host := volumetest.NewFakeKubeletVolumeHostWithCSINodeName(t, t.TempDir(), c.client, nil, volumeplugintest.NodeName, nil, nil)
		if err := p.Init(host); err != nil {
			t.Fatal(err)
		}
		// What the kubelet's volume manager does (VolumePluginMgr.Run).
		stop := make(chan struct{})
		t.Cleanup(func() { close(stop) })
		host.GetInformerFactory().Start(stop)
	}
	const driver = "cache.csi.example.com"
	spec := volumeplugintest.PVSpec("pv-cache", "h-cache", false)
	spec.PersistentVolume.Spec.CSI.Driver = driver
	waitCanAttach := func(want bool, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, err := p.CanAttach(spec)
			if err == nil && got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: CanAttach = %v, %v; want %v", what, got, err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitCanAttach(true, "no CSIDriver")
	// Asked again and again, as the reconciler does, so that the answer sits in the cache.
	for range 100 {
		if got, err := p.CanAttach(spec); err != nil || !got {
			t.Fatalf("CanAttach = %v, %v; want true", got, err)
		}
	}
	no := false
	object := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver}, Spec: storagev1.CSIDriverSpec{AttachRequired: &no}}
	if _, err := c.client.StorageV1().CSIDrivers().Create(ctx, object, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCanAttach(false, "CSIDriver created with attachRequired: false")
	if err := c.client.StorageV1().CSIDrivers().Delete(ctx, driver, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCanAttach(true, "CSIDriver deleted")
	return p
}
