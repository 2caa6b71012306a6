package main

import (
	"context"
	"errors"
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kcsi.dev/kcsi/tests/kubelet/mountinfo"
)

const driverName = "hostpath.csi.k8s.io"

// node is one kubelet with its CSI driver and registrar, as a DaemonSet would run them:
// the driver's socket under <root>/plugins/<driver>/, the registrar's in plugins_registry/.
type node struct {
	s      *suite
	plugin string // kcsi or upstream
	name   string
	ns     string
	dir    string
	root   string
	state  string
	socket string

	driver, registrar, kubelet *exec.Cmd
	kubeletArgs                []string // extra `kubelet-e2e kubelet` flags
	driverLog                  string
	csi                        *grpc.ClientConn
	// attach is the driver that needs attaching, with its external-attacher and the
	// attach/detach controller (attach.go).
	attach *attachStack
}

func (s *suite) newNode(plugin string) *node {
	return s.nodeIn(filepath.Join(s.work, plugin), plugin, "node-"+plugin)
}

// nodeIn is a node named name with everything under dir.
func (s *suite) nodeIn(dir, plugin, name string) *node {
	root := filepath.Join(dir, "root")
	return &node{s: s, plugin: plugin, name: name, ns: "ns-" + plugin, dir: dir, root: root,
		state: filepath.Join(dir, "state"), socket: filepath.Join(root, "plugins", driverName, "csi.sock"),
		driverLog: filepath.Join(dir, "driver.log")}
}

func startProc(logPath string, name string, args ...string) (*exec.Cmd, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() { cmd.Wait(); f.Close() }()
	return cmd, nil
}

func stopProc(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Kill()
}

// killProc kills cmd with SIGKILL, as a crash would, and waits until it is gone.
func killProc(cmd *exec.Cmd) {
	cmd.Process.Kill()
	for cmd.Process.Signal(syscall.Signal(0)) == nil {
		time.Sleep(20 * time.Millisecond)
	}
}

func (n *node) start(ctx context.Context) error {
	if err := n.startDriverAndRegistrar(ctx); err != nil {
		return err
	}
	if err := n.startKubelet(ctx); err != nil {
		return err
	}
	n.attach = n.newAttachStack()
	return n.attach.start(ctx)
}

// startDriverAndRegistrar starts the hostpath driver and, once its socket is there, the
// registrar.
func (n *node) startDriverAndRegistrar(ctx context.Context) error {
	for _, d := range []string{filepath.Dir(n.socket), filepath.Join(n.root, "plugins_registry"), n.state} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	if err := n.startHostpath(ctx); err != nil {
		return err
	}
	return n.startRegistrar()
}

func (n *node) startRegistrar() error {
	var err error
	n.registrar, err = startProc(filepath.Join(n.dir, "registrar.log"), n.s.registrar, "--csi-address="+n.socket,
		"--kubelet-registration-path="+n.socket, "--plugin-registration-path="+filepath.Join(n.root, "plugins_registry"), "-v=3")
	if err != nil {
		return fmt.Errorf("node-driver-registrar: %w", err)
	}
	return nil
}

// maxNodeExpansion is the hostpath driver's -max-volume-size-node: NodeExpandVolume above it
// fails with OutOfRange (while ControllerExpandVolume allows up to 1 TiB), the real driver's
// own way to refuse an expansion on the node (scenario expand-refused).
const maxNodeExpansion = 1 << 30

// startHostpath starts the node's real hostpath driver.
func (n *node) startHostpath(ctx context.Context) error {
	return n.startDriver(ctx, n.s.hostpath, "--endpoint=unix://"+n.socket, "--nodeid="+n.name,
		"--statedir="+n.state, "--drivername="+driverName, fmt.Sprintf("--max-volume-size-node=%d", maxNodeExpansion), "-v=5")
}

// startDriver starts a CSI driver on the node's socket, logging to the node's driver log, and
// connects the suite's own client to it afresh (a connection to a driver that went away may
// sit in reconnect backoff).
func (n *node) startDriver(ctx context.Context, bin string, args ...string) error {
	if err := os.Remove(n.socket); err != nil && !os.IsNotExist(err) {
		return err
	}
	var err error
	if n.driver, err = startProc(n.driverLog, bin, args...); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(bin), err)
	}
	if err := waitFor(ctx, 20*time.Second, "the driver's socket", func() (bool, error) {
		_, err := os.Stat(n.socket)
		return err == nil, nil
	}); err != nil {
		return err
	}
	if n.csi != nil {
		n.csi.Close()
	}
	n.csi, err = grpc.NewClient("unix://"+n.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	return err
}

func (n *node) startKubelet(ctx context.Context) error {
	if err := n.launchKubelet(); err != nil {
		return err
	}
	return waitFor(ctx, 90*time.Second, n.name+" Ready with the driver in its CSINode", func() (bool, error) {
		nd, err := n.s.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil || !nodeReady(nd) {
			return false, ignoreNotFound(err)
		}
		cn, err := n.s.client.StorageV1().CSINodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return false, ignoreNotFound(err)
		}
		return hasDriver(cn, driverName), nil
	})
}

// launchKubelet starts the kubelet process without waiting for it; kubeletArgs come last
// and so override the defaults.
func (n *node) launchKubelet() error {
	args := append([]string{"kubelet", "-plugin", n.plugin, "-root", n.root, "-kubeconfig", n.s.kubeconfig,
		"-node", n.name, "-v=3"}, n.kubeletArgs...)
	if err := os.MkdirAll(n.root, 0o750); err != nil {
		return err
	}
	var err error
	if n.kubelet, err = startProc(filepath.Join(n.dir, "kubelet.log"), n.s.self, args...); err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	return nil
}

func nodeReady(nd *v1.Node) bool {
	for _, c := range nd.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// hasDriver reports whether the CSINode lists the driver named name.
func hasDriver(cn *storagev1.CSINode, name string) bool {
	for _, d := range cn.Spec.Drivers {
		if d.Name == name {
			return true
		}
	}
	return false
}

func (n *node) stopKubelet() {
	stopProc(n.kubelet)
	n.kubelet = nil
}

// stop stops the node's processes and cleans up after them.
func (n *node) stop() {
	n.stopProcesses()
	n.cleanUp()
}

func (n *node) stopProcesses() {
	if n.attach != nil {
		n.attach.stop()
	}
	n.stopKubelet()
	stopProc(n.registrar)
	if n.csi != nil {
		n.csi.Close()
	}
	stopProc(n.driver)
}

// cleanUp leaves nothing mounted or attached under the node's dir: the kubelet bind-mounts its
// root onto itself (rshared) and keeps it, and a failed scenario may leave volumes published.
func (n *node) cleanUp() {
	unmountUnder(n.dir)
	detachLoopsUnder(n.dir)
}

// leftMounts lists what is mounted under the node's dir but the kubelet's bind mount of its
// root onto itself: read once the node's processes have stopped and before cleanUp, it is
// what they left behind.
func (n *node) leftMounts() ([]string, error) {
	points, err := mountinfo.Under(n.dir)
	if err != nil {
		return nil, err
	}
	var left []string
	for _, p := range points {
		if p != n.root {
			left = append(left, p)
		}
	}
	return left, nil
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	return waitEvery(ctx, 100*time.Millisecond, timeout, what, cond)
}

// errTimedOut is waitFor's error when its condition did not come true in time.
var errTimedOut = errors.New("timed out")

// waitEvery is waitFor checking every period (the fleet's checks list every node).
func waitEvery(ctx context.Context, period, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %s waiting for %s", errTimedOut, timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(period):
		}
	}
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
func (n *node) conn(driver string) *grpc.ClientConn {
	if driver == attachDriverName {
		return n.attach.csi
	}
	return n.csi
}

func deleteVolume(ctx context.Context, conn *grpc.ClientConn, handle string) error {
	_, err := csi.NewControllerClient(conn).DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: handle})
	return err
}

// isMountPoint says whether path is a mount point, and if not, or if the mount table is
// unreadable, why.
func isMountPoint(path string) (bool, string) {
	ok, err := mountinfo.IsMountPoint(path)
	if err != nil {
		return false, err.Error()
	}
	if !ok {
		return false, path + " is not a mount point"
	}
	return true, path
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
