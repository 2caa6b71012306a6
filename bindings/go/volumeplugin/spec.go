package volumeplugin

import (
	"encoding/json"
	"sync"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/volume"
	"kcsi.dev/kcsi"
)

// kcsiSpec is spec in the binding's form; the objects are encoded as their API JSON.
func kcsiSpec(spec *volume.Spec) (kcsi.Spec, error) {
	if spec == nil {
		return kcsi.Spec{}, invalid("volume spec is nil")
	}
	s := kcsi.Spec{ReadOnly: spec.ReadOnly, Migrated: spec.Migrated,
		InlineVolumeSpecForCSIMigration: spec.InlineVolumeSpecForCSIMigration}
	if spec.PersistentVolume != nil {
		s.PersistentVolume = spec.PersistentVolume
	}
	if spec.Volume != nil {
		s.Volume = spec.Volume
	}
	if s.PersistentVolume == nil && s.Volume == nil {
		return kcsi.Spec{}, invalid("volume spec has neither a volume nor a persistent volume")
	}
	return s, nil
}

// headJSON encodes only what kcsi's driver-free queries read (the CSI driver and volume
// handle, and which sources are set), so a query costs one small parse instead of encoding
// whole objects. Sources without CSI stay present but empty, so kcsi gives the same answers
// and errors as for the full spec.
func headJSON(b []byte, spec *volume.Spec) []byte {
	b = append(b, '{')
	if pv := spec.PersistentVolume; pv != nil {
		b = append(b, `"persistentVolume":{"spec":{`...)
		if csi := pv.Spec.CSI; csi != nil {
			b = append(b, `"csi":{"driver":`...)
			b = appendString(b, csi.Driver)
			b = append(b, `,"volumeHandle":`...)
			b = appendString(b, csi.VolumeHandle)
			b = append(b, '}')
		}
		b = append(b, "}}"...)
	}
	if v := spec.Volume; v != nil {
		if spec.PersistentVolume != nil {
			b = append(b, ',')
		}
		b = append(b, `"volume":{`...)
		if v.CSI != nil {
			b = append(b, `"csi":{"driver":`...)
			b = appendString(b, v.CSI.Driver)
			b = append(b, '}')
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendString appends s as a JSON string: printable ASCII without quotes or backslashes as
// is (every real driver name and most handles), anything else through encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// volumeSpec turns a spec kcsi rebuilt (objects as JSON) into the kubelet's.
func volumeSpec(s kcsi.Spec) (*volume.Spec, error) {
	if raw, ok := s.PersistentVolume.(json.RawMessage); ok {
		var pv v1.PersistentVolume
		if err := json.Unmarshal(raw, &pv); err != nil {
			return nil, invalid("kcsi rebuilt a persistent volume this package cannot read: %v", err)
		}
		return volume.NewSpecFromPersistentVolume(&pv, s.ReadOnly), nil
	}
	if raw, ok := s.Volume.(json.RawMessage); ok {
		var v v1.Volume
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, invalid("kcsi rebuilt a volume this package cannot read: %v", err)
		}
		return volume.NewSpecFromVolume(&v), nil
	}
	return nil, invalid("kcsi rebuilt a spec with neither a volume nor a persistent volume")
}

// heads pools headJSON's buffers: kcsi copies the text, so it is free again after the call.
var heads = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// withHead runs query on spec's head.
func withHead[T any](spec *volume.Spec, query func(kcsi.Spec) (T, error)) (T, error) {
	bp := heads.Get().(*[]byte)
	*bp = headJSON((*bp)[:0], spec)
	v, err := query(kcsi.Spec{JSON: *bp})
	heads.Put(bp)
	return v, err
}
