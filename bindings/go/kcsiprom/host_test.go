package kcsiprom

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"kcsi.dev/kcsi"
)

// startHostpath starts the real hostpathplugin ($KCSI_HOSTPATH, else the peer cache's) on a
// socket under dir and stops it when the test ends.
func startHostpath(t *testing.T, dir, name string) string {
	t.Helper()
	bin := os.Getenv("KCSI_HOSTPATH")
	if bin == "" {
		out, err := exec.Command("../../../scripts/peers/path.sh", "hostpath").Output()
		if err != nil {
			t.Fatalf("the hostpath peer is not built (scripts/peers/build.sh hostpath, or set KCSI_HOSTPATH): %v", err)
		}
		bin = strings.TrimSpace(string(out))
	}
	sock := filepath.Join(dir, "csi.sock")
	cmd := exec.Command(bin, "--endpoint=unix://"+sock, "--drivername="+name, "--nodeid="+name,
		"--statedir="+filepath.Join(dir, "state"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return "unix://" + sock
		}
		if time.Now().After(deadline) {
			t.Fatalf("hostpathplugin did not listen on %s", sock)
		}
	}
}

// The collector over a real host that registered the real hostpath driver and had one call
// fail: what kcsi_host_metrics answered, gathered through a pedantic registry.
func TestCollectorGathersARealHostsMetricsAfterItsRPCs(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "kcsiprom") // short: sun_path holds 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	const driver = "prom.csi.kcsi.dev"
	endpoint := startHostpath(t, dir, driver)
	host, err := kcsi.NewHost(kcsi.Config{NodeName: "node-prom", RootDir: filepath.Join(dir, "root"),
		CSIDrivers: []any{map[string]any{"metadata": map[string]any{"name": driver}, "spec": map[string]any{"attachRequired": false}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	ctx := context.Background()
	if err := host.RegisterPlugin(ctx, driver, endpoint, []string{"1.0.0"}); err != nil {
		t.Fatal(err)
	}
	// A volume the driver does not have: NodePublishVolume fails with the driver's code.
	pv, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": "pv-none"},
		"spec": map[string]any{"accessModes": []string{"ReadWriteOnce"}, "csi": map[string]any{"driver": driver, "volumeHandle": "no-such-volume"}}})
	pod := json.RawMessage(`{"metadata": {"name": "p", "namespace": "default", "uid": "uid-prom"}}`)
	m, err := host.NewMounter(kcsi.Spec{PersistentVolume: json.RawMessage(pv)}, pod)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.SetUp(ctx, nil); err == nil {
		t.Fatal("SetUp of a volume the driver lacks succeeded")
	}

	text, err := host.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(host))
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering a real host's metrics: %v\n%s", err, text)
	}
	gathered := map[string]*dto.MetricFamily{}
	for _, mf := range families {
		gathered[mf.GetName()] = mf
	}
	// Nothing the host reported is lost on the way.
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" && gathered[f[2]] == nil {
			t.Errorf("the host reports %s, the collector does not gather it", f[2])
		}
	}
	count := func(family string, labels map[string]string) (float64, bool) {
		for _, m := range gathered[family].GetMetric() {
			match := 0
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v == l.GetValue() {
					match++
				}
			}
			if match == len(labels) {
				switch {
				case m.GetHistogram() != nil:
					return float64(m.GetHistogram().GetSampleCount()), true
				case m.GetCounter() != nil:
					return m.GetCounter().GetValue(), true
				default:
					return m.GetGauge().GetValue(), true
				}
			}
		}
		return 0, false
	}
	for _, want := range []struct {
		family string
		labels map[string]string
	}{
		{"csi_operations_seconds", map[string]string{"driver_name": driver, "method_name": "/csi.v1.Node/NodeGetInfo", "grpc_status_code": "OK"}},
		{"csi_operations_seconds", map[string]string{"driver_name": driver, "method_name": "/csi.v1.Node/NodePublishVolume", "grpc_status_code": "NotFound"}},
		{"kcsi_driver_registrations_total", map[string]string{"result": "success"}},
		{"kcsi_registered_drivers", nil},
	} {
		if n, ok := count(want.family, want.labels); !ok || n != 1 {
			t.Errorf("%s%v = %v (found %v), want 1; host text:\n%s", want.family, want.labels, n, ok, text)
		}
	}
}
