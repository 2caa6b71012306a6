package kcsiprom

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// What kcsi_host_metrics answered after one registration and one failed stage (trimmed to
// two buckets per series).
const hostText = `# HELP csi_operations_seconds Container Storage Interface operation duration with gRPC error code status total.
# TYPE csi_operations_seconds histogram
csi_operations_seconds_sum{driver_name="d.example",method_name="/csi.v1.Node/NodeGetInfo",grpc_status_code="OK",migrated="false"} 0.0012
csi_operations_seconds_count{driver_name="d.example",method_name="/csi.v1.Node/NodeGetInfo",grpc_status_code="OK",migrated="false"} 1
csi_operations_seconds_bucket{driver_name="d.example",method_name="/csi.v1.Node/NodeGetInfo",grpc_status_code="OK",migrated="false",le="0.1"} 1
csi_operations_seconds_bucket{driver_name="d.example",method_name="/csi.v1.Node/NodeGetInfo",grpc_status_code="OK",migrated="false",le="+Inf"} 1
csi_operations_seconds_sum{driver_name="d.example",method_name="/csi.v1.Node/NodeStageVolume",grpc_status_code="NotFound",migrated="false"} 0.3
csi_operations_seconds_count{driver_name="d.example",method_name="/csi.v1.Node/NodeStageVolume",grpc_status_code="NotFound",migrated="false"} 1
csi_operations_seconds_bucket{driver_name="d.example",method_name="/csi.v1.Node/NodeStageVolume",grpc_status_code="NotFound",migrated="false",le="0.1"} 0
csi_operations_seconds_bucket{driver_name="d.example",method_name="/csi.v1.Node/NodeStageVolume",grpc_status_code="NotFound",migrated="false",le="+Inf"} 1
# HELP kcsi_driver_registrations_total CSI driver registrations this host attempted, by result (success or failure).
# TYPE kcsi_driver_registrations_total counter
kcsi_driver_registrations_total{result="success"} 1
# HELP kcsi_registered_drivers CSI drivers currently registered with this host.
# TYPE kcsi_registered_drivers gauge
kcsi_registered_drivers 1
`

type text string

func (t text) Metrics() (string, error) { return string(t), nil }

type failing struct{}

func (failing) Metrics() (string, error) { return "", errors.New("host was freed") }

func TestCollectorRegistersAndGathersEveryKcsiSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(text(hostText)))
	want := `# HELP kcsi_driver_registrations_total CSI driver registrations this host attempted, by result (success or failure).
# TYPE kcsi_driver_registrations_total counter
kcsi_driver_registrations_total{result="success"} 1
# HELP kcsi_registered_drivers CSI drivers currently registered with this host.
# TYPE kcsi_registered_drivers gauge
kcsi_registered_drivers 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kcsi_driver_registrations_total", "kcsi_registered_drivers"); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "csi_operations_seconds" {
			continue
		}
		if len(mf.GetMetric()) != 2 {
			t.Fatalf("want 2 csi_operations_seconds series, got %v", mf)
		}
		for _, m := range mf.GetMetric() {
			if m.GetHistogram().GetSampleCount() != 1 {
				t.Errorf("series %v: want one observation", m)
			}
		}
		return
	}
	t.Fatal("csi_operations_seconds not gathered")
}

func TestCollectorReportsAnUnreadableHostOnTheScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(failing{}))
	if _, err := reg.Gather(); err == nil || !strings.Contains(err.Error(), "host was freed") {
		t.Fatalf("want the host's error, got %v", err)
	}
}
