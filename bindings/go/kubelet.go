package kcsi

/*
#include "shim.h"

static kcsi_result gk_supports_selinux_context_mount(kcsi_host *h, const char *spec, bool *out, gk_err *e) {
	GK_SHIM(kcsi_supports_selinux_context_mount(h, spec, out, &err));
}
static kcsi_result gk_block_mapper_metrics(kcsi_block_mapper *m, char **out, gk_err *e) {
	GK_SHIM(kcsi_block_mapper_metrics(m, out, &err));
}
*/
import "C"

import (
	"context"
	"encoding/json"
)

// What the kubelet's volume plugin interfaces ask beyond the volume operations.

// SupportsSELinuxContextMount reports whether the volume may be mounted with
// -o context=<label>: with the gate SELinuxMountReadWriteOncePod, the CSIDriver's
// seLinuxMount (false without a CSIDriver); false without the gate.
func (h *Host) SupportsSELinuxContextMount(spec Spec) (bool, error) {
	return h.boolQuery("SupportsSELinuxContextMount", spec, func(p *C.kcsi_host, s *C.char, o *C.bool, e *C.gk_err) C.kcsi_result {
		return C.gk_supports_selinux_context_mount(p, s, o, e)
	})
}

// Metrics asks the driver for the mapped volume's usage (NodeGetVolumeStats on
// <globalMapPath>/<podUID>); ErrNotSupported when the driver lacks GET_VOLUME_STATS. ctx is
// checked before the call; the host's timeout bounds it.
func (m *BlockMapper) Metrics(ctx context.Context) (*Metrics, error) {
	const op = "BlockMapper.Metrics"
	raw, err := m.stringCall(ctx, op, func(p *C.kcsi_block_mapper, out **C.char, e *C.gk_err) C.kcsi_result {
		return C.gk_block_mapper_metrics(p, out, e)
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
