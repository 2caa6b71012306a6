package volumeplugin

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	fakeclient "k8s.io/client-go/kubernetes/fake"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/volume"
	"k8s.io/kubernetes/pkg/volume/csi"
	volumetest "k8s.io/kubernetes/pkg/volume/testing"
)

// upstreamPlugin is upstream's pkg/volume/csi plugin set up as the kubelet sets it up: on a
// kubelet volume host rooted at root, with an API client (a fake clientset holding the Node
// and hostpath's CSIDriver) and a CSIDriver lister, so CanAttach reads the CSIDriver as in a
// cluster. Upstream keeps its registered drivers and node info manager in package variables:
// the last plugin set up is the one registrations go to.
func upstreamPlugin(tb testing.TB, root string) volume.VolumePlugin {
	driver := hostpathCSIDriver()
	return upstreamPluginOn(tb, root, fakeclient.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, driver), driver)
}

// upstreamPluginOn is upstreamPlugin on client (e.g. a real API server's) whose CSIDriver is
// driver.
func upstreamPluginOn(tb testing.TB, root string, client clientset.Interface, driver *storagev1.CSIDriver) volume.VolumePlugin {
	drivers := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	drivers.Add(driver)
	p := csi.ProbeVolumePlugins()[0]
	volumetest.NewFakeKubeletVolumeHostWithCSINodeName(asT(tb), root, client, []volume.VolumePlugin{p}, nodeName,
		storagelisters.NewCSIDriverLister(drivers), nil)
	return p
}
