package kcsi

/*
#include "shim.h"

static kcsi_result gk_mounter_new(kcsi_host *h, const char *spec, const char *pod, kcsi_mounter **out, gk_err *e) {
	GK_SHIM(kcsi_mounter_new(h, spec, pod, out, &err));
}
static kcsi_result gk_mounter_path(kcsi_mounter *m, char **out, gk_err *e) {
	GK_SHIM(kcsi_mounter_path(m, out, &err));
}
static kcsi_result gk_mounter_set_up(kcsi_mounter *m, const char *args, gk_err *e) {
	GK_SHIM(kcsi_mounter_set_up(m, args, &err));
}
static kcsi_result gk_mounter_metrics(kcsi_mounter *m, char **out, gk_err *e) {
	GK_SHIM(kcsi_mounter_metrics(m, out, &err));
}
static kcsi_result gk_unmounter_new(kcsi_host *h, const char *spec_name, const char *pod_uid, kcsi_unmounter **out, gk_err *e) {
	GK_SHIM(kcsi_unmounter_new(h, spec_name, pod_uid, out, &err));
}
static kcsi_result gk_unmounter_tear_down(kcsi_unmounter *u, gk_err *e) {
	GK_SHIM(kcsi_unmounter_tear_down(u, &err));
}
*/
import "C"

import (
	"context"
	"encoding/json"
	"runtime"
)

// Mounter publishes one volume of one pod (the kubelet's Mounter: NodePublishVolume).
// Its methods are safe for concurrent use; Close it when done (the volume stays published).
type Mounter struct {
	h       *handle[*C.kcsi_mounter]
	cleanup runtime.Cleanup
}

// MounterArgs are SetUp's optional arguments (the kubelet's MounterArgs).
type MounterArgs struct {
	FSGroup             *int64 `json:"fsGroup,omitempty"`
	FSGroupChangePolicy string `json:"fsGroupChangePolicy,omitempty"` // "Always" or "OnRootMismatch"
	SELinuxLabel        string `json:"seLinuxLabel,omitempty"`
	// ReconstructedVolume and IsRemount mark a SetUp of a volume a pod may already use (after
	// a kubelet restart, or a requiresRepublish re-publish): a failed publish then leaves the
	// directory alone.
	ReconstructedVolume bool `json:"reconstructedVolume,omitempty"`
	IsRemount           bool `json:"isRemount,omitempty"`
}

// NewMounter creates a mounter for spec in pod (a *corev1.Pod or its JSON as json.RawMessage;
// metadata.uid is required). It does no I/O and needs no registered driver.
func (h *Host) NewMounter(spec Spec, pod any) (*Mounter, error) {
	const op = "NewMounter"
	a := newArgs(op)
	defer a.done()
	cSpec, cPod := a.json("spec", spec), a.json("pod", pod)
	if a.err != nil {
		return nil, a.err
	}
	var p *C.kcsi_mounter
	err := h.call(context.Background(), op, func(hp *C.kcsi_host) error {
		var e C.gk_err
		return check(op, C.gk_mounter_new(hp, cSpec, cPod, &p, &e), &e)
	})
	if err != nil {
		return nil, err
	}
	m := &Mounter{}
	m.h, m.cleanup = track(m, "mounter", p, func(p *C.kcsi_mounter) { C.kcsi_mounter_free(p) })
	return m, nil
}

// Close frees the mounter; idempotent and safe while other calls are in flight.
func (m *Mounter) Close() { closeOwner(m, m.h, &m.cleanup) }

// Path is where the volume is published:
// <rootDir>/pods/<uid>/volumes/kubernetes.io~csi/<spec>/mount.
func (m *Mounter) Path() (string, error) {
	const op = "Mounter.Path"
	var path string
	err := callOn(context.Background(), m, m.h, op, func(p *C.kcsi_mounter) error {
		var out *C.char
		var e C.gk_err
		if err := check(op, C.gk_mounter_path(p, &out, &e), &e); err != nil {
			return err
		}
		path = takeString(out)
		return nil
	})
	return path, err
}

// SetUp publishes the volume (NodePublishVolume) and records vol_data.json. args may be nil.
// Errors carry the class the kubelet acts on (IsUncertain, IsTransient). The C call has no
// timeout argument: ctx is checked before it starts and the host's timeout bounds it.
func (m *Mounter) SetUp(ctx context.Context, args *MounterArgs) error {
	const op = "Mounter.SetUp"
	a := newArgs(op)
	defer a.done()
	var cArgs *C.char
	if args != nil {
		cArgs = a.json("args", args)
	}
	if a.err != nil {
		return a.err
	}
	return callOn(ctx, m, m.h, op, func(p *C.kcsi_mounter) error {
		var e C.gk_err
		return check(op, C.gk_mounter_set_up(p, cArgs, &e), &e)
	})
}

// Metrics is a published volume's usage (NodeGetVolumeStats). Fields the driver did not
// report are nil.
type Metrics struct {
	Time           string  `json:"time"`
	CapacityBytes  *int64  `json:"capacityBytes"`
	AvailableBytes *int64  `json:"availableBytes"`
	UsedBytes      *int64  `json:"usedBytes"`
	Inodes         *int64  `json:"inodes"`
	InodesFree     *int64  `json:"inodesFree"`
	InodesUsed     *int64  `json:"inodesUsed"`
	Abnormal       *bool   `json:"abnormal"` // only with the CSIVolumeHealth gate
	Message        *string `json:"message"`
	// Raw is kcsi's whole answer.
	Raw json.RawMessage `json:"-"`
}

// Metrics asks the driver for the volume's usage; ErrNotSupported when the driver lacks
// GET_VOLUME_STATS. ctx is checked before the call; the host's timeout bounds it.
func (m *Mounter) Metrics(ctx context.Context) (*Metrics, error) {
	const op = "Mounter.Metrics"
	var raw string
	err := callOn(ctx, m, m.h, op, func(p *C.kcsi_mounter) error {
		var out *C.char
		var e C.gk_err
		if err := check(op, C.gk_mounter_metrics(p, &out, &e), &e); err != nil {
			return err
		}
		raw = takeString(out)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var mt Metrics
	if err := decode(op, raw, &mt); err != nil {
		return nil, err
	}
	mt.Raw = json.RawMessage(raw)
	return &mt, nil
}

// Unmounter tears down one published volume of one pod (the kubelet's Unmounter).
type Unmounter struct {
	h       *handle[*C.kcsi_unmounter]
	cleanup runtime.Cleanup
}

// NewUnmounter creates an unmounter for volume specName of pod podUID from the vol_data.json
// SetUp wrote, so it works after a restart with a new host. ErrNotFound when that file is
// missing.
func (h *Host) NewUnmounter(specName, podUID string) (*Unmounter, error) {
	const op = "NewUnmounter"
	a := newArgs(op)
	defer a.done()
	cName, cUID := a.str("specName", specName), a.str("podUID", podUID)
	if a.err != nil {
		return nil, a.err
	}
	var p *C.kcsi_unmounter
	err := h.call(context.Background(), op, func(hp *C.kcsi_host) error {
		var e C.gk_err
		return check(op, C.gk_unmounter_new(hp, cName, cUID, &p, &e), &e)
	})
	if err != nil {
		return nil, err
	}
	u := &Unmounter{}
	u.h, u.cleanup = track(u, "unmounter", p, func(p *C.kcsi_unmounter) { C.kcsi_unmounter_free(p) })
	return u, nil
}

// Close frees the unmounter; idempotent and safe while other calls are in flight.
func (u *Unmounter) Close() { closeOwner(u, u.h, &u.cleanup) }

// TearDown unpublishes the volume (NodeUnpublishVolume) and removes its directory and
// vol_data.json. ctx is checked before the call; the host's timeout bounds it.
func (u *Unmounter) TearDown(ctx context.Context) error {
	const op = "Unmounter.TearDown"
	return callOn(ctx, u, u.h, op, func(p *C.kcsi_unmounter) error {
		var e C.gk_err
		return check(op, C.gk_unmounter_tear_down(p, &e), &e)
	})
}
