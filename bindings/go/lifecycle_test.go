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
	needsRoot(t)
	d := startHostpathDriver(t, "fs.csi.kcsi.dev")
	h := newTestHost(t, Config{CSIDrivers: []any{noAttachCSIDriver(d.Name)}})
	ctx := context.Background()
	registerDriver(t, h, d, "")
	handle := createVolume(t, d, "pv-fs", "16Mi", false)
	spec := pvSpec(d.Name, "pv-fs", handle)

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
	if name, err := h.VolumeName(spec); err != nil || name != d.Name+"^"+handle {
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
	if !isMountPoint(t, path) {
		t.Fatalf("after SetUp the mount table has no mount at %s", path)
	}
	// Really mounted: a file written through the pod's path lands in the driver's volume.
	if err := os.WriteFile(filepath.Join(path, "hello"), []byte("through the bind mount"), 0o644); err != nil {
		t.Fatalf("writing through the pod's path: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(d.StateDir, handle, "hello")); err != nil || string(b) != "through the bind mount" {
		t.Fatalf("the driver's volume holds %q, %v: the pod's path is not its bind mount", b, err)
	}
	mt, err := m.Metrics(ctx)
	if err != nil {
		t.Fatalf("Metrics: %v", err)
	}
	if mt.CapacityBytes == nil || *mt.CapacityBytes <= 0 || mt.UsedBytes == nil || mt.AvailableBytes == nil {
		t.Fatalf("Metrics = %+v (raw %s): want the volume filesystem's capacity, used and available bytes", mt, mt.Raw)
	}

	rv, err := h.ConstructVolumeSpec("pv-fs", filepath.Dir(path))
	if err != nil {
		t.Fatalf("ConstructVolumeSpec: %v", err)
	}
	if name, err := h.VolumeName(rv.Spec); err != nil || name != d.Name+"^"+handle {
		t.Fatalf("the reconstructed spec names volume %q (%v); spec %+v", name, err, rv.Spec)
	}

	tearDown(t, h, "pv-fs", "pod-fs", path)
	if _, err := h.NewUnmounter("pv-fs", "pod-fs"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unmounter after teardown: want ErrNotFound, got %v", err)
	}
	if err := a.UnmountDevice(ctx, staging); err != nil {
		t.Fatalf("UnmountDevice: %v", err)
	}
}

func TestInlineVolumeIsPublishedWrittenAndTornDownThroughTheHostpathDriver(t *testing.T) {
	needsRoot(t)
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
	if !isMountPoint(t, path) {
		t.Fatalf("after SetUp the mount table has no mount at %s", path)
	}
	if err := os.WriteFile(filepath.Join(path, "hello"), []byte("through the bind mount"), 0o644); err != nil {
		t.Fatalf("writing through the pod's path: %v", err)
	}
	mt, err := m.Metrics(ctx)
	if err != nil || mt.CapacityBytes == nil || *mt.CapacityBytes <= 0 {
		t.Fatalf("Metrics = %+v, %v", mt, err)
	}
	tearDown(t, h, "scratch", "pod-inline", path)
}

// tearDown unmounts volume specName of pod podUID with an unmounter made from disk alone and
// checks that its mount dir (the parent of path) is gone.
func tearDown(t *testing.T, h *Host, specName, podUID, path string) {
	t.Helper()
	u, err := h.NewUnmounter(specName, podUID)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if err := u.TearDown(context.Background()); err != nil {
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
