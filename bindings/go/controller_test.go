package kcsi

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// volumeAttachment is the part of a VolumeAttachment the attach test reads.
type volumeAttachment struct {
	Spec struct {
		Attacher string `json:"attacher"`
		NodeName string `json:"nodeName"`
		Source   struct {
			PersistentVolumeName *string         `json:"persistentVolumeName"`
			InlineVolumeSpec     json.RawMessage `json:"inlineVolumeSpec"`
		} `json:"source"`
	} `json:"spec"`
	Status struct {
		Attached bool `json:"attached"`
	} `json:"status"`
}

// controllerCall is the request of a ControllerPublishVolume or ControllerUnpublishVolume.
type controllerCall struct {
	VolumeID string `json:"volume_id"`
	NodeID   string `json:"node_id"`
}

// wantControllerCalls checks that the driver's log has method calls, all for volume on
// nodeID, the last of them answered without error.
func wantControllerCalls(t *testing.T, d *driverProcess, method, volume, nodeID string) {
	t.Helper()
	calls := d.calls(t, method)
	if len(calls) == 0 {
		t.Fatalf("the driver's log has no %s", method)
	}
	for _, c := range calls {
		var req controllerCall
		if err := json.Unmarshal(c.Request, &req); err != nil || req.VolumeID != volume || req.NodeID != nodeID {
			t.Fatalf("%s request %s (%v): want volume %s on node %s", method, c.Request, err, volume, nodeID)
		}
	}
	if last := calls[len(calls)-1]; last.Error != "" {
		t.Fatalf("the driver's last %s failed: %s", method, last.Error)
	}
}

func TestControllerAttachesAndDetachesThroughTheRealExternalAttacher(t *testing.T) {
	api := startAPIServer(t)
	// hostpathplugin publishes only to its own node id, the driver's name here; the Node's
	// CSINode maps the Kubernetes node to it, as the node's kubelet would have recorded.
	d := startHostpathDriver(t, "attach.csi.kcsi.dev", "-enable-attach")
	const node, pvName = "node-attach", "pv-attach"
	var created struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	api.create(t, "/api/v1/nodes", map[string]any{"metadata": map[string]any{"name": node}}, &created)
	api.create(t, "/apis/storage.k8s.io/v1/csinodes", map[string]any{
		"metadata": map[string]any{"name": node, "ownerReferences": []any{map[string]any{
			"apiVersion": "v1", "kind": "Node", "name": node, "uid": created.Metadata.UID}}},
		"spec": map[string]any{"drivers": []any{map[string]any{"name": d.Name, "nodeID": d.Name}}},
	}, nil)
	handle := createVolume(t, d, pvName, "16Mi", false)
	spec := pvSpec(d.Name, pvName, handle)
	api.create(t, "/api/v1/persistentvolumes", map[string]any{
		"metadata": map[string]any{"name": pvName},
		"spec": map[string]any{"capacity": map[string]any{"storage": "16Mi"}, "accessModes": []string{"ReadWriteOnce"},
			"csi": map[string]any{"driver": d.Name, "volumeHandle": handle, "fsType": "ext4"}},
	}, nil)
	startProcess(t, "external-attacher", peerBinary(t, "attacher", "KCSI_ATTACHER"), []string{
		"--csi-address=" + d.Socket, "--kubeconfig=" + api.Kubeconfig, "--timeout=30s", "--v=5"})

	h, err := NewHost(Config{Role: "controller", Kubeconfig: api.Kubeconfig})
	if err != nil {
		t.Fatalf("NewHost(controller): %v", err)
	}
	t.Cleanup(h.Close)
	a, err := h.NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	name, err := a.Attach(ctx, spec, node)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	// Upstream's attachment name: csi-<sha256(volume handle + driver + node)>.
	if want := fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+d.Name+node))); name != want {
		t.Fatalf("Attach returned %q, want the attachment name %q", name, want)
	}
	vaPath := "/apis/storage.k8s.io/v1/volumeattachments/" + name
	var va volumeAttachment
	if !api.get(t, vaPath, &va) {
		t.Fatalf("Attach returned %s but the API server has no such VolumeAttachment", name)
	}
	if va.Spec.Attacher != d.Name || va.Spec.NodeName != node || va.Spec.Source.PersistentVolumeName == nil ||
		*va.Spec.Source.PersistentVolumeName != pvName || va.Spec.Source.InlineVolumeSpec != nil || !va.Status.Attached {
		t.Fatalf("VolumeAttachment %s = %+v: want attacher %s, node %s, PersistentVolume %s, attached", name, va, d.Name, node, pvName)
	}
	wantControllerCalls(t, d, "ControllerPublishVolume", handle, d.Name)
	if got, err := a.VolumesAreAttached([]Spec{spec}, node); err != nil || len(got) != 1 || !got[0] {
		t.Fatalf("VolumesAreAttached after Attach = %v, %v; want [true]", got, err)
	}

	if err := a.Detach(ctx, d.Name+"^"+handle, node); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if api.get(t, vaPath, &va) {
		t.Fatalf("after Detach the API server still has VolumeAttachment %s: %+v", name, va)
	}
	wantControllerCalls(t, d, "ControllerUnpublishVolume", handle, d.Name)
}
