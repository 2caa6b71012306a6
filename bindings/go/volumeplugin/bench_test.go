package volumeplugin

import (
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/volume"
	"k8s.io/kubernetes/pkg/volume/csi"
	volumetest "k8s.io/kubernetes/pkg/volume/testing"
)

// The kubelet asks GetVolumeName and CanSupport of every volume on every reconcile loop.
// These benchmarks compare kcsi through this package with upstream's Go plugin on the same
// realistic PersistentVolume (labels, annotations, claim ref, node affinity, attributes).
// Target: <= 1 us per query through kcsi. Figures are printed, never asserted.

func benchSpec() *volume.Spec {
	pv := pvSpec("pvc-3f1c2a9e-8d1b-4b7e-9a55-0c6f2e8d9b11", "3f1c2a9e-8d1b-4b7e-9a55-0c6f2e8d9b11", false).PersistentVolume
	pv.Labels = map[string]string{"topology.hostpath.csi/node": nodeName, "app": "database"}
	pv.Annotations = map[string]string{"pv.kubernetes.io/provisioned-by": driverName, "volume.kubernetes.io/provisioner-deletion-secret-name": ""}
	pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: "data-db-0", UID: "0c6f2e8d-9b11-4b7e-9a55-3f1c2a9e8d1b"}
	pv.Spec.CSI.VolumeAttributes = map[string]string{"kind": "file", "storage.kubernetes.io/csiProvisionerIdentity": "1700000000000-8081-hostpath.csi.k8s.io"}
	pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: "topology.hostpath.csi/node", Operator: v1.NodeSelectorOpIn, Values: []string{nodeName}}},
	}}}}
	pv.CreationTimestamp = metav1.Now()
	return volume.NewSpecFromPersistentVolume(pv, false)
}

func benchPlugins(b *testing.B) (kcsiPlugin *Plugin, upstream volume.VolumePlugin) {
	p := New(Config{CSIDrivers: []any{hostpathCSIDriver()}})
	b.Cleanup(p.Close)
	root := b.TempDir()
	volumetest.NewFakeKubeletVolumeHostWithCSINodeName(&testing.T{}, root, nil, []volume.VolumePlugin{p}, nodeName, nil, nil)
	up := csi.ProbeVolumePlugins()[0]
	volumetest.NewFakeVolumeHostWithCSINodeName(&testing.T{}, root, nil, []volume.VolumePlugin{up}, nodeName, nil, nil)
	return p, up
}

func BenchmarkGetVolumeName(b *testing.B) {
	k, up := benchPlugins(b)
	spec := benchSpec()
	for _, c := range []struct {
		name string
		p    volume.VolumePlugin
	}{{"kcsi", k}, {"upstream", up}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				if _, err := c.p.GetVolumeName(spec); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
		})
	}
}

func BenchmarkCanSupport(b *testing.B) {
	k, up := benchPlugins(b)
	spec := benchSpec()
	for _, c := range []struct {
		name string
		p    volume.VolumePlugin
	}{{"kcsi", k}, {"upstream", up}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				if !c.p.CanSupport(spec) {
					b.Fatal("CanSupport = false")
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkGetVolumeNameFullSpec is the binding's general path (whole objects encoded to
// JSON), for comparison with the head-only path the plugin takes.
func BenchmarkGetVolumeNameFullSpec(b *testing.B) {
	k, _ := benchPlugins(b)
	spec := benchSpec()
	b.ReportAllocs()
	for b.Loop() {
		s, _ := kcsiSpec(spec)
		if _, err := k.Host().VolumeName(s); err != nil {
			b.Fatal(err)
		}
	}
}

// processCPU is the process's CPU time so far (all threads: Go's, GC's and kcsi's). On a
// shared machine ns/op includes time spent descheduled; cpu-ns/op does not.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
}
