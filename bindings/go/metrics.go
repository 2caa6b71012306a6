package kcsi

/*
#include "shim.h"
*/
import "C"

import "context"

// MetricsContentType is the Content-Type of the text Metrics returns.
const MetricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// Metrics returns the host's metrics in the Prometheus text exposition format (version
// 0.0.4): csi_operations_seconds as the kubelet exports it (labels driver_name, method_name,
// grpc_status_code, migrated) and kcsi's own series (kcsi_driver_registrations_total,
// kcsi_registered_drivers, kcsi_api_requests_total). Serve it on /metrics as is, or register
// kcsi.dev/kcsi/kcsiprom's collector with a Prometheus registry.
func (h *Host) Metrics() (string, error) {
	const op = "Metrics"
	var text string
	err := h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var out *C.char
		var e C.gk_err
		if err := check(op, C.gk_host_metrics(p, &out, &e), &e); err != nil {
			return err
		}
		text = takeString(out)
		return nil
	})
	return text, err
}
