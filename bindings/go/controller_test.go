package kcsi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// offlineController is a controller host on a kubeconfig whose server these tests never
// reach: the calls below fail before any request.
func offlineController(t *testing.T) *Host {
	t.Helper()
	kubeconfig := filepath.Join(shortTempDir(t, "kcsigo-ctl"), "kubeconfig")
	text := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	if err := os.WriteFile(kubeconfig, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := NewHost(Config{Role: "controller", Kubeconfig: kubeconfig})
	if err != nil {
		t.Fatalf("NewHost(controller): %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

func TestControllerHostNeedsAKubeconfigAndNoNode(t *testing.T) {
	if _, err := NewHost(Config{Role: "controller"}); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "kubeconfig") {
		t.Fatalf("controller without kubeconfig: %v", err)
	}
	h := offlineController(t)
	st, err := h.Status()
	if err != nil || st.Role != "controller" || st.CSINodeInitialized {
		t.Fatalf("status %+v, %v", st, err)
	}
}

func TestControllerHostRefusesNodeCallsNamingThem(t *testing.T) {
	h := offlineController(t)
	a, err := h.NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_, err = a.WaitForAttach(context.Background(), pvSpec("d.example.com", "pv-1", "vol-1"))
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "kcsi_attacher_wait_for_attach") {
		t.Fatalf("WaitForAttach on a controller host: %v", err)
	}
	err = h.RegisterPlugin(context.Background(), "d.example.com", "/tmp/none.sock", []string{"1.0.0"})
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "kcsi_register_plugin") {
		t.Fatalf("RegisterPlugin on a controller host: %v", err)
	}
}

func TestAttachOnANodeHostIsNotSupportedAsUpstream(t *testing.T) {
	h := newTestHost(t, Config{})
	a, err := h.NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_, err = a.Attach(context.Background(), pvSpec("d.example.com", "pv-1", "vol-1"), "node-1")
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "attaching volumes from the kubelet is not supported") {
		t.Fatalf("Attach on a node host: %v", err)
	}
	err = a.Detach(context.Background(), "d.example.com^vol-1", "node-1")
	if !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Detach on a node host: %v", err)
	}
}

func TestControllerCallsNameTheirBadInput(t *testing.T) {
	h := offlineController(t)
	a, err := h.NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	_, attachNoNode := a.Attach(ctx, pvSpec("d", "pv-1", "h"), "")
	_, attachInline := a.Attach(ctx, Spec{Volume: []byte(`{"name":"v","csi":{"driver":"d"}}`)}, "n")
	_, areNoNode := a.VolumesAreAttached([]Spec{pvSpec("d", "pv-1", "h")}, "")
	for _, c := range []struct {
		named string
		err   error
	}{
		{"node_name", attachNoNode},
		{"CSIPersistentVolumeSource", attachInline},
		{"volume_name", a.Detach(ctx, "no-caret", "n")},
		{"node_name", a.Detach(ctx, "d^h", "")},
		{"node_name", areNoNode},
	} {
		if !errors.Is(c.err, ErrInvalidArgument) || !strings.Contains(c.err.Error(), c.named) {
			t.Errorf("want an invalid argument naming %s, got %v", c.named, c.err)
		}
	}
	got, err := a.VolumesAreAttached(nil, "n")
	if err != nil || len(got) != 0 {
		t.Fatalf("no specs: %v, %v", got, err)
	}
}
