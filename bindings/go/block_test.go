package kcsi

import (
	"context"
	"encoding/json"
	"errors"
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
	d := startMockDriver(t, "block.csi.kcsi.dev", "--disable-attach")
	h := newTestHost(t, Config{CSIDrivers: []any{noAttachCSIDriver(d.Name)}})
	ctx := context.Background()
	registerDriver(t, h, d, "")
	m, err := h.NewBlockMapper(blockSpec(d.Name, "pv-b", "3"), pod("pod-b"))
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

	spec, err := h.ConstructBlockVolumeSpec("pod-b", "pv-b", paths.GlobalMapPath)
	if err != nil {
		t.Fatal(err)
	}
	pv, _ := spec.PersistentVolume.(json.RawMessage)
	if !strings.Contains(string(pv), `"volumeMode":"Block"`) {
		t.Fatalf("reconstructed block spec %s", pv)
	}
	if name, err := h.VolumeName(spec); err != nil || name != d.Name+"^3" {
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
	d := startMockDriver(t, "expand.csi.kcsi.dev", "--disable-attach", "--node-expand-required")
	h := newTestHost(t, Config{CSIDrivers: []any{noAttachCSIDriver(d.Name)}})
	ctx := context.Background()
	registerDriver(t, h, d, "")
	spec := pvSpec(d.Name, "pv-e", "2")
	a, staging := mountDevice(t, h, spec, &DeviceMounterArgs{})
	resized, err := h.NodeExpand(ctx, NodeExpandOptions{Spec: spec, DeviceMountPath: staging, DeviceStagePath: staging, NewSize: "2Gi", OldSize: "1Gi"})
	if err != nil || !resized {
		t.Fatalf("NodeExpand = %v, %v", resized, err)
	}
	if err := a.UnmountDevice(ctx, staging); err != nil {
		t.Fatal(err)
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
