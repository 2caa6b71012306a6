package kcsi

/*
#include "shim.h"

static kcsi_result gk_list_device_mounts(kcsi_host *h, char **out, gk_err *e) {
	GK_SHIM(kcsi_list_device_mounts(h, out, &err));
}
static kcsi_result gk_unmount_device_by_handle(kcsi_host *h, const char *driver, const char *handle, gk_err *e) {
	GK_SHIM(kcsi_unmount_device_by_handle(h, driver, handle, &err));
}
*/
import "C"

import "context"

// DeviceMount is one staged volume kcsi found on disk (kcsi_list_device_mounts): a global
// mount dir (Kind "filesystem") or a block staging path (Kind "block"). VolumeData is nil,
// with VolumeDataError saying why, when its vol_data.json is missing or unreadable.
type DeviceMount struct {
	Kind            string            `json:"kind"`
	Driver          string            `json:"driver"`
	VolumeHandle    string            `json:"volumeHandle"`
	SpecName        string            `json:"specName"`
	DeviceMountPath string            `json:"deviceMountPath"`
	Mounted         bool              `json:"mounted"`
	VolumeDataFile  string            `json:"volumeDataFile"`
	VolumeData      map[string]string `json:"volumeData"`
	VolumeDataError string            `json:"volumeDataError"`
}

// DeviceMounts lists the staged volumes below the plugin dir, so a restarted host can unstage
// those no pod uses (kubernetes/kubernetes#85476). It does not block on any driver.
func (h *Host) DeviceMounts() ([]DeviceMount, error) {
	const op = "DeviceMounts"
	var raw string
	err := h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var out *C.char
		var e C.gk_err
		if err := check(op, C.gk_list_device_mounts(p, &out, &e), &e); err != nil {
			return err
		}
		raw = takeString(out)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var ms []DeviceMount
	if err := decode(op, raw, &ms); err != nil {
		return nil, err
	}
	return ms, nil
}

// UnmountDeviceByHandle unstages the filesystem volume volumeHandle of driver at its global
// mount path, also when its vol_data.json is gone (kcsi_unmount_device_by_handle).
func (h *Host) UnmountDeviceByHandle(ctx context.Context, driver, volumeHandle string) error {
	const op = "UnmountDeviceByHandle"
	a := newArgs(op)
	defer a.done()
	cDriver, cHandle := a.str("driver", driver), a.str("volumeHandle", volumeHandle)
	if a.err != nil {
		return a.err
	}
	return h.call(ctx, op, func(p *C.kcsi_host) error {
		var e C.gk_err
		return check(op, C.gk_unmount_device_by_handle(p, cDriver, cHandle, &e), &e)
	})
}
