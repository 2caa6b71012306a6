package kcsi

import (
	"errors"
	"strings"
	"testing"
)

func TestQueriesOnSpecJSONAnswerLikeTheFullSpec(t *testing.T) {
	h := newTestHost(t, Config{NodeName: "node-1", RootDir: shortTempDir(t, "kcsi-raw.")})
	head := func(handle string) Spec {
		return Spec{JSON: []byte(`{"persistentVolume":{"spec":{"csi":{"driver":"d.example.com","volumeHandle":"` + handle + `"}}}}`)}
	}
	if name, err := h.VolumeName(head("h1")); err != nil || name != "d.example.com^h1" {
		t.Errorf("VolumeName = %q, %v", name, err)
	}
	long := strings.Repeat("x", 2*volumeNameCap) // the answer does not fit the inline buffer
	if name, err := h.VolumeName(head(long)); err != nil || name != "d.example.com^"+long {
		t.Errorf("VolumeName of a long handle = %d bytes, %v", len(name), err)
	}
	huge := strings.Repeat("y", 2*rawSpecCap) // the spec takes the general path
	if name, err := h.VolumeName(head(huge)); err != nil || name != "d.example.com^"+huge {
		t.Errorf("VolumeName of a huge spec = %d bytes, %v", len(name), err)
	}
	if ok, err := h.CanSupport(head("h1")); err != nil || !ok {
		t.Errorf("CanSupport = %v, %v", ok, err)
	}
	if ok, err := h.CanSupport(Spec{JSON: []byte(`{"volume":{}}`)}); err != nil || ok {
		t.Errorf("CanSupport of a non-CSI volume = %v, %v", ok, err)
	}
	if _, err := h.VolumeName(Spec{JSON: []byte("{\x00}")}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a NUL byte: %v", err)
	}
	if _, err := h.VolumeName(Spec{JSON: []byte("{not json")}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bad JSON: %v", err)
	}
	h.Close()
	if _, err := h.CanSupport(head("h1")); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

func TestDriverAttachRequiredAnswersAsCanAttachOfItsPersistentVolumes(t *testing.T) {
	h := newTestHost(t, Config{NodeName: "node-1", RootDir: shortTempDir(t, "kcsi-raw."),
		CSIDrivers: []any{noAttachCSIDriver("noattach.example.com")}})
	pv := func(driver string) Spec {
		return Spec{JSON: []byte(`{"persistentVolume":{"spec":{"csi":{"driver":"` + driver + `","volumeHandle":"h"}}}}`)}
	}
	for _, driver := range []string{"noattach.example.com", "no-csidriver.example.com"} {
		want, err := h.CanAttach(pv(driver))
		if err != nil {
			t.Fatalf("CanAttach(%s): %v", driver, err)
		}
		if got, err := h.DriverAttachRequired(driver); err != nil || got != want {
			t.Errorf("DriverAttachRequired(%s) = %v, %v; CanAttach says %v", driver, got, err, want)
		}
	}
	for _, bad := range []string{"", "a\x00b", strings.Repeat("d", rawSpecCap)} {
		if _, err := h.DriverAttachRequired(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("DriverAttachRequired(%q...): %v, want an invalid argument", bad[:min(len(bad), 8)], err)
		}
	}
}
