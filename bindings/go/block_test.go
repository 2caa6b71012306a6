package kcsi

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func blockSpec(driver, pvName, handle string) Spec {
	pv, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"name": pvName},
		"spec": map[string]any{
			"accessModes": []string{"ReadWriteOnce"},
			"volumeMode":  "Block",
			"csi":         map[string]any{"driver": driver, "volumeHandle": handle},
		},
	})
	return Spec{PersistentVolume: json.RawMessage(pv)}
}

func TestBlockVolumeIsStagedMappedReconstructedAndTornDown(t *testing.T) {
	needsRoot(t)
	d := startHostpathDriver(t, "block.csi.kcsi.dev")
	h := newTestHost(t, Config{CSIDrivers: []any{noAttachCSIDriver(d.Name)}})
	ctx := context.Background()
	registerDriver(t, h, d, "")
	// hostpathplugin backs a block volume with a file on a loop device (attached at
	// CreateVolume, detached at DeleteVolume, when the test ends).
	handle := createVolume(t, d, "pv-b", "8Mi", true)
	m, err := h.NewBlockMapper(blockSpec(d.Name, "pv-b", handle), pod("pod-b"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	paths, err := m.Paths()
	if err != nil {
		t.Fatal(err)
	}
	staging, err := m.SetUpDevice(ctx)
	if err != nil || staging != paths.StagingPath {
		t.Fatalf("SetUpDevice = %q, %v; want the staging path %q", staging, err, paths.StagingPath)
	}
	publish, err := m.MapPodDevice(ctx)
	if err != nil || publish != paths.PublishPath {
		t.Fatalf("MapPodDevice = %q, %v; want the publish path %q", publish, err, paths.PublishPath)
	}
	// Really mapped: the driver bind-mounted its loop device onto the publish file, so what is
	// written there is read back from the device.
	if !isMountPoint(t, publish) {
		t.Fatalf("after MapPodDevice the mount table has no mount at %s", publish)
	}
	wantBlockDevice(t, publish)

	spec, err := h.ConstructBlockVolumeSpec("pod-b", "pv-b", paths.GlobalMapPath)
	if err != nil {
		t.Fatal(err)
	}
	pv, _ := spec.PersistentVolume.(json.RawMessage)
	if !strings.Contains(string(pv), `"volumeMode":"Block"`) {
		t.Fatalf("reconstructed block spec %s", pv)
	}
	if name, err := h.VolumeName(spec); err != nil || name != d.Name+"^"+handle {
		t.Fatalf("the reconstructed spec names %q, %v", name, err)
	}

	u, err := h.NewBlockUnmapper("pv-b", "pod-b")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if err := u.UnmapPodDevice(ctx); err != nil {
		t.Fatalf("UnmapPodDevice: %v", err)
	}
	if err := u.TearDownDevice(ctx, paths.GlobalMapPath, ""); err != nil {
		t.Fatalf("TearDownDevice: %v", err)
	}
	if _, err := h.NewBlockUnmapper("pv-b", "pod-b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an unmapper after teardown: want ErrNotFound, got %v", err)
	}
}

func TestNodeExpandResizesAStagedVolume(t *testing.T) {
	needsRoot(t)
	d := startHostpathDriver(t, "expand.csi.kcsi.dev")
	h := newTestHost(t, Config{CSIDrivers: []any{noAttachCSIDriver(d.Name)}})
	ctx := context.Background()
	registerDriver(t, h, d, "")
	handle := createVolume(t, d, "pv-e", "16Mi", false)
	spec := pvSpec(d.Name, "pv-e", handle)
	a, staging := mountDevice(t, h, spec, &DeviceMounterArgs{})
	resized, err := h.NodeExpand(ctx, NodeExpandOptions{Spec: spec, DeviceMountPath: staging, DeviceStagePath: staging, NewSize: "32Mi", OldSize: "16Mi"})
	if err != nil || !resized {
		t.Fatalf("NodeExpand = %v, %v", resized, err)
	}
	// What the driver was asked for: this volume, at its staging path, to 32Mi.
	calls := d.calls(t, "NodeExpandVolume")
	if len(calls) != 1 {
		t.Fatalf("the driver got %d NodeExpandVolume calls, want 1", len(calls))
	}
	var req struct {
		VolumeID      string `json:"volume_id"`
		VolumePath    string `json:"volume_path"`
		CapacityRange struct {
			RequiredBytes int64 `json:"required_bytes"`
		} `json:"capacity_range"`
	}
	if err := json.Unmarshal(calls[0].Request, &req); err != nil || req.VolumeID != handle || req.VolumePath != staging || req.CapacityRange.RequiredBytes != 32<<20 {
		t.Fatalf("NodeExpandVolume request %s (%v): want volume %s at %s to %d bytes", calls[0].Request, err, handle, staging, 32<<20)
	}
	if err := a.UnmountDevice(ctx, staging); err != nil {
		t.Fatal(err)
	}
}

// wantBlockDevice checks that path is a block device (or a bind mount of one) that takes a
// write and reads it back.
func wantBlockDevice(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeDevice == 0 {
		t.Fatalf("%s is no block device: %v, %v", path, fi, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := []byte("kcsi block write")
	if _, err := f.WriteAt(want, 4096); err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, 4096); err != nil || string(got) != string(want) {
		t.Fatalf("read back %q, %v from %s", got, err, path)
	}
}

func TestWaitForAttachOnAStandaloneHostIsTransient(t *testing.T) {
	h := newTestHost(t, Config{})
	a, err := h.NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// Without an API server there is no VolumeAttachment to read: retrying may succeed once
	// the host is configured, nothing was changed.
	_, err = a.WaitForAttach(ctx, pvSpec("attach.csi.kcsi.dev", "pv-a", "1"))
	if !IsTransient(err) || !strings.Contains(err.Error(), "standalone") {
		t.Fatalf("want a transient error naming standalone mode, got %#v", err)
	}
}
