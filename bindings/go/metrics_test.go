package kcsi

import (
	"context"
	"strings"
	"testing"
)

func TestMetricsCountRegistrationsAndTheirRPCs(t *testing.T) {
	d := startHostpathDriver(t, "metrics.csi.kcsi.dev")
	h := newTestHost(t, Config{})
	if err := h.RegisterPlugin(context.Background(), d.Name, d.Endpoint, []string{"1.0.0"}); err != nil {
		t.Fatalf("RegisterPlugin: %v", err)
	}
	text, err := h.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# TYPE csi_operations_seconds histogram\n",
		`csi_operations_seconds_count{driver_name="metrics.csi.kcsi.dev",method_name="/csi.v1.Node/NodeGetInfo",grpc_status_code="OK",migrated="false"} 1` + "\n",
		`kcsi_driver_registrations_total{result="success"} 1` + "\n",
		"kcsi_registered_drivers 1\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
}
