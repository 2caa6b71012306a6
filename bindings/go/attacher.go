package kcsi

/*
#include "shim.h"

static kcsi_result gk_attacher_new(kcsi_host *h, kcsi_attacher **out, gk_err *e) {
	GK_SHIM(kcsi_attacher_new(h, out, &err));
}
static kcsi_result gk_attacher_wait_for_attach(kcsi_attacher *a, const char *spec, int64_t timeout_ms, char **out, gk_err *e) {
	GK_SHIM(kcsi_attacher_wait_for_attach(a, spec, timeout_ms, out, &err));
}
static kcsi_result gk_attacher_device_mount_path(kcsi_attacher *a, const char *spec, char **out, gk_err *e) {
	GK_SHIM(kcsi_attacher_device_mount_path(a, spec, out, &err));
}
static kcsi_result gk_attacher_mount_device(kcsi_attacher *a, const char *spec, const char *path, const char *args, gk_err *e) {
	GK_SHIM(kcsi_attacher_mount_device(a, spec, path, args, &err));
}
static kcsi_result gk_attacher_unmount_device(kcsi_attacher *a, const char *path, gk_err *e) {
	GK_SHIM(kcsi_attacher_unmount_device(a, path, &err));
}
static kcsi_result gk_attacher_attach(kcsi_attacher *a, const char *spec, const char *node, int64_t timeout_ms, char **out, gk_err *e) {
	GK_SHIM(kcsi_attacher_attach(a, spec, node, timeout_ms, out, &err));
}
static kcsi_result gk_attacher_detach(kcsi_attacher *a, const char *volume, const char *node, int64_t timeout_ms, gk_err *e) {
	GK_SHIM(kcsi_attacher_detach(a, volume, node, timeout_ms, &err));
}
static kcsi_result gk_attacher_volumes_are_attached(kcsi_attacher *a, const char *specs, const char *node, char **out, gk_err *e) {
	GK_SHIM(kcsi_attacher_volumes_are_attached(a, specs, node, out, &err));
}
*/
import "C"

import (
	"context"
	"runtime"
)

// Attacher is the kubelet side of attaching and staging (WaitForAttach, MountDevice /
// NodeStageVolume, UnmountDevice / NodeUnstageVolume) and, on a controller host, the
// attach/detach controller's (Attach, Detach, VolumesAreAttached). Its methods are safe for
// concurrent use.
type Attacher struct {
	h       *handle[*C.kcsi_attacher]
	cleanup runtime.Cleanup
}

// DeviceMounterArgs are MountDevice's optional arguments (the kubelet's DeviceMounterArgs).
type DeviceMounterArgs struct {
	FSGroup      *int64 `json:"fsGroup,omitempty"`
	SELinuxLabel string `json:"seLinuxLabel,omitempty"`
}

// NewAttacher creates an attacher for h.
func (h *Host) NewAttacher() (*Attacher, error) {
	const op = "NewAttacher"
	var p *C.kcsi_attacher
	err := h.call(context.Background(), op, func(hp *C.kcsi_host) error {
		var e C.gk_err
		return check(op, C.gk_attacher_new(hp, &p, &e), &e)
	})
	if err != nil {
		return nil, err
	}
	a := &Attacher{}
	a.h, a.cleanup = track(a, "attacher", p, func(p *C.kcsi_attacher) { C.kcsi_attacher_free(p) })
	return a, nil
}

// Close frees the attacher; idempotent and safe while other calls are in flight.
func (a *Attacher) Close() { closeOwner(a, a.h, &a.cleanup) }

// WaitForAttach checks that the volume's VolumeAttachment is attached and returns its name
// as the device path. Not attached yet is transient. ctx's deadline is the call's timeout
// (none: the host's timeout).
func (a *Attacher) WaitForAttach(ctx context.Context, spec Spec) (string, error) {
	const op = "Attacher.WaitForAttach"
	ms, err := timeoutMS(ctx, op)
	if err != nil {
		return "", err
	}
	ar := newArgs(op)
	defer ar.done()
	cSpec := ar.json("spec", spec)
	if ar.err != nil {
		return "", ar.err
	}
	var path string
	err = callOn(ctx, a, a.h, op, func(p *C.kcsi_attacher) error {
		var out *C.char
		var e C.gk_err
		if err := check(op, C.gk_attacher_wait_for_attach(p, cSpec, ms, &out, &e), &e); err != nil {
			return err
		}
		path = takeString(out)
		return nil
	})
	return path, err
}

// DeviceMountPath is the global (staging) mount path of a PersistentVolume spec:
// <rootDir>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount.
func (a *Attacher) DeviceMountPath(spec Spec) (string, error) {
	const op = "Attacher.DeviceMountPath"
	ar := newArgs(op)
	defer ar.done()
	cSpec := ar.json("spec", spec)
	if ar.err != nil {
		return "", ar.err
	}
	var path string
	err := callOn(context.Background(), a, a.h, op, func(p *C.kcsi_attacher) error {
		var out *C.char
		var e C.gk_err
		if err := check(op, C.gk_attacher_device_mount_path(p, cSpec, &out, &e), &e); err != nil {
			return err
		}
		path = takeString(out)
		return nil
	})
	return path, err
}

// MountDevice stages the volume at deviceMountPath (NodeStageVolume when the driver has
// STAGE_UNSTAGE_VOLUME) and records vol_data.json beside it. args may be nil. ctx is checked
// before the call; the host's timeout bounds it.
func (a *Attacher) MountDevice(ctx context.Context, spec Spec, deviceMountPath string, args *DeviceMounterArgs) error {
	const op = "Attacher.MountDevice"
	ar := newArgs(op)
	defer ar.done()
	cSpec, cPath := ar.json("spec", spec), ar.str("deviceMountPath", deviceMountPath)
	var cArgs *C.char
	if args != nil {
		cArgs = ar.json("args", args)
	}
	if ar.err != nil {
		return ar.err
	}
	return callOn(ctx, a, a.h, op, func(p *C.kcsi_attacher) error {
		var e C.gk_err
		return check(op, C.gk_attacher_mount_device(p, cSpec, cPath, cArgs, &e), &e)
	})
}

// UnmountDevice unstages the volume staged at deviceMountPath and removes the global mount
// directory. ctx is checked before the call; the host's timeout bounds it.
func (a *Attacher) UnmountDevice(ctx context.Context, deviceMountPath string) error {
	const op = "Attacher.UnmountDevice"
	ar := newArgs(op)
	defer ar.done()
	cPath := ar.str("deviceMountPath", deviceMountPath)
	if ar.err != nil {
		return ar.err
	}
	return callOn(ctx, a, a.h, op, func(p *C.kcsi_attacher) error {
		var e C.gk_err
		return check(op, C.gk_attacher_unmount_device(p, cPath, &e), &e)
	})
}

// Attach creates the volume's VolumeAttachment for nodeName (controller hosts only) and waits
// until the external-attacher attached it (its name is returned) or recorded an attach error
// (final, its message). ctx's deadline is the wait's timeout (none: the host's timeout);
// reaching it is a transient ErrTimeout.
func (a *Attacher) Attach(ctx context.Context, spec Spec, nodeName string) (string, error) {
	const op = "Attacher.Attach"
	ms, err := timeoutMS(ctx, op)
	if err != nil {
		return "", err
	}
	ar := newArgs(op)
	defer ar.done()
	cSpec, cNode := ar.json("spec", spec), ar.str("nodeName", nodeName)
	if ar.err != nil {
		return "", ar.err
	}
	var id string
	err = callOn(ctx, a, a.h, op, func(p *C.kcsi_attacher) error {
		var out *C.char
		var e C.gk_err
		if err := check(op, C.gk_attacher_attach(p, cSpec, cNode, ms, &out, &e), &e); err != nil {
			return err
		}
		id = takeString(out)
		return nil
	})
	return id, err
}

// Detach deletes the VolumeAttachment of volumeName ("<driver>^<handle>", VolumeName's
// answer) on nodeName and waits until it is gone (controller hosts only). ctx's deadline is
// the wait's timeout (none: the host's timeout).
func (a *Attacher) Detach(ctx context.Context, volumeName, nodeName string) error {
	const op = "Attacher.Detach"
	ms, err := timeoutMS(ctx, op)
	if err != nil {
		return err
	}
	ar := newArgs(op)
	defer ar.done()
	cVolume, cNode := ar.str("volumeName", volumeName), ar.str("nodeName", nodeName)
	if ar.err != nil {
		return ar.err
	}
	return callOn(ctx, a, a.h, op, func(p *C.kcsi_attacher) error {
		var e C.gk_err
		return check(op, C.gk_attacher_detach(p, cVolume, cNode, ms, &e), &e)
	})
}

// VolumesAreAttached reports, per spec and in order, whether its VolumeAttachment on
// nodeName is attached, from the host's watch (controller hosts only). Volumes whose driver
// needs no attaching are attached.
func (a *Attacher) VolumesAreAttached(specs []Spec, nodeName string) ([]bool, error) {
	const op = "Attacher.VolumesAreAttached"
	ar := newArgs(op)
	defer ar.done()
	if specs == nil {
		specs = []Spec{}
	}
	cSpecs, cNode := ar.json("specs", specs), ar.str("nodeName", nodeName)
	if ar.err != nil {
		return nil, ar.err
	}
	var raw string
	err := callOn(context.Background(), a, a.h, op, func(p *C.kcsi_attacher) error {
		var out *C.char
		var e C.gk_err
		if err := check(op, C.gk_attacher_volumes_are_attached(p, cSpecs, cNode, &out, &e), &e); err != nil {
			return err
		}
		raw = takeString(out)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var attached []bool
	if err := decode(op, raw, &attached); err != nil {
		return nil, err
	}
	return attached, nil
}
