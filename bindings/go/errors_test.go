package kcsi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestErrorsMatchTheirSentinelOnly(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &Error{Op: "X", Result: ResultNotFound, Class: ClassTransient, GRPCCode: -1, Message: "m"})
	if !errors.Is(err, ErrNotFound) {
		t.Fatal("errors.Is(err, ErrNotFound) = false through a wrap")
	}
	for _, other := range []error{ErrAlreadyExists, ErrTimeout, ErrClosed, context.DeadlineExceeded} {
		if errors.Is(err, other) {
			t.Fatalf("a not-found error matches %v", other)
		}
	}
	if !IsTransient(err) || IsUncertain(err) {
		t.Fatal("class helpers disagree with the class")
	}
	if IsTransient(errors.New("plain")) || IsUncertain(nil) {
		t.Fatal("class helpers accept errors that are not kcsi's")
	}
	if got := ResultNotFound.String(); got != "KCSI_ERR_NOT_FOUND" {
		t.Fatalf("ResultNotFound.String() = %q", got)
	}
	if got := Result(99).String(); got != "KCSI_UNKNOWN_RESULT" {
		t.Fatalf("Result(99).String() = %q", got)
	}
}

func TestNewHostRejectsAnUnknownConfigKeyByName(t *testing.T) {
	_, err := NewHostJSON(map[string]any{"nodeName": "n", "rootDir": "/tmp", "bogusKey": 1})
	e := kcsiError(t, err)
	if !errors.Is(err, ErrInvalidArgument) || e.Class != ClassFinal || e.GRPCCode != -1 || !strings.Contains(e.Message, "bogusKey") {
		t.Fatalf("unknown key: %#v", e)
	}
	if _, err := NewHost(Config{NodeName: "n"}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("missing rootDir: want ErrInvalidArgument, got %v", err)
	}
}

func TestStringsWithNULAreRefusedBeforeReachingC(t *testing.T) {
	h := newTestHost(t, Config{})
	err := h.ValidatePlugin("bad\x00name", "unix:///tmp/x.sock", []string{"1.0.0"})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "NUL") {
		t.Fatalf("want ErrInvalidArgument about NUL, got %v", err)
	}
	err = h.ValidatePlugin("ok.csi", "unix:///tmp/x.sock", []string{"1.0.0", "1.\x001"})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "versions[1]") {
		t.Fatalf("want ErrInvalidArgument naming versions[1], got %v", err)
	}
}

func TestDriverErrorsCarryResultClassAndGRPCCode(t *testing.T) {
	d := startHostpathDriver(t, "codes.csi.kcsi.dev")
	h := newTestHost(t, Config{CSIDrivers: []any{noAttachCSIDriver(d.Name)}})
	registerDriver(t, h, d, "")
	// hostpathplugin answers NodePublishVolume for an unknown volume with NotFound (5).
	m, err := h.NewMounter(pvSpec(d.Name, "pv-missing", "no-such-volume"), pod("pod-codes"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	err = m.SetUp(context.Background(), nil)
	e := kcsiError(t, err)
	if !errors.Is(err, ErrDriver) || e.GRPCCode != 5 || e.Class != ClassFinal || e.Op != "Mounter.SetUp" {
		t.Fatalf("want a final ErrDriver with gRPC code 5, got %#v", e)
	}
	if !strings.Contains(e.Error(), "KCSI_ERR_DRIVER") || e.Message == "" {
		t.Fatalf("Error() = %q", e.Error())
	}
	// Upstream's mounter returns the driver's error as grpc-go prints it (csi_mounter.go SetUpAt):
	// kcsi's message adds which driver at which socket; the upstream wording does not.
	if !strings.HasPrefix(e.UpstreamMessage, "rpc error: code = NotFound desc = ") || strings.Contains(e.UpstreamMessage, d.Name) {
		t.Errorf("UpstreamMessage = %q", e.UpstreamMessage)
	}
	if !strings.Contains(e.Message, d.Name) || !strings.HasSuffix(e.Message, e.UpstreamMessage) {
		t.Errorf("Message = %q", e.Message)
	}
}

func TestSetUpWithoutARegisteredDriverIsTransient(t *testing.T) {
	h := newTestHost(t, Config{CSIDrivers: []any{noAttachCSIDriver("absent.csi.kcsi.dev")}})
	m, err := h.NewMounter(pvSpec("absent.csi.kcsi.dev", "pv-1", "1"), pod("pod-absent"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	err = m.SetUp(context.Background(), nil)
	if !IsTransient(err) || kcsiError(t, err).GRPCCode != -1 {
		t.Fatalf("want a transient error without gRPC code, got %#v", err)
	}
}

func TestADriverThatDropsConnectionsCannotKillTheProcess(t *testing.T) {
	// Run in a child process: if kcsi lets SIGPIPE from a closed driver connection reach the
	// process, the process dies, and this test must report that instead of ending the run.
	if !inChild(t) {
		return
	}
	endpoint := slammingDriver(t)
	h := newTestHost(t, Config{})
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := h.RegisterPlugin(ctx, "slam.csi.kcsi.dev", endpoint, []string{"1.0.0"})
		cancel()
		if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrTimeout) {
			t.Fatalf("want ErrUnavailable or ErrTimeout from a driver that hangs up, got %v", err)
		}
		if !IsTransient(err) {
			t.Fatalf("a registration that could not reach the driver is transient; got %#v", err)
		}
	}
}

func TestSetUpAgainstADriverThatHangsInNodePublishIsUncertain(t *testing.T) {
	d := startHostpathDriver(t, "hang.csi.kcsi.dev")
	// The pod UID is part of NodePublishVolume's target path and of no other request.
	endpoint := stallingProxy(t, d.Socket, "pod-hangs-here")
	h := newTestHost(t, Config{Timeout: time.Second, CSIDrivers: []any{noAttachCSIDriver(d.Name)}})
	registerDriver(t, h, d, endpoint)
	m, err := h.NewMounter(pvSpec(d.Name, "pv-hang", "1"), pod("pod-hangs-here"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	err = m.SetUp(context.Background(), nil)
	if !IsUncertain(err) || !errors.Is(err, ErrTimeout) {
		t.Fatalf("NodePublishVolume may still be running in the driver: want an uncertain ErrTimeout, got %#v", err)
	}
}

func TestLogFuncReceivesKcsiRecords(t *testing.T) {
	var mu sync.Mutex
	var got []string
	if err := SetLogFunc(func(level LogLevel, target, message string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, message)
	}, LogInfo); err != nil {
		t.Fatal(err)
	}
	defer SetLogFunc(nil, LogWarn)
	h := newTestHost(t, Config{})
	_ = h.ValidatePlugin("logged.csi.kcsi.dev", "unix:///tmp/x.sock", []string{"1.0.0"})
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(strings.Join(got, "\n"), "logged.csi.kcsi.dev") {
		t.Fatalf("no record names the validated driver; got %q", got)
	}
}

func TestSlogFuncMapsLevels(t *testing.T) {
	var buf bytes.Buffer
	fn := SlogFunc(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	fn(LogWarn, "kcsi::registration", "hello")
	if s := buf.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, "target=kcsi::registration") {
		t.Fatalf("slog output %q", s)
	}
}

func TestVersionIsTheLinkedLibrarys(t *testing.T) {
	v := Version()
	out, err := exec.Command("pkg-config", "--modversion", "kcsi").Output()
	if err != nil {
		cannotRun(t, "pkg-config cannot tell the installed version: "+err.Error())
	}
	if want := strings.TrimSpace(string(out)); v != want {
		t.Fatalf("Version() = %q, the installed kcsi.pc says %q", v, want)
	}
}
