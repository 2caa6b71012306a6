package volumeplugin

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/kubernetes/pkg/volume"
	volumetest "k8s.io/kubernetes/pkg/volume/testing"

	"kcsi.dev/kcsi/volumeplugin/volumeplugintest"
)

// TestAControllerHostReadsTheControllersListersAndWatchesNothingItself: in the attach/detach
// controller kcsi reads the VolumeAttachments and CSIDrivers from the controller's listers
// (here a shared informer factory's, started and synced as the controller's are), as
// upstream's plugin does. Against a real API server, the real hostpath driver and the real
// external-attacher, Attach, VolumesAreAttached and Detach work, and the API server's audit
// log shows the VolumeHost's client creating and deleting the VolumeAttachment and never
// listing or watching VolumeAttachments or CSIDrivers.
func TestAControllerHostReadsTheControllersListersAndWatchesNothingItself(t *testing.T) {
	volumeplugintest.NeedsRoot(t)
	c := startClusterWith(t, "KCSI_APISERVER_AUDIT=1")
	c.createNode(t)
	ctx := context.Background()
	driver := volumeplugintest.HostpathCSIDriver()
	attach := true
	driver.Spec.AttachRequired = &attach
	if _, err := c.client.StorageV1().CSIDrivers().Create(ctx, driver, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := newEnvIn(t, c, "-enable-attach")
	volumeplugintest.StartPeer(t, "attacher", "--csi-address="+e.Socket, "--kubeconfig="+c.kubeconfig, "--timeout=30s", "-v=5")

	const hostAgent, informerAgent = "attachdetach-host-under-test", "attachdetach-informers-under-test"
	informers := informers.NewSharedInformerFactory(c.clientWithAgent(t, informerAgent), 0)
	drivers, attachments := informers.Storage().V1().CSIDrivers(), informers.Storage().V1().VolumeAttachments()
	drivers.Informer()
	attachments.Informer()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	informers.Start(stop)
	informers.WaitForCacheSync(stop)
	host := asADC(volumetest.NewFakeAttachDetachVolumeHostWithCSINodeName(t, t.TempDir(), c.clientWithAgent(t, hostAgent), nil, "",
		drivers.Lister(), attachments.Lister()))
	p := New(Config{})
	t.Cleanup(p.Close)
	if err := p.Init(host); err != nil {
		t.Fatal(err)
	}

	handle := e.CreateVolume(t, "ctl", false)
	spec := volumeplugintest.PVSpec("pv-ctl", handle, false)
	pv := spec.PersistentVolume.DeepCopy()
	pv.Spec.Capacity = v1.ResourceList{v1.ResourceStorage: resource.MustParse("16Mi")}
	if _, err := c.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if need, err := p.CanAttach(spec); err != nil || !need {
		t.Fatalf("CanAttach = %v, %v: the CSIDriver says attachRequired", need, err)
	}
	a, err := p.NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	node := types.NodeName(volumeplugintest.NodeName)
	started := time.Now()
	if _, err := a.Attach(spec, node); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	t.Logf("attached in %.2f s", time.Since(started).Seconds())
	name := attachmentName(handle, volumeplugintest.DriverName, volumeplugintest.NodeName)
	va, err := c.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
	if err != nil || !va.Status.Attached {
		t.Fatalf("the API server's VolumeAttachment %s: %+v, %v", name, va, err)
	}
	got, err := a.VolumesAreAttached([]*volume.Spec{spec}, node)
	if err != nil || !got[spec] {
		t.Fatalf("VolumesAreAttached = %v, %v", got, err)
	}
	volumeName, err := p.GetVolumeName(spec)
	if err != nil {
		t.Fatal(err)
	}
	d, err := p.NewDetacher()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Detach(volumeName, node); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if _, err := c.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{}); err == nil {
		t.Fatal("the VolumeAttachment is still there after Detach")
	}
	// A detached attachment leaves nothing behind: a long-running controller's feeds hold
	// only live objects.
	feeds := p.feeds.Load()
	feeds.mu.Lock()
	if v, held := feeds.fed["VolumeAttachment/"+name]; held {
		t.Errorf("the feeds still hold the detached VolumeAttachment %s (resourceVersion %q)", name, v)
	}
	feeds.mu.Unlock()

	var created, deleted bool
	for _, ev := range c.audit(t) {
		if ev.UserAgent != hostAgent || ev.ObjectRef == nil {
			continue
		}
		res := ev.ObjectRef.Resource
		if (res == "volumeattachments" || res == "csidrivers") && (ev.Verb == "list" || ev.Verb == "watch") {
			t.Errorf("the VolumeHost's client sent %s %s: kcsi read around the controller's listers", ev.Verb, res)
		}
		created = created || (res == "volumeattachments" && ev.Verb == "create")
		deleted = deleted || (res == "volumeattachments" && ev.Verb == "delete")
	}
	if !created || !deleted {
		t.Errorf("the audit log has the VolumeAttachment created %v and deleted %v by the VolumeHost's client", created, deleted)
	}
}
