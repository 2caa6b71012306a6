package volumeplugintest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// Node is one node's kubelet root directory with the real hostpath driver running on it, its
// socket where the kubelet's plugin watcher finds it (plugins/<driver>/csi.sock).
type Node struct {
	Root   string           // the kubelet root directory, below /tmp
	Socket string           // the driver's socket
	State  string           // the driver's state directory (--statedir)
	CSI    *grpc.ClientConn // a client of the driver, for what the kubelet does not do (CreateVolume)
}

// StartNode makes a kubelet root directory and starts the hostpath driver on it with
// driverFlags (e.g. -enable-attach) added to its own, until the test ends; then it unmounts
// whatever is left below the root, detaches loop devices backed by files there and removes
// it. It needs root (NeedsRoot).
func StartNode(tb testing.TB, driverFlags ...string) *Node {
	tb.Helper()
	NeedsRoot(tb)
	root, err := os.MkdirTemp("/tmp", "kcsi-vp.")
	if err != nil {
		tb.Fatal(err)
	}
	n := &Node{Root: root, State: filepath.Join(root, "state"),
		Socket: filepath.Join(root, "plugins", DriverName, "csi.sock")}
	tb.Cleanup(func() {
		UnmountUnder(tb, root)
		DetachLoopsUnder(tb, root)
		os.RemoveAll(root)
	})
	if err := os.MkdirAll(filepath.Dir(n.Socket), 0o750); err != nil {
		tb.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(root, "driver.log"))
	if err != nil {
		tb.Fatal(err)
	}
	RunUntilTestEnds(tb, "driver", logf, HostpathBinary(tb), append([]string{"--endpoint=unix://" + n.Socket, "--nodeid=" + NodeName,
		"--statedir=" + n.State, "--drivername=" + DriverName, "-v=5"}, driverFlags...)...)
	// Generous: a loaded CI machine starts the driver in well under a second, but not always.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := os.Stat(n.Socket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatal("the hostpath driver did not create its socket within 30 s")
		}
		time.Sleep(25 * time.Millisecond)
	}
	n.CSI, err = grpc.NewClient("unix://"+n.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { n.CSI.Close() })
	return n
}

// Register registers the driver with a plugin's registration handler as the kubelet's plugin
// watcher does: ValidatePlugin, then RegisterPlugin, with the driver's socket and version.
func (n *Node) Register(tb testing.TB, h cache.PluginHandler) {
	tb.Helper()
	if err := h.ValidatePlugin(DriverName, n.Socket, []string{"1.0.0"}); err != nil {
		tb.Fatal(err)
	}
	timeout := 10 * time.Second
	if err := h.RegisterPlugin(DriverName, n.Socket, []string{"1.0.0"}, &timeout); err != nil {
		tb.Fatal(err)
	}
}

// CreateVolume makes a volume in the driver, as the external provisioner would, and deletes
// it when the test ends; it returns the volume's handle.
func (n *Node) CreateVolume(tb testing.TB, name string, block bool) string {
	tb.Helper()
	capability := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	if block {
		capability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		capability.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := csi.NewControllerClient(n.CSI).CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: name, VolumeCapabilities: []*csi.VolumeCapability{capability},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20},
	})
	if err != nil {
		tb.Fatalf("CreateVolume %s: %v", name, err)
	}
	handle := resp.Volume.VolumeId
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		csi.NewControllerClient(n.CSI).DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: handle})
	})
	return handle
}
