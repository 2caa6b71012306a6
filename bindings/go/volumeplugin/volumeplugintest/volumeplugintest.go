// Package volumeplugintest is the plugin-independent test environment of kcsi's kubelet volume
// plugin, as net/http/httptest is net/http's: one node's kubelet root directory with the real
// csi-driver-host-path running on it (scripts/peers/build.sh hostpath, or $KCSI_HOSTPATH),
// volumes created in that driver, PersistentVolume specs and pods for them, upstream's
// pkg/volume/csi plugin on a fake kubelet VolumeHost, and the clean-up of what a test mounted.
// The volumeplugin package's tests and the side-by-side benchmarks against upstream
// (benches/upstream) share it. It never imports volumeplugin: the plugin under test is
// passed in.
//
// The driver mounts for real, so whatever starts it needs root (see NeedsRoot).
package volumeplugintest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const (
	// DriverName is the hostpath driver's name, as its deployment registers it.
	DriverName = "hostpath.csi.k8s.io"
	// NodeName is the node the driver and the plugins run on.
	NodeName = "node-1"
)

// HostpathBinary is the path of the real hostpath driver: $KCSI_HOSTPATH, or the one
// scripts/peers/build.sh built.
func HostpathBinary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("KCSI_HOSTPATH"); p != "" {
		return p
	}
	return PeerBinary(tb, "hostpath")
}

// PeerBinary is the path of a real peer scripts/peers/build.sh built.
func PeerBinary(tb testing.TB, name string) string {
	tb.Helper()
	out, err := exec.Command(RepoPath(tb, "scripts/peers/path.sh"), name).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%v: %s", err, ee.Stderr)
		}
		tb.Fatalf("peer %s is not built (scripts/peers/build.sh %s): %v", name, name, err)
	}
	return strings.TrimSpace(string(out))
}

// RepoPath is rel (slash-separated) in the kcsi repository the test runs in: the closest
// directory above the working directory (go test's: the package's) that holds
// scripts/peers/path.sh.
func RepoPath(tb testing.TB, rel string) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "peers", "path.sh")); err == nil {
			return filepath.Join(dir, filepath.FromSlash(rel))
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatalf("no kcsi repository (scripts/peers/path.sh) above the working directory")
		}
		dir = parent
	}
}

// NeedsRoot stops a test that mounts when not run as root: it is skipped, or failed where
// KCSI_REQUIRE_ROOT=1 (set by the suite scripts), since there every test must run.
func NeedsRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() == 0 {
		return
	}
	const why = "needs root: the tests mount"
	if os.Getenv("KCSI_REQUIRE_ROOT") == "1" {
		tb.Fatal(why + ", and KCSI_REQUIRE_ROOT=1 requires every test to run")
	}
	tb.Skip(why)
}

// RunUntilTestEnds runs bin with args, its output in logf, until the test ends (SIGTERM, then
// wait); the log is printed if the test failed.
func RunUntilTestEnds(tb testing.TB, what string, logf *os.File, bin string, args ...string) {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		logf.Close()
		if tb.Failed() {
			b, _ := os.ReadFile(logf.Name())
			tb.Logf("%s log:\n%s", what, b)
		}
	})
}

// StartPeer runs a real peer (scripts/peers/path.sh name) with args until the test ends,
// logging to a file that is printed if the test fails.
func StartPeer(tb testing.TB, name string, args ...string) {
	tb.Helper()
	logf, err := os.CreateTemp("", "kcsi-vp-"+name+".*.log")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.Remove(logf.Name()) }) // runs after the process's cleanup
	RunUntilTestEnds(tb, name, logf, PeerBinary(tb, name), args...)
}
