package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kcsi.dev/kcsi/internal/mountinfo"
)

// DriverName is the main hostpath driver's name (attachRequired: false).
const DriverName = "hostpath.csi.k8s.io"

// Node is one kubelet with its CSI driver and registrar, as a DaemonSet would run them:
// the driver's socket under <root>/plugins/<driver>/, the registrar's in plugins_registry/.
type Node struct {
	Suite  *Suite
	Plugin string // kcsi or upstream
	Name   string
	NS     string
	Dir    string
	Root   string
	State  string
	Socket string

	Driver, Registrar, Kubelet *exec.Cmd
	KubeletArgs                []string // extra `kubelet-e2e kubelet` flags
	DriverLog                  string
	CSI                        *grpc.ClientConn
	// attach is the driver that needs attaching, with its external-attacher and the
	// attach/detach controller (attach.go).
	Attach *AttachStack
}

// NewNode is the plugin's node of the suite (not started).
func (s *Suite) NewNode(plugin string) *Node {
	return s.NodeIn(filepath.Join(s.Work, plugin), plugin, "node-"+plugin)
}

// NodeIn is a node named name with everything under dir.
func (s *Suite) NodeIn(dir, plugin, name string) *Node {
	root := filepath.Join(dir, "root")
	return &Node{Suite: s, Plugin: plugin, Name: name, NS: "ns-" + plugin, Dir: dir, Root: root,
		State: filepath.Join(dir, "state"), Socket: filepath.Join(root, "plugins", DriverName, "csi.sock"),
		DriverLog: filepath.Join(dir, "driver.log")}
}

// Start starts the driver, its registrar, the kubelet and the attach stack.
func (n *Node) Start(ctx context.Context) error {
	if err := n.StartDriverAndRegistrar(ctx); err != nil {
		return err
	}
	if err := n.StartKubelet(ctx); err != nil {
		return err
	}
	n.Attach = n.newAttachStack()
	return n.Attach.Start(ctx)
}

// StartDriverAndRegistrar starts the hostpath driver and, once its socket is there, the
// registrar.
func (n *Node) StartDriverAndRegistrar(ctx context.Context) error {
	for _, d := range []string{filepath.Dir(n.Socket), filepath.Join(n.Root, "plugins_registry"), n.State} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	if err := n.StartHostpath(ctx); err != nil {
		return err
	}
	return n.StartRegistrar()
}

// StartRegistrar starts the node-driver-registrar for the main driver.
func (n *Node) StartRegistrar() error {
	var err error
	n.Registrar, err = StartProc(filepath.Join(n.Dir, "registrar.log"), n.Suite.Registrar, "--csi-address="+n.Socket,
		"--kubelet-registration-path="+n.Socket, "--plugin-registration-path="+filepath.Join(n.Root, "plugins_registry"), "-v=3")
	if err != nil {
		return fmt.Errorf("node-driver-registrar: %w", err)
	}
	return nil
}

// maxNodeExpansion is the hostpath driver's -max-volume-size-node: NodeExpandVolume above it
// fails with OutOfRange (while ControllerExpandVolume allows up to 1 TiB), the real driver's
// own way to refuse an expansion on the node (scenario expand-refused).
const maxNodeExpansion = 1 << 30

// StartHostpath starts the node's real hostpath driver.
func (n *Node) StartHostpath(ctx context.Context) error {
	return n.StartDriver(ctx, n.Suite.Hostpath, "--endpoint=unix://"+n.Socket, "--nodeid="+n.Name,
		"--statedir="+n.State, "--drivername="+DriverName, fmt.Sprintf("--max-volume-size-node=%d", maxNodeExpansion), "-v=5")
}

// StartDriver starts a CSI driver on the node's socket, logging to the node's driver log, and
// connects the suite's own client to it afresh (a connection to a driver that went away may
// sit in reconnect backoff).
func (n *Node) StartDriver(ctx context.Context, bin string, args ...string) error {
	if err := os.Remove(n.Socket); err != nil && !os.IsNotExist(err) {
		return err
	}
	var err error
	if n.Driver, err = StartProc(n.DriverLog, bin, args...); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(bin), err)
	}
	if err := WaitFor(ctx, 20*time.Second, "the driver's socket", func() (bool, error) {
		_, err := os.Stat(n.Socket)
		return err == nil, nil
	}); err != nil {
		return err
	}
	if n.CSI != nil {
		n.CSI.Close()
	}
	n.CSI, err = grpc.NewClient("unix://"+n.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	return err
}

// StartKubelet starts the kubelet and waits until the node is Ready with the driver in its
// CSINode.
func (n *Node) StartKubelet(ctx context.Context) error {
	if err := n.LaunchKubelet(); err != nil {
		return err
	}
	return WaitFor(ctx, 90*time.Second, n.Name+" Ready with the driver in its CSINode", func() (bool, error) {
		nd, err := n.Suite.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil || !NodeReady(nd) {
			return false, IgnoreNotFound(err)
		}
		cn, err := n.Suite.Client.StorageV1().CSINodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, IgnoreNotFound(err)
		}
		return HasDriver(cn, DriverName), nil
	})
}

// LaunchKubelet starts the kubelet process without waiting for it; kubeletArgs come last
// and so override the defaults.
func (n *Node) LaunchKubelet() error {
	args := append([]string{"kubelet", "-plugin", n.Plugin, "-root", n.Root, "-kubeconfig", n.Kubeconfig(),
		"-node", n.Name, "-v=3"}, n.KubeletArgs...)
	if err := os.MkdirAll(n.Root, 0o750); err != nil {
		return err
	}
	var err error
	if n.Kubelet, err = StartProc(filepath.Join(n.Dir, "kubelet.log"), n.Suite.E2E, args...); err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	return nil
}

// Kubeconfig is the kubelet's: in a secure cluster its node's client certificate's
// (apiserver.sh KCSI_APISERVER_NODE_CERTS), the admin's otherwise.
func (n *Node) Kubeconfig() string {
	if n.Suite.Secure {
		return filepath.Join(n.Suite.apiDir, "users", NodeUser(n.Name)+".kubeconfig")
	}
	return n.Suite.Kubeconfig
}

// NodeReady reports whether the Node's Ready condition is true.
func NodeReady(nd *v1.Node) bool {
	for _, c := range nd.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// HasDriver reports whether the CSINode lists the driver named name.
func HasDriver(cn *storagev1.CSINode, name string) bool {
	for _, d := range cn.Spec.Drivers {
		if d.Name == name {
			return true
		}
	}
	return false
}

// StopKubelet stops the kubelet (SIGTERM, then SIGKILL after 20 s).
func (n *Node) StopKubelet() {
	StopProc(n.Kubelet)
	n.Kubelet = nil
}

// Stop stops the node's processes and cleans up after them.
func (n *Node) Stop() {
	n.StopProcesses()
	n.CleanUp()
}

// StopProcesses stops the attach stack, the kubelet, the registrar and the driver.
func (n *Node) StopProcesses() {
	if n.Attach != nil {
		n.Attach.Stop()
	}
	n.StopKubelet()
	StopProc(n.Registrar)
	if n.CSI != nil {
		n.CSI.Close()
	}
	StopProc(n.Driver)
}

// CleanUp leaves nothing mounted or attached under the node's dir: the kubelet bind-mounts its
// root onto itself (rshared) and keeps it, and a failed scenario may leave volumes published.
func (n *Node) CleanUp() {
	unmountUnder(n.Dir)
	detachLoopsUnder(n.Dir)
}

// LeftMounts lists what is mounted under the node's dir but the kubelet's bind mount of its
// root onto itself: read once the node's processes have stopped and before cleanUp, it is
// what they left behind.
func (n *Node) LeftMounts() ([]string, error) {
	points, err := mountinfo.Under(n.Dir)
	if err != nil {
		return nil, err
	}
	var left []string
	for _, p := range points {
		if p != n.Root {
			left = append(left, p)
		}
	}
	return left, nil
}

// createVolume makes a volume in the driver behind conn, as the external provisioner would.
func createVolume(ctx context.Context, conn *grpc.ClientConn, name string, block bool) (string, error) {
	capability := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	if block {
		capability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		capability.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}
	}
	resp, err := csi.NewControllerClient(conn).CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: name, VolumeCapabilities: []*csi.VolumeCapability{capability},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20},
	})
	if err != nil {
		return "", fmt.Errorf("CreateVolume %s: %w", name, err)
	}
	return resp.Volume.VolumeId, nil
}

// conn is the suite's connection to the node's driver named driver.
func (n *Node) conn(driver string) *grpc.ClientConn {
	if driver == AttachDriverName {
		return n.Attach.CSI
	}
	return n.CSI
}

func deleteVolume(ctx context.Context, conn *grpc.ClientConn, handle string) error {
	_, err := csi.NewControllerClient(conn).DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: handle})
	return err
}

func unmountUnder(dir string) {
	points, err := mountinfo.Under(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-e2e: cleaning up %s: %v\n", dir, err)
		return
	}
	// The deepest first, so no mount is detached from under another.
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-e2e: unmount %s: %v\n", p, err)
		}
	}
}

func detachLoopsUnder(dir string) {
	out, err := exec.Command("losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && strings.HasPrefix(f[1], dir+"/") {
			if err := exec.Command("losetup", "-d", f[0]).Run(); err != nil {
				fmt.Fprintf(os.Stderr, "kubelet-e2e: losetup -d %s: %v\n", f[0], err)
			}
		}
	}
}
