package kcsi

/*
#include "shim.h"

static kcsi_result gk_construct_volume_spec(kcsi_host *h, const char *volume_name, const char *mount_path, char **out, gk_err *e) {
	GK_SHIM(kcsi_construct_volume_spec(h, volume_name, mount_path, out, &err));
}
*/
import "C"

import (
	"context"
	"encoding/json"
)

// ReconstructedVolume is what ConstructVolumeSpec rebuilds after a restart.
type ReconstructedVolume struct {
	Spec                Spec
	SELinuxMountContext string
}

// ConstructVolumeSpec rebuilds the spec of a mounted volume from <mountPath>/vol_data.json,
// mountPath being the per-volume dir <rootDir>/pods/<uid>/volumes/kubernetes.io~csi/<spec>.
// ErrNotFound when the file is missing.
func (h *Host) ConstructVolumeSpec(volumeName, mountPath string) (*ReconstructedVolume, error) {
	const op = "ConstructVolumeSpec"
	a := newArgs(op)
	defer a.done()
	cName, cPath := a.str("volumeName", volumeName), a.str("mountPath", mountPath)
	if a.err != nil {
		return nil, a.err
	}
	var raw string
	err := h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var out *C.char
		var e C.gk_err
		if err := check(op, C.gk_construct_volume_spec(p, cName, cPath, &out, &e), &e); err != nil {
			return err
		}
		raw = takeString(out)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var wire struct {
		Spec                json.RawMessage `json:"spec"`
		SELinuxMountContext string          `json:"seLinuxMountContext"`
	}
	if err := decode(op, raw, &wire); err != nil {
		return nil, err
	}
	spec, err := specFromJSON(op, wire.Spec)
	if err != nil {
		return nil, err
	}
	return &ReconstructedVolume{Spec: spec, SELinuxMountContext: wire.SELinuxMountContext}, nil
}
