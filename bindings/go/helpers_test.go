package kcsi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests run against real CSI driver processes: the real csi-driver-host-path
// (hostpathplugin), its volumes created with the project's own command line (`kcsi
// create-volume`, the external-provisioner's call: this standard-library-only package has no
// gRPC client). No test here needs a capability hostpath lacks, so no mock driver. Binaries
// come from the repository's peer cache (scripts/peers/path.sh) and target/release, or
// $KCSI_HOSTPATH / $KCSI_CLI.
var peerBinaries sync.Map // peer name -> func() (string, error)

func peerBinary(t testing.TB, peer, env string) string {
	t.Helper()
	once, _ := peerBinaries.LoadOrStore(peer, sync.OnceValues(func() (string, error) {
		if p := os.Getenv(env); p != "" {
			return p, nil
		}
		out, err := exec.Command("../../scripts/peers/path.sh", peer).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%v: %s", err, ee.Stderr)
			}
			return "", fmt.Errorf("peer %s is not built (run scripts/peers/build.sh %s or set %s): %w", peer, peer, env, err)
		}
		return strings.TrimSpace(string(out)), nil
	}))
	path, err := once.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// needsRoot stops a test that mounts when not run as root (scripts/test-go.sh runs as root).
func needsRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		cannotRun(t, "mounting needs root")
	}
}

// cannotRun skips t, which cannot run here for the reason why, or fails it where
// KCSI_REQUIRE_ROOT=1 (set by scripts/test-go.sh): there every test must run.
func cannotRun(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("KCSI_REQUIRE_ROOT") == "1" {
		t.Fatalf("%s, and KCSI_REQUIRE_ROOT=1 requires every test to run", why)
	}
	t.Skip(why)
}

// shortTempDir is a fresh directory under /tmp: sun_path holds only 108 bytes, too few for
// t.TempDir's deep paths.
func shortTempDir(t testing.TB, prefix string) string {
	t.Helper()
	base := "/tmp"
	if d := os.Getenv("KCSI_GO_TEST_TMP"); d != "" {
		base = d // a child process's: its parent removes it even if the child dies
	}
	dir, err := os.MkdirTemp(base, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// driverProcess is a running peer process: a CSI driver (with its socket) or another peer.
type driverProcess struct {
	Name     string
	Socket   string
	Endpoint string // unix://<socket>
	StateDir string // hostpathplugin's --statedir: a filesystem volume is the directory <StateDir>/<id>
	cmd      *exec.Cmd
	log      logFile
	stopOnce sync.Once
}

// logFile is a child's stdout and stderr: a file the child writes itself, with no copying
// goroutine between, so a line it logged before answering a call is there once the answer is.
type logFile struct{ *os.File }

func newLogFile(t testing.TB) logFile {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return logFile{f}
}

func (l logFile) String() string {
	b, _ := os.ReadFile(l.Name())
	return string(b)
}

// startHostpathDriver starts the real hostpathplugin serving name, with node id name, and
// stops it when the test ends.
func startHostpathDriver(t testing.TB, name string, flags ...string) *driverProcess {
	t.Helper()
	dir := shortTempDir(t, "kcsigo-drv")
	state := filepath.Join(dir, "state")
	args := append([]string{"--nodeid=" + name, "--statedir=" + state, "-v=5"}, flags...)
	d := startDriver(t, peerBinary(t, "hostpath", "KCSI_HOSTPATH"), dir, name, args)
	d.StateDir = state
	return d
}

// kcsiCommand is the project's command line: $KCSI_CLI, else the release build's.
func kcsiCommand(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("KCSI_CLI"); p != "" {
		return p
	}
	p, err := filepath.Abs("../../target/release/kcsi")
	if err == nil {
		_, err = os.Stat(p)
	}
	if err != nil {
		t.Fatalf("the kcsi command is not built (make build, or set KCSI_CLI): %v", err)
	}
	return p
}

// createVolume creates a volume of size (e.g. "16Mi") named name on driver d with
// `kcsi create-volume`, as the external-provisioner would, and returns its handle; the volume
// is deleted when the test ends (hostpathplugin detaches a block volume's loop device only then).
func createVolume(t testing.TB, d *driverProcess, name, size string, block bool) string {
	t.Helper()
	bin := kcsiCommand(t)
	args := []string{"create-volume", "--endpoint=" + d.Endpoint, "--name=" + name, "--size=" + size}
	if block {
		args = append(args, "--block")
	}
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%v: %s", err, ee.Stderr)
		}
		t.Fatalf("kcsi create-volume %s: %v", name, err)
	}
	id := strings.TrimSpace(string(out))
	if id == "" {
		t.Fatalf("kcsi create-volume %s printed no volume id", name)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(bin, "delete-volume", "--endpoint="+d.Endpoint, "--volume-handle="+id).CombinedOutput(); err != nil {
			t.Errorf("kcsi delete-volume %s: %v: %s", id, err, out)
		}
	})
	return id
}

// startProcess starts the peer bin with args, its output in a log file, and stops it when
// the test ends (showing its log if the test failed).
func startProcess(t testing.TB, name, bin string, args []string) *driverProcess {
	t.Helper()
	p := &driverProcess{Name: name, log: newLogFile(t)}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log.File, p.log.File
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.log.String())
		}
	})
	return p
}

// startDriver starts the CSI driver bin serving name on dir/csi.sock and waits until it
// listens there.
func startDriver(t testing.TB, bin, dir, name string, args []string) *driverProcess {
	t.Helper()
	socket := filepath.Join(dir, "csi.sock")
	d := startProcess(t, "driver "+name, bin, append([]string{"--endpoint=unix://" + socket, "--drivername=" + name}, args...))
	d.Name, d.Socket, d.Endpoint = name, socket, "unix://"+socket
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.Dial("unix", d.Socket); err == nil {
			c.Close()
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("driver %s did not listen on %s; log:\n%s", name, d.Socket, d.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// driverCall is one RPC from the driver's call log: hostpathplugin at -v=5 logs a
// `gRPCCall: {"Method", "Request", "Response", "Error"}` line per call.
type driverCall struct {
	Method   string
	Request  json.RawMessage
	Response json.RawMessage
	Error    string
}

// calls returns the calls to the method whose name ends in method, in order.
func (d *driverProcess) calls(t testing.TB, method string) []driverCall {
	t.Helper()
	var out []driverCall
	for _, line := range strings.Split(d.log.String(), "\n") {
		_, j, ok := strings.Cut(line, "gRPCCall: ")
		if !ok {
			continue
		}
		var c driverCall
		if err := json.Unmarshal([]byte(j), &c); err != nil {
			t.Fatalf("driver %s logged a call that is not JSON: %v: %s", d.Name, err, j)
		}
		if strings.HasSuffix(c.Method, "/"+method) {
			out = append(out, c)
		}
	}
	return out
}

// stop ends the driver process (SIGTERM, then SIGKILL after 10 s); idempotent.
func (d *driverProcess) stop(t testing.TB) {
	d.stopOnce.Do(func() {
		d.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { d.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Logf("%s ignored SIGTERM; killing it", d.cmd.Path)
			d.cmd.Process.Kill()
			<-done
		}
	})
}

// trackedListener listens on the Unix socket sock; the listener and every connection given
// to track are closed when the test ends.
func trackedListener(t testing.TB, sock string) (l net.Listener, track func(net.Conn)) {
	t.Helper()
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l, func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
}

// serveConns hands every connection l accepts to handle, until l is closed.
func serveConns(l net.Listener, handle func(net.Conn)) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
}

// silentDriver listens on a Unix socket and accepts connections but never answers: every
// call to it runs into its deadline.
func silentDriver(t testing.TB) string {
	t.Helper()
	sock := filepath.Join(shortTempDir(t, "kcsigo-silent"), "csi.sock")
	l, track := trackedListener(t, sock)
	serveConns(l, track)
	return "unix://" + sock
}

// slammingDriver accepts connections on a Unix socket and closes them at once, as a driver
// that crashes under an open connection does.
func slammingDriver(t testing.TB) string {
	t.Helper()
	sock := filepath.Join(shortTempDir(t, "kcsigo-slam"), "csi.sock")
	l, _ := trackedListener(t, sock)
	serveConns(l, func(c net.Conn) { c.Close() })
	return "unix://" + sock
}

// registerDriver registers d with h at endpoint (d's own when empty), failing the test if
// that fails.
func registerDriver(t testing.TB, h *Host, d *driverProcess, endpoint string) {
	t.Helper()
	if endpoint == "" {
		endpoint = d.Endpoint
	}
	if err := h.RegisterPlugin(context.Background(), d.Name, endpoint, []string{"1.0.0"}); err != nil {
		t.Fatalf("RegisterPlugin(%s): %v", d.Name, err)
	}
}

// mountDevice makes an attacher (closed when the test ends) and mounts spec's device at its
// device mount path, which it returns.
func mountDevice(t testing.TB, h *Host, spec Spec, args *DeviceMounterArgs) (*Attacher, string) {
	t.Helper()
	a, err := h.NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	staging, err := a.DeviceMountPath(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.MountDevice(context.Background(), spec, staging, args); err != nil {
		t.Fatalf("MountDevice: %v", err)
	}
	return a, staging
}

// newTestHost creates a standalone host on a fresh root and closes it when the test ends.
func newTestHost(t testing.TB, cfg Config) *Host {
	t.Helper()
	if cfg.NodeName == "" {
		cfg.NodeName = "node-1"
	}
	if cfg.RootDir == "" {
		cfg.RootDir = shortTempDir(t, "kcsigo-root")
	}
	// Registered before Close, so run after it: every volume the test set up it also tore down.
	t.Cleanup(func() { nothingLeftMountedUnder(t, cfg.RootDir) })
	h, err := NewHost(cfg)
	if err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

// kcsiError asserts that err is an *Error and returns it.
func kcsiError(t testing.TB, err error) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want a *kcsi.Error, got %T: %v", err, err)
	}
	return e
}

// inChild re-runs the calling test alone in a child process and reports whether this process
// is that child (then the test body runs here). In the parent it fails the test when the child
// failed or was killed by a signal, with the child's output.
func inChild(t *testing.T) bool {
	t.Helper()
	if os.Getenv("KCSI_GO_TEST_CHILD") == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "KCSI_GO_TEST_CHILD="+t.Name(), "KCSI_GO_TEST_TMP="+shortTempDir(t, "kcsigo-child"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Fatalf("the test process was killed by %v (a signal kcsi raised on one of its threads); output:\n%s", ws.Signal(), out)
			}
		}
		t.Fatalf("child test failed: %v; output:\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("child test did not pass; output:\n%s", out)
	}
	return false
}

// stallingProxy listens on a new socket and forwards every connection to target, until the
// client sends marker: from then on nothing more reaches the driver (and the client gets no
// answer), as with a driver that hangs in the middle of that call. Returns the endpoint.
func stallingProxy(t testing.TB, target, marker string) string {
	t.Helper()
	sock := filepath.Join(shortTempDir(t, "kcsigo-proxy"), "csi.sock")
	l, track := trackedListener(t, sock)
	serveConns(l, func(client net.Conn) {
		server, err := net.Dial("unix", target)
		if err != nil {
			client.Close()
			return
		}
		track(client)
		track(server)
		go func() { // driver -> client, unchanged
			buf := make([]byte, 32<<10)
			for {
				n, err := server.Read(buf)
				if n > 0 {
					client.Write(buf[:n])
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // client -> driver, until the marker shows up
			buf := make([]byte, 32<<10)
			var tail []byte // the end of the previous read, for a marker split across reads
			stalled := false
			for {
				n, err := client.Read(buf)
				if n > 0 && !stalled {
					window := append(tail, buf[:n]...)
					if bytes.Contains(window, []byte(marker)) {
						stalled = true
					} else {
						server.Write(buf[:n])
						tail = append([]byte(nil), window[max(0, len(window)-len(marker)):]...)
					}
				}
				if err != nil {
					return
				}
			}
		}()
	})
	return "unix://" + sock
}
