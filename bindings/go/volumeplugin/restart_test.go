package volumeplugin

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/kubernetes/pkg/volume"
	"k8s.io/kubernetes/pkg/volume/csi"
	volumetest "k8s.io/kubernetes/pkg/volume/testing"

	"kcsi.dev/kcsi/volumeplugin/volumeplugintest"
)

// TestARestartedKubeletClearsItsCSINodeErrorWithoutRecreatingTheCSINode: after a kubelet
// restart the CSINode exists from before; kcsi's start-up keeps it (same UID) and clears the
// kubelet's "CSINode is not yet initialized" (which holds Ready back), as upstream's does on
// the same API server. The time each took from Init is printed, not asserted: a restarted
// kubelet sends its first node status right after Init, and an error still set then keeps
// the node NotReady until the next status, 10 s on.
func TestARestartedKubeletClearsItsCSINodeErrorWithoutRecreatingTheCSINode(t *testing.T) {
	c := startCluster(t)
	c.createNode(t)
	// The kubelet's client: its default kubeAPIQPS and kubeAPIBurst.
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	kubelet, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	boot := func(init func(volume.VolumeHost) error) time.Duration {
		t.Helper()
		host := volumetest.NewFakeKubeletVolumeHostWithCSINodeName(t, t.TempDir(), kubelet, nil, volumeplugintest.NodeName, nil, nil)
		start := time.Now()
		if err := init(host); err != nil {
			t.Fatal(err)
		}
		if err := host.WaitForKubeletErrNil(); err != nil {
			t.Fatalf("the kubelet's error was not cleared: %v", err)
		}
		return time.Since(start)
	}
	kcsiWith := func(cfg Config) func(volume.VolumeHost) error {
		return func(host volume.VolumeHost) error {
			p := New(cfg)
			t.Cleanup(p.Close)
			return p.Init(host)
		}
	}
	withKcsi := kcsiWith(Config{})
	boot(withKcsi) // the first boot creates the CSINode
	before, err := c.client.StorageV1().CSINodes().Get(context.Background(), volumeplugintest.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const restarts = 5
	var kcsiTook, ownClientTook, upstreamTook []time.Duration
	for range restarts {
		kcsiTook = append(kcsiTook, boot(withKcsi))
		ownClientTook = append(ownClientTook, boot(kcsiWith(Config{Kubeconfig: c.kubeconfig})))
		upstreamTook = append(upstreamTook, boot(func(host volume.VolumeHost) error { return csi.ProbeVolumePlugins()[0].Init(host) }))
	}
	after, err := c.client.StorageV1().CSINodes().Get(context.Background(), volumeplugintest.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != before.UID {
		t.Errorf("a restart recreated the CSINode (UID %s, was %s)", after.UID, before.UID)
	}
	t.Logf("kubelet restart, Init to CSINode initialised (%d restarts, each): kcsi %v; kcsi with its own client (Config.Kubeconfig) %v; upstream %v",
		restarts, kcsiTook, ownClientTook, upstreamTook)
}
