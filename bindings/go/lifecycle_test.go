package kcsi

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// noAttachCSIDriver is a CSIDriver stand-in: standalone hosts have no VolumeAttachments, so
// PersistentVolume tests use drivers that need no attach.
func noAttachCSIDriver(name string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"attachRequired": false},
	})
	return b
}

func pvSpec(driver, pvName, handle string) Spec {
	pv, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"name": pvName},
		"spec": map[string]any{
			"accessModes": []string{"ReadWriteOnce"},
			"csi":         map[string]any{"driver": driver, "volumeHandle": handle, "fsType": "ext4"},
		},
	})
	return Spec{PersistentVolume: pv} // []byte: taken as JSON text, not base64
}

func pod(uid string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"name": "pod-" + uid, "namespace": "default", "uid": uid},
		"spec":     map[string]any{"containers": []any{}},
	})
	return b
}

func TestFilesystemVolumeIsStagedPublishedMeasuredReconstructedAndTornDown(t *testing.T) {
	d := startMockDriver(t, "fs.csi.kcsi.dev", "--disable-attach")
	h := newTestHost(t, Config{CSIDrivers: []any{noAttachCSIDriver(d.Name)}})
	ctx := context.Background()
	registerDriver(t, h, d, "")
	spec := pvSpec(d.Name, "pv-fs", "1") // the mock driver's volume "1"

	if ok, err := h.CanSupport(spec); err != nil || !ok {
		t.Fatalf("CanSupport = %v, %v", ok, err)
	}
	if ok, err := h.CanAttach(spec); err != nil || ok {
		t.Fatalf("CanAttach with attachRequired: false = %v, %v", ok, err)
	}
	if ok, err := h.CanDeviceMount(spec); err != nil || !ok {
		t.Fatalf("CanDeviceMount = %v, %v", ok, err)
	}
	if ok, err := h.RequiresRemount(spec); err != nil || ok {
		t.Fatalf("RequiresRemount = %v, %v", ok, err)
	}
	if name, err := h.VolumeName(spec); err != nil || name != d.Name+"^1" {
		t.Fatalf("VolumeName = %q, %v", name, err)
	}

	a, staging := mountDevice(t, h, spec, nil)

	m, err := h.NewMounter(spec, pod("pod-fs"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	path, err := m.Path()
	if err != nil {
		t.Fatal(err)
	}
	if want := "/pods/pod-fs/volumes/kubernetes.io~csi/pv-fs/mount"; !strings.HasSuffix(path, want) {
		t.Fatalf("Path() = %q, want …/%s", path, want)
	}
	fsGroup := int64(2000)
	if err := m.SetUp(ctx, &MounterArgs{FSGroup: &fsGroup}); err != nil {
		t.Fatalf("SetUp: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(path), "vol_data.json")); err != nil {
		t.Fatalf("SetUp wrote no vol_data.json: %v", err)
	}
	mt, err := m.Metrics(ctx)
	if err != nil {
		t.Fatalf("Metrics: %v", err)
	}
	if mt.CapacityBytes == nil || *mt.CapacityBytes != 100<<30 {
		t.Fatalf("Metrics capacity = %v (raw %s), want the mock's 100Gi", mt.CapacityBytes, mt.Raw)
	}

	rv, err := h.ConstructVolumeSpec("pv-fs", filepath.Dir(path))
	if err != nil {
		t.Fatalf("ConstructVolumeSpec: %v", err)
	}
	if name, err := h.VolumeName(rv.Spec); err != nil || name != d.Name+"^1" {
		t.Fatalf("the reconstructed spec names volume %q (%v); spec %+v", name, err, rv.Spec)
	}

	u, err := h.NewUnmounter("pv-fs", "pod-fs")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if err := u.TearDown(ctx); err != nil {
		t.Fatalf("TearDown: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Fatalf("TearDown left %s: %v", filepath.Dir(path), err)
	}
	if _, err := h.NewUnmounter("pv-fs", "pod-fs"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unmounter after teardown: want ErrNotFound, got %v", err)
	}
	if err := a.UnmountDevice(ctx, staging); err != nil {
		t.Fatalf("UnmountDevice: %v", err)
	}
}

func TestInlineVolumeIsPublishedWrittenAndTornDownThroughTheHostpathDriver(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("publishing a volume mounts: needs root")
	}
	d := startHostpathDriver(t, "inline.csi.kcsi.dev")
	csiDriver, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"name": d.Name},
		"spec":     map[string]any{"attachRequired": false, "podInfoOnMount": true, "volumeLifecycleModes": []string{"Ephemeral"}},
	})
	h := newTestHost(t, Config{CSIDrivers: []any{json.RawMessage(csiDriver)}})
	registerDriver(t, h, d, "")
	// hostpathplugin creates an ephemeral volume at NodePublish (csi.storage.k8s.io/ephemeral,
	// sent with podInfoOnMount) and deletes it at NodeUnpublish: no CreateVolume needed.
	spec := Spec{Volume: map[string]any{"name": "scratch", "csi": map[string]any{"driver": d.Name}}}
	ctx := context.Background()
	m, err := h.NewMounter(spec, pod("pod-inline"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.SetUp(ctx, nil); err != nil {
		t.Fatalf("SetUp: %v", err)
	}
	path, err := m.Path()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "hello"), []byte("through the bind mount"), 0o644); err != nil {
		t.Fatalf("writing through the pod's path: %v", err)
	}
	mt, err := m.Metrics(ctx)
	if err != nil || mt.CapacityBytes == nil || *mt.CapacityBytes <= 0 {
		t.Fatalf("Metrics = %+v, %v", mt, err)
	}
	u, err := h.NewUnmounter("scratch", "pod-inline")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if err := u.TearDown(ctx); err != nil {
		t.Fatalf("TearDown: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Fatalf("TearDown left %s: %v", filepath.Dir(path), err)
	}
}

func TestCloseIsIdempotentAndConcurrent(t *testing.T) {
	h := newTestHost(t, Config{})
	m, err := h.NewMounter(pvSpec("x.csi", "pv", "1"), pod("pod-close"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(2)
		go func() { defer wg.Done(); m.Close() }()
		go func() { defer wg.Done(); h.Close() }()
	}
	wg.Wait()
	if _, err := m.Path(); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrFailedPrecondition) {
		t.Fatalf("a closed mounter: want ErrClosed, got %v", err)
	}
	if err := h.ValidatePlugin("x.csi", "unix:///tmp/x.sock", []string{"1.0.0"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("a closed host: want ErrClosed, got %v", err)
	}
}

func TestChildrenOfAClosedHostFailWithFailedPrecondition(t *testing.T) {
	h := newTestHost(t, Config{})
	m, err := h.NewMounter(pvSpec("x.csi", "pv", "1"), pod("pod-orphan"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h.Close()
	err = m.SetUp(context.Background(), nil)
	if !errors.Is(err, ErrFailedPrecondition) || errors.Is(err, ErrClosed) {
		t.Fatalf("a mounter of a closed host: want kcsi's ErrFailedPrecondition, got %v", err)
	}
}
