package kcsi

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestDeviceMountsListsAGlobalMountWithoutVolumeData(t *testing.T) {
	root := shortTempDir(t, "kcsigo-root")
	h := newTestHost(t, Config{RootDir: root})
	ms, err := h.DeviceMounts()
	if err != nil || len(ms) != 0 {
		t.Fatalf("DeviceMounts on an empty root = %v, %v", ms, err)
	}
	// What a MountDevice whose vol_data.json was lost leaves.
	sha := fmt.Sprintf("%x", sha256.Sum256([]byte("vol-1")))
	gm := filepath.Join(root, "plugins/kubernetes.io/csi/example.com/drv", sha, "globalmount")
	if err := os.MkdirAll(gm, 0o750); err != nil {
		t.Fatal(err)
	}
	ms, err = h.DeviceMounts()
	if err != nil || len(ms) != 1 {
		t.Fatalf("DeviceMounts = %v, %v", ms, err)
	}
	m := ms[0]
	if m.Kind != "filesystem" || m.Driver != "example.com/drv" || m.DeviceMountPath != gm ||
		m.VolumeData != nil || m.VolumeDataError == "" || m.Mounted {
		t.Fatalf("DeviceMounts()[0] = %+v", m)
	}
}

func TestUnmountDeviceByHandleNeedsARegisteredDriver(t *testing.T) {
	h := newTestHost(t, Config{})
	err := h.UnmountDeviceByHandle(context.Background(), "not.registered", "vol-1")
	if !errors.Is(err, ErrNotFound) || !IsTransient(err) {
		t.Fatalf("UnmountDeviceByHandle = %v", err)
	}
	err = h.UnmountDeviceByHandle(context.Background(), "../escape", "vol-1")
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("UnmountDeviceByHandle with a bad driver name = %v", err)
	}
}
