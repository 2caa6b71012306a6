package volumeplugintest

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"
	fakeclient "k8s.io/client-go/kubernetes/fake"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/volume"
	"k8s.io/kubernetes/pkg/volume/csi"
	volumetest "k8s.io/kubernetes/pkg/volume/testing"
)

// HostpathCSIDriver is the CSIDriver object the driver's deployment installs.
func HostpathCSIDriver() *storagev1.CSIDriver {
	f := false
	t := true
	file := storagev1.FileFSGroupPolicy
	return &storagev1.CSIDriver{
		TypeMeta:   metav1.TypeMeta{APIVersion: "storage.k8s.io/v1", Kind: "CSIDriver"},
		ObjectMeta: metav1.ObjectMeta{Name: DriverName},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:       &f,
			PodInfoOnMount:       &t,
			FSGroupPolicy:        &file,
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral},
		},
	}
}

// PVSpec is the spec of PersistentVolume name, ReadWriteOnce, on the hostpath driver's volume
// handle: in volume mode Block if block, else Filesystem.
func PVSpec(name, handle string, block bool) *volume.Spec {
	mode := v1.PersistentVolumeFilesystem
	if block {
		mode = v1.PersistentVolumeBlock
	}
	return volume.NewSpecFromPersistentVolume(&v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			VolumeMode:             &mode,
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: DriverName, VolumeHandle: handle}},
		},
	}, false)
}

// Pod is a pod of UID uid in namespace default.
func Pod(uid string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "default", UID: types.UID(uid)}}
}

// KubeletHost initializes p on a fake kubelet VolumeHost rooted at root, on NodeName, with
// client (nil: none) and no CSIDriver lister, and returns the host.
func KubeletHost(tb testing.TB, root string, client clientset.Interface, p volume.VolumePlugin) volume.VolumeHost {
	return volumetest.NewFakeKubeletVolumeHostWithCSINodeName(asT(tb), root, client, []volume.VolumePlugin{p}, NodeName, nil, nil)
}

// UpstreamPlugin is upstream's pkg/volume/csi plugin set up as the kubelet sets it up: on a
// kubelet volume host rooted at root, with an API client (a fake clientset holding the Node
// and hostpath's CSIDriver) and a CSIDriver lister, so CanAttach reads the CSIDriver as in a
// cluster. Upstream keeps its registered drivers and node info manager in package variables:
// the last plugin set up is the one registrations go to.
func UpstreamPlugin(tb testing.TB, root string) volume.VolumePlugin {
	driver := HostpathCSIDriver()
	return UpstreamPluginOn(tb, root, fakeclient.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName}}, driver), driver)
}

// UpstreamPluginOn is UpstreamPlugin on client (e.g. a real API server's) whose CSIDriver is
// driver.
func UpstreamPluginOn(tb testing.TB, root string, client clientset.Interface, driver *storagev1.CSIDriver) volume.VolumePlugin {
	drivers := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	drivers.Add(driver)
	p := csi.ProbeVolumePlugins()[0]
	volumetest.NewFakeKubeletVolumeHostWithCSINodeName(asT(tb), root, client, []volume.VolumePlugin{p}, NodeName,
		storagelisters.NewCSIDriverLister(drivers), nil)
	return p
}

// asT is tb for volumetest's constructors, which take a *testing.T: a benchmark's failures
// there surface as a panic of the zero T instead.
func asT(tb testing.TB) *testing.T {
	if t, ok := tb.(*testing.T); ok {
		return t
	}
	return &testing.T{}
}
