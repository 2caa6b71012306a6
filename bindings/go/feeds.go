package kcsi

// #include "shim.h"
import "C"

import "context"

// ApplyCSIDriver gives a host made with Config.CSIDriversFromHost a CSIDriver object its
// program's informer added or updated: a *storagev1.CSIDriver or its JSON (json.RawMessage or
// []byte). The driver facts and the CSIDriver generation follow at once. Other hosts refuse
// it with ErrFailedPrecondition.
func (h *Host) ApplyCSIDriver(csiDriver any) error {
	const op = "ApplyCSIDriver"
	a := newArgs(op)
	defer a.done()
	cJSON := a.json("csiDriver", csiDriver)
	if a.err != nil {
		return a.err
	}
	return h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var e C.gk_err
		return check(op, C.gk_host_csidriver_apply(p, cJSON, &e), &e)
	})
}

// DeleteCSIDriver tells a CSIDriversFromHost host that the CSIDriver name was deleted;
// ErrNotFound when it had none of that name.
func (h *Host) DeleteCSIDriver(name string) error {
	const op = "DeleteCSIDriver"
	a := newArgs(op)
	defer a.done()
	cName := a.str("name", name)
	if a.err != nil {
		return a.err
	}
	return h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var e C.gk_err
		return check(op, C.gk_host_csidriver_delete(p, cName, &e), &e)
	})
}

// CSIDriversSynced tells a CSIDriversFromHost host that its program's informer has synced
// (every listed CSIDriver applied). Until then a driver-facts lookup waits up to 5 s for it
// and then fails with a transient ErrUnavailable, as before kcsi's own first list.
func (h *Host) CSIDriversSynced() error {
	const op = "CSIDriversSynced"
	return h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var e C.gk_err
		return check(op, C.gk_host_csidrivers_synced(p, &e), &e)
	})
}

// ApplyVolumeAttachment gives a controller host made with Config.VolumeAttachmentsFromHost a
// VolumeAttachment its program's informer has: a *storagev1.VolumeAttachment or its JSON.
// Attach and Detach wait on, and VolumesAreAttached reads, what is fed. Other hosts refuse
// it with ErrFailedPrecondition.
func (h *Host) ApplyVolumeAttachment(volumeAttachment any) error {
	const op = "ApplyVolumeAttachment"
	a := newArgs(op)
	defer a.done()
	cJSON := a.json("volumeAttachment", volumeAttachment)
	if a.err != nil {
		return a.err
	}
	return h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var e C.gk_err
		return check(op, C.gk_host_volumeattachment_apply(p, cJSON, &e), &e)
	})
}

// DeleteVolumeAttachment tells a VolumeAttachmentsFromHost host that the VolumeAttachment
// name is gone; ErrNotFound when it had none of that name.
func (h *Host) DeleteVolumeAttachment(name string) error {
	const op = "DeleteVolumeAttachment"
	a := newArgs(op)
	defer a.done()
	cName := a.str("name", name)
	if a.err != nil {
		return a.err
	}
	return h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var e C.gk_err
		return check(op, C.gk_host_volumeattachment_delete(p, cName, &e), &e)
	})
}

// VolumeAttachmentsSynced tells a VolumeAttachmentsFromHost host that its program's informer
// has synced: from then on a VolumeAttachment that was not fed is taken as absent.
func (h *Host) VolumeAttachmentsSynced() error {
	const op = "VolumeAttachmentsSynced"
	return h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var e C.gk_err
		return check(op, C.gk_host_volumeattachments_synced(p, &e), &e)
	})
}
