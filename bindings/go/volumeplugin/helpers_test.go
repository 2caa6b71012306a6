package volumeplugin

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
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/volume"
	volumetest "k8s.io/kubernetes/pkg/volume/testing"

	"kcsi.dev/kcsi/internal/mountinfo"
)

// The tests run the real csi-driver-host-path (scripts/peers/build.sh hostpath, or
// $KCSI_HOSTPATH) with real mounts, so they need root.

const (
	driverName = "hostpath.csi.k8s.io"
	nodeName   = "node-1"
)

func hostpathBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("KCSI_HOSTPATH"); p != "" {
		return p
	}
	return peerBinary(t, "hostpath")
}

// peerBinary is the path of a real peer scripts/peers/build.sh built.
func peerBinary(t testing.TB, name string) string {
	t.Helper()
	out, err := exec.Command("../../../scripts/peers/path.sh", name).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%v: %s", err, ee.Stderr)
		}
		t.Fatalf("peer %s is not built (scripts/peers/build.sh %s): %v", name, name, err)
	}
	return strings.TrimSpace(string(out))
}

// needsRoot stops a test that mounts when not run as root: it is skipped, or failed where
// KCSI_REQUIRE_ROOT=1 (set by the suite scripts), since there every test must run.
func needsRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	const why = "needs root: the tests mount"
	if os.Getenv("KCSI_REQUIRE_ROOT") == "1" {
		t.Fatal(why + ", and KCSI_REQUIRE_ROOT=1 requires every test to run")
	}
	t.Skip(why)
}

// env is one kubelet root with a running hostpath driver and an initialized plugin.
type env struct {
	root   string
	socket string
	state  string
	plugin *Plugin
	host   volume.VolumeHost
	csi    *grpc.ClientConn
}

// hostpathCSIDriver is the CSIDriver object the driver's deployment installs.
func hostpathCSIDriver() *storagev1.CSIDriver {
	f := false
	t := true
	file := storagev1.FileFSGroupPolicy
	return &storagev1.CSIDriver{
		TypeMeta:   metav1.TypeMeta{APIVersion: "storage.k8s.io/v1", Kind: "CSIDriver"},
		ObjectMeta: metav1.ObjectMeta{Name: driverName},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:       &f,
			PodInfoOnMount:       &t,
			FSGroupPolicy:        &file,
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral},
		},
	}
}

func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvIn(t, nil)
}

// newEnvIn is newEnv in a cluster (nil: standalone, hostpath's CSIDriver given in Config):
// the plugin and the VolumeHost then use its API server, and the driver gets driverFlags.
func newEnvIn(t testing.TB, c *cluster, driverFlags ...string) *env {
	t.Helper()
	needsRoot(t)
	root, err := os.MkdirTemp("/tmp", "kcsi-vp.")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{root: root, state: filepath.Join(root, "state"),
		socket: filepath.Join(root, "plugins", driverName, "csi.sock")}
	t.Cleanup(func() {
		unmountUnder(t, root)
		detachLoopsUnder(t, root)
		os.RemoveAll(root)
	})
	if err := os.MkdirAll(filepath.Dir(e.socket), 0o750); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(root, "driver.log"))
	if err != nil {
		t.Fatal(err)
	}
	runUntilTestEnds(t, "driver", logf, hostpathBinary(t), append([]string{"--endpoint=unix://" + e.socket, "--nodeid=" + nodeName,
		"--statedir=" + e.state, "--drivername=" + driverName, "-v=5"}, driverFlags...)...)
	// Generous: a loaded CI machine starts the driver in well under a second, but not always.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := os.Stat(e.socket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hostpath driver did not create its socket within 30 s")
		}
		time.Sleep(25 * time.Millisecond)
	}
	e.csi, err = grpc.NewClient("unix://"+e.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.csi.Close() })

	cfg, client := Config{CSIDrivers: []any{hostpathCSIDriver()}}, clientset.Interface(nil)
	if c != nil {
		cfg, client = Config{Kubeconfig: c.kubeconfig}, c.client
	}
	e.startPlugin(t, cfg, client)
	return e
}

// startPlugin makes e.plugin a new plugin with cfg on e's root, as a (re)started kubelet does:
// Init on a kubelet VolumeHost with client, then the driver's registration.
func (e *env) startPlugin(t testing.TB, cfg Config, client clientset.Interface) {
	t.Helper()
	e.plugin = New(cfg)
	t.Cleanup(e.plugin.Close)
	e.host = volumetest.NewFakeKubeletVolumeHostWithCSINodeName(asT(t), e.root, client, []volume.VolumePlugin{e.plugin}, nodeName, nil, nil)
	h := e.plugin.RegistrationHandler()
	if err := h.ValidatePlugin(driverName, e.socket, []string{"1.0.0"}); err != nil {
		t.Fatal(err)
	}
	timeout := 10 * time.Second
	if err := h.RegisterPlugin(driverName, e.socket, []string{"1.0.0"}, &timeout); err != nil {
		t.Fatal(err)
	}
}

// asT is t for volumetest's constructors, which take a *testing.T: a benchmark's failures
// there surface as a panic of the zero T instead.
func asT(t testing.TB) *testing.T {
	if tt, ok := t.(*testing.T); ok {
		return tt
	}
	return &testing.T{}
}

// createVolume makes a volume in the driver, as the external provisioner would.
func (e *env) createVolume(t testing.TB, name string, block bool) string {
	t.Helper()
	capability := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	if block {
		capability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		capability.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := csi.NewControllerClient(e.csi).CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: name, VolumeCapabilities: []*csi.VolumeCapability{capability},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20},
	})
	if err != nil {
		t.Fatalf("CreateVolume %s: %v", name, err)
	}
	handle := resp.Volume.VolumeId
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		csi.NewControllerClient(e.csi).DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: handle})
	})
	return handle
}

func pvSpec(name, handle string, block bool) *volume.Spec {
	mode := v1.PersistentVolumeFilesystem
	if block {
		mode = v1.PersistentVolumeBlock
	}
	return volume.NewSpecFromPersistentVolume(&v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			VolumeMode:             &mode,
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: handle}},
		},
	}, false)
}

func testPod(uid string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "default", UID: types.UID(uid)}}
}

// unmountUnder lazily unmounts every mount below dir, deepest first, so nothing is left
// behind even when a test failed half way.
func unmountUnder(t testing.TB, dir string) {
	points, err := mountinfo.Under(dir)
	if err != nil {
		t.Fatalf("reading the mount table: %v", err)
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			t.Logf("unmount %s: %v", p, err)
		}
	}
}

// isMountPoint reads the mount table with the tests' own reader (internal/mountinfo), never kcsi's.
func isMountPoint(t *testing.T, path string) bool {
	t.Helper()
	ok, err := mountinfo.IsMountPoint(path)
	if err != nil {
		t.Fatalf("reading the mount table: %v", err)
	}
	return ok
}

// detachLoopsUnder detaches loop devices backed by files below dir (the driver's block
// volumes), in case a test stopped before the driver did.
func detachLoopsUnder(t testing.TB, dir string) {
	out, err := exec.Command("losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && strings.HasPrefix(f[1], dir+"/") {
			if err := exec.Command("losetup", "-d", f[0]).Run(); err != nil {
				t.Logf("losetup -d %s: %v", f[0], err)
			}
		}
	}
}

// runUntilTestEnds runs bin with args, its output in logf, until the test ends (SIGTERM, then
// wait); the log is printed if the test failed.
func runUntilTestEnds(t testing.TB, what string, logf *os.File, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s log:\n%s", what, b)
		}
	})
}
