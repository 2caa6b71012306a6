package kcsi

/*
#include "shim.h"

static kcsi_result gk_node_expand(kcsi_host *h, const char *options, bool *out, gk_err *e) {
	GK_SHIM(kcsi_node_expand(h, options, out, &err));
}
*/
import "C"

import "context"

// NodeExpandOptions are NodeExpand's inputs (the kubelet's NodeResizeOptions). Sizes are
// Kubernetes quantities, e.g. "2Gi".
type NodeExpandOptions struct {
	Spec            Spec   `json:"spec"`
	DevicePath      string `json:"devicePath,omitempty"`
	DeviceMountPath string `json:"deviceMountPath,omitempty"`
	DeviceStagePath string `json:"deviceStagePath,omitempty"`
	NewSize         string `json:"newSize"`
	OldSize         string `json:"oldSize,omitempty"`
}

// NodeExpand expands a volume on this node (NodeExpandVolume) and reports whether it was
// resized. ErrNotSupported when the driver lacks EXPAND_VOLUME; the driver's gRPC code stays
// on the error. ctx is checked before the call; the host's timeout bounds it.
func (h *Host) NodeExpand(ctx context.Context, opts NodeExpandOptions) (bool, error) {
	const op = "NodeExpand"
	a := newArgs(op)
	defer a.done()
	cOpts := a.json("options", opts)
	if a.err != nil {
		return false, a.err
	}
	var resized C.bool
	err := h.call(ctx, op, func(p *C.kcsi_host) error {
		var e C.gk_err
		return check(op, C.gk_node_expand(p, cOpts, &resized, &e), &e)
	})
	return bool(resized), err
}
