package volumeplugin

import (
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/kubernetes/pkg/volume"
	volumetest "k8s.io/kubernetes/pkg/volume/testing"
	volumetypes "k8s.io/kubernetes/pkg/volume/util/types"
	"kcsi.dev/kcsi"
	"kcsi.dev/kcsi/volumeplugin/volumeplugintest"
)

func TestNodeExpandErrorsThatMayBeInProgressAreFinalAsUpstreamWrapsThem(t *testing.T) {
	for _, code := range []int32{14, 10, 8, 4} {
		err := expandError(&kcsi.Error{Result: kcsi.ResultDriver, Class: kcsi.ClassUncertain, GRPCCode: code, Message: "busy"})
		if !volumetypes.IsOperationFinishedError(err) || volumetypes.IsUncertainProgressError(err) {
			t.Errorf("code %d: got %T, want a finished error", code, err)
		}
	}
	err := expandError(&kcsi.Error{Result: kcsi.ResultNotFound, Class: kcsi.ClassTransient, GRPCCode: -1, Message: "driver not registered"})
	if volumetypes.IsOperationFinishedError(err) {
		t.Errorf("an unregistered driver stays transient: got %T", err)
	}
}

// Config.CSIDriversFromVolumeHost on a host without the informer it needs: Init still
// succeeds (see TestInitSucceedsWhereUpstreamsDoesAndTheFirstCallSaysWhatIsWrong) and the
// first call says what is missing.
func TestCSIDriversFromAVolumeHostWithoutAnInformerIsRefusedByTheFirstCall(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  Config
		host volume.VolumeHost
		want string
	}{
		"standalone": {Config{CSIDriversFromVolumeHost: true},
			volumetest.NewFakeKubeletVolumeHostWithCSINodeName(t, t.TempDir(), nil, nil, volumeplugintest.NodeName, nil, nil), "a kubelet VolumeHost with an API client"},
		"not a kubelet's host": {Config{Kubeconfig: "/nonexistent/kubeconfig", CSIDriversFromVolumeHost: true},
			volumetest.NewFakeVolumeHost(t, t.TempDir(), fake.NewSimpleClientset(), nil), "a kubelet VolumeHost with an API client"},
	} {
		p := New(tc.cfg)
		if err := p.Init(tc.host); err != nil {
			t.Errorf("%s: Init: %v", name, err)
		}
		_, err := p.CanAttach(volumeplugintest.PVSpec("pv", "h", false))
		p.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: CanAttach: %v, want %q", name, err, tc.want)
		}
	}
}

func TestCSIOperationsLandInTheKubeletsLegacyRegistry(t *testing.T) {
	volumeplugintest.NeedsRoot(t)
	newEnv(t) // registration sent NodeGetInfo
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "csi_operations_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["driver_name"] == volumeplugintest.DriverName && labels["method_name"] == "/csi.v1.Node/NodeGetInfo" &&
				labels["grpc_status_code"] == "OK" && labels["migrated"] == "false" &&
				m.GetHistogram().GetSampleCount() >= 1 {
				return
			}
		}
		t.Fatalf("no NodeGetInfo sample of %s in %v", volumeplugintest.DriverName, mf)
	}
	t.Fatal("csi_operations_seconds is not in legacyregistry")
}
