package kcsi

// #include "shim.h"
import "C"

import "context"

// The objects a host program feeds kcsi from informers it already runs (Config's
// CSIDriversFromHost and VolumeAttachmentsFromHost), each kind through three calls.

type (
	applyFn  func(*C.kcsi_host, *C.char, *C.gk_err) C.kcsi_result
	deleteFn func(*C.kcsi_host, *C.char, *C.gk_err) C.kcsi_result
	syncedFn func(*C.kcsi_host, *C.gk_err) C.kcsi_result
)

func (h *Host) applyFed(op, what string, object any, apply applyFn) error {
	a := newArgs(op)
	defer a.done()
	cJSON := a.json(what, object)
	if a.err != nil {
		return a.err
	}
	return h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var e C.gk_err
		return check(op, apply(p, cJSON, &e), &e)
	})
}

func (h *Host) deleteFed(op, name string, del deleteFn) error {
	a := newArgs(op)
	defer a.done()
	cName := a.str("name", name)
	if a.err != nil {
		return a.err
	}
	return h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var e C.gk_err
		return check(op, del(p, cName, &e), &e)
	})
}

func (h *Host) syncedFed(op string, synced syncedFn) error {
	return h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var e C.gk_err
		return check(op, synced(p, &e), &e)
	})
}

// ApplyCSIDriver gives a host made with Config.CSIDriversFromHost a CSIDriver object its
// program's informer added or updated: a *storagev1.CSIDriver or its JSON (json.RawMessage or
// []byte). The driver facts and the CSIDriver generation follow at once. Other hosts refuse
// it with ErrFailedPrecondition.
func (h *Host) ApplyCSIDriver(csiDriver any) error {
	return h.applyFed("ApplyCSIDriver", "csiDriver", csiDriver, func(p *C.kcsi_host, j *C.char, e *C.gk_err) C.kcsi_result {
		return C.gk_host_csidriver_apply(p, j, e)
	})
}

// DeleteCSIDriver tells a CSIDriversFromHost host that the CSIDriver name was deleted;
// ErrNotFound when it had none of that name.
func (h *Host) DeleteCSIDriver(name string) error {
	return h.deleteFed("DeleteCSIDriver", name, func(p *C.kcsi_host, n *C.char, e *C.gk_err) C.kcsi_result {
		return C.gk_host_csidriver_delete(p, n, e)
	})
}

// CSIDriversSynced tells a CSIDriversFromHost host that its program's informer has synced
// (every listed CSIDriver applied). Until then a driver-facts lookup waits up to 5 s for it
// and then fails with a transient ErrUnavailable, as before kcsi's own first list.
func (h *Host) CSIDriversSynced() error {
	return h.syncedFed("CSIDriversSynced", func(p *C.kcsi_host, e *C.gk_err) C.kcsi_result {
		return C.gk_host_csidrivers_synced(p, e)
	})
}

// ApplyVolumeAttachment gives a controller host made with Config.VolumeAttachmentsFromHost a
// VolumeAttachment its program's informer has: a *storagev1.VolumeAttachment or its JSON.
// Attach and Detach wait on, and VolumesAreAttached reads, what is fed. Other hosts refuse
// it with ErrFailedPrecondition.
func (h *Host) ApplyVolumeAttachment(volumeAttachment any) error {
	return h.applyFed("ApplyVolumeAttachment", "volumeAttachment", volumeAttachment, func(p *C.kcsi_host, j *C.char, e *C.gk_err) C.kcsi_result {
		return C.gk_host_volumeattachment_apply(p, j, e)
	})
}

// DeleteVolumeAttachment tells a VolumeAttachmentsFromHost host that the VolumeAttachment
// name is gone; ErrNotFound when it had none of that name.
func (h *Host) DeleteVolumeAttachment(name string) error {
	return h.deleteFed("DeleteVolumeAttachment", name, func(p *C.kcsi_host, n *C.char, e *C.gk_err) C.kcsi_result {
		return C.gk_host_volumeattachment_delete(p, n, e)
	})
}

// VolumeAttachmentsSynced tells a VolumeAttachmentsFromHost host that its program's informer
// has synced: from then on a VolumeAttachment that was not fed is taken as absent.
func (h *Host) VolumeAttachmentsSynced() error {
	return h.syncedFed("VolumeAttachmentsSynced", func(p *C.kcsi_host, e *C.gk_err) C.kcsi_result {
		return C.gk_host_volumeattachments_synced(p, e)
	})
}
