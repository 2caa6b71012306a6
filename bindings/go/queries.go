package kcsi

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"encoding/json"
)

// Spec is a volume spec as the C API takes it: a PersistentVolume (with the pod's readOnly
// flag) or an inline pod Volume. Set exactly one of PersistentVolume and Volume, each a
// Kubernetes object (e.g. *corev1.PersistentVolume) or its JSON as json.RawMessage or []byte.
//
// JSON, when set, is the whole spec as the C API's JSON text and the other fields are ignored.
// The driver-free queries (VolumeName, CanSupport, CanAttach, CanDeviceMount, RequiresRemount,
// SupportsSELinuxContextMount) read only persistentVolume.spec.csi.{driver,volumeHandle} and
// volume.csi.driver, so a caller on a hot path can pass just those instead of encoding whole
// objects.
type Spec struct {
	PersistentVolume any
	Volume           any
	ReadOnly         bool
	// Migrated marks an in-tree volume translated to CSI (the `migrated` metric label).
	Migrated bool
	// InlineVolumeSpecForCSIMigration marks a PersistentVolume translated from a pod's
	// in-tree inline volume: Attach puts its spec, not a name, into the VolumeAttachment.
	InlineVolumeSpecForCSIMigration bool
	JSON                            json.RawMessage
}

// MarshalJSON encodes s in the C API's spec form; []byte values are taken as JSON text (plain
// encoding/json would turn them into base64 strings).
func (s Spec) MarshalJSON() ([]byte, error) {
	if s.JSON != nil {
		return s.JSON, nil
	}
	type wire struct {
		PersistentVolume any  `json:"persistentVolume,omitempty"`
		Volume           any  `json:"volume,omitempty"`
		ReadOnly         bool `json:"readOnly,omitempty"`
		Migrated         bool `json:"migrated,omitempty"`
		Inline           bool `json:"inlineVolumeSpecForCSIMigration,omitempty"`
	}
	return json.Marshal(wire{rawBytes(s.PersistentVolume), rawBytes(s.Volume), s.ReadOnly, s.Migrated,
		s.InlineVolumeSpecForCSIMigration})
}

// rawBytes marks []byte as JSON text for encoding/json.
func rawBytes(v any) any {
	if b, ok := v.([]byte); ok {
		return json.RawMessage(b)
	}
	return v
}

// VolumeName returns the unique volume name "<driver>^<volumeHandle>" of a PersistentVolume
// spec; inline volumes have none (ErrInvalidArgument).
func (h *Host) VolumeName(spec Spec) (string, error) {
	return h.volumeName("VolumeName", spec)
}

func (h *Host) volumeName(op string, spec Spec) (string, error) {
	if spec.JSON != nil && len(spec.JSON) < rawSpecCap {
		return h.volumeNameRaw(op, spec.JSON)
	}
	a := newArgs(op)
	defer a.done()
	cSpec := a.json("spec", spec)
	if a.err != nil {
		return "", a.err
	}
	var name string
	err := h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var out *C.char
		var e C.gk_err
		if err := check(op, C.gk_get_volume_name(p, cSpec, &out, &e), &e); err != nil {
			return err
		}
		name = takeString(out)
		return nil
	})
	return name, err
}

type boolQuery func(h *C.kcsi_host, spec *C.char, out *C.bool, e *C.gk_err) C.kcsi_result

func (h *Host) boolQuery(op string, spec Spec, fn boolQuery) (bool, error) {
	if spec.JSON != nil && len(spec.JSON) < rawSpecCap {
		return h.boolQueryRaw(op, spec.JSON, fn)
	}
	a := newArgs(op)
	defer a.done()
	cSpec := a.json("spec", spec)
	if a.err != nil {
		return false, a.err
	}
	var out C.bool
	err := h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var e C.gk_err
		return check(op, fn(p, cSpec, &out, &e), &e)
	})
	return bool(out), err
}

// CanSupport reports whether the spec has a CSI source (PersistentVolume or inline).
func (h *Host) CanSupport(spec Spec) (bool, error) {
	return h.boolQuery("CanSupport", spec, func(p *C.kcsi_host, s *C.char, o *C.bool, e *C.gk_err) C.kcsi_result {
		return C.gk_can_support(p, s, o, e)
	})
}

// CanAttach reports whether the volume needs attaching: false for inline volumes and for
// drivers whose CSIDriver says attachRequired: false; true when there is no CSIDriver.
func (h *Host) CanAttach(spec Spec) (bool, error) {
	return h.boolQuery("CanAttach", spec, func(p *C.kcsi_host, s *C.char, o *C.bool, e *C.gk_err) C.kcsi_result {
		return C.gk_can_attach(p, s, o, e)
	})
}

// VerifyExhaustedResource reports whether the volume's attach failed because the node is out
// of capacity for its driver (VolumeAttachment attachError code ResourceExhausted); if so the
// driver's CSINode allocatable count is refreshed first. Call it when volumes stay unattached.
func (h *Host) VerifyExhaustedResource(spec Spec) (bool, error) {
	return h.boolQuery("VerifyExhaustedResource", spec, func(p *C.kcsi_host, s *C.char, o *C.bool, e *C.gk_err) C.kcsi_result {
		return C.gk_verify_exhausted_resource(p, s, o, e)
	})
}

// CanDeviceMount reports whether the volume is staged (device-mounted): true for
// PersistentVolumes, false for inline volumes.
func (h *Host) CanDeviceMount(spec Spec) (bool, error) {
	return h.boolQuery("CanDeviceMount", spec, func(p *C.kcsi_host, s *C.char, o *C.bool, e *C.gk_err) C.kcsi_result {
		return C.gk_can_device_mount(p, s, o, e)
	})
}

// RequiresRemount reports whether the volume must be re-published periodically (the
// CSIDriver's requiresRepublish).
func (h *Host) RequiresRemount(spec Spec) (bool, error) {
	return h.boolQuery("RequiresRemount", spec, func(p *C.kcsi_host, s *C.char, o *C.bool, e *C.gk_err) C.kcsi_result {
		return C.gk_requires_remount(p, s, o, e)
	})
}

// specFromJSON reads a spec kcsi returned; the objects stay JSON (json.RawMessage), ready to
// be passed back or unmarshalled into Kubernetes types.
func specFromJSON(op string, text json.RawMessage) (Spec, error) {
	var wire struct {
		PersistentVolume json.RawMessage `json:"persistentVolume"`
		Volume           json.RawMessage `json:"volume"`
		ReadOnly         bool            `json:"readOnly"`
	}
	if err := decode(op, string(text), &wire); err != nil {
		return Spec{}, err
	}
	s := Spec{ReadOnly: wire.ReadOnly}
	// Only set fields hold a value: a nil RawMessage in an interface would encode as null.
	if len(wire.PersistentVolume) > 0 && string(wire.PersistentVolume) != "null" {
		s.PersistentVolume = wire.PersistentVolume
	}
	if len(wire.Volume) > 0 && string(wire.Volume) != "null" {
		s.Volume = wire.Volume
	}
	return s, nil
}
