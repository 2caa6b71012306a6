package upstream

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/volume"

	"kcsi.dev/kcsi"
	"kcsi.dev/kcsi/volumeplugin"
	"kcsi.dev/kcsi/volumeplugin/volumeplugintest"
)

// The kubelet's reconciler asks GetVolumeName, CanSupport and CanAttach of every volume every
// 100 ms. These benchmarks make one reconciler pass over a full node, 110 pods (the kubelet's
// default max pods) with 2 volumes each, of realistic PersistentVolumes (labels, annotations,
// claim ref, node affinity, attributes), through kcsi and through upstream's Go plugin set up
// as the kubelet sets it up (API client and CSIDriver lister). Target: kcsi within 2x of
// upstream per query. Figures are printed (ns/query, cpu-ns/query), never asserted.

const (
	benchPods          = 110
	benchVolumesPerPod = 2
)

func benchSpecs() []*volume.Spec {
	specs := make([]*volume.Spec, 0, benchPods*benchVolumesPerPod)
	for i := range benchPods * benchVolumesPerPod {
		uid := fmt.Sprintf("3f1c2a9e-8d1b-4b7e-9a55-%012d", i)
		pv := volumeplugintest.PVSpec("pvc-"+uid, uid, false).PersistentVolume
		pv.Labels = map[string]string{"topology.hostpath.csi/node": volumeplugintest.NodeName, "app": "database"}
		pv.Annotations = map[string]string{"pv.kubernetes.io/provisioned-by": volumeplugintest.DriverName, "volume.kubernetes.io/provisioner-deletion-secret-name": ""}
		pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: fmt.Sprintf("data-db-%d", i), UID: "0c6f2e8d-9b11-4b7e-9a55-3f1c2a9e8d1b"}
		pv.Spec.CSI.VolumeAttributes = map[string]string{"kind": "file", "storage.kubernetes.io/csiProvisionerIdentity": "1700000000000-8081-hostpath.csi.k8s.io"}
		pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: "topology.hostpath.csi/node", Operator: v1.NodeSelectorOpIn, Values: []string{volumeplugintest.NodeName}}},
		}}}}
		pv.CreationTimestamp = metav1.Now()
		specs = append(specs, volume.NewSpecFromPersistentVolume(pv, false))
	}
	return specs
}

func benchPlugins(b *testing.B) (kcsiPlugin *volumeplugin.Plugin, upstream volume.VolumePlugin) {
	p := volumeplugin.New(volumeplugin.Config{CSIDrivers: []any{volumeplugintest.HostpathCSIDriver()}})
	b.Cleanup(p.Close)
	volumeplugintest.KubeletHost(b, b.TempDir(), nil, p)
	return p, volumeplugintest.UpstreamPlugin(b, b.TempDir())
}

func BenchmarkReconcilerQueries(b *testing.B) {
	k, up := benchPlugins(b)
	specs := benchSpecs()
	queries := []struct {
		name string
		ask  func(p volume.VolumePlugin, s *volume.Spec) error
	}{
		{"GetVolumeName", func(p volume.VolumePlugin, s *volume.Spec) error { _, err := p.GetVolumeName(s); return err }},
		{"CanSupport", func(p volume.VolumePlugin, s *volume.Spec) error {
			if !p.CanSupport(s) {
				return fmt.Errorf("CanSupport(%s) = false", s.Name())
			}
			return nil
		}},
		{"CanAttach", func(p volume.VolumePlugin, s *volume.Spec) error {
			if ok, err := p.(volume.AttachableVolumePlugin).CanAttach(s); err != nil || ok {
				return fmt.Errorf("CanAttach(%s) = %v, %v; the CSIDriver says attachRequired: false", s.Name(), ok, err)
			}
			return nil
		}},
	}
	for _, q := range queries {
		for _, c := range []struct {
			name string
			p    volume.VolumePlugin
		}{{"kcsi", k}, {"upstream", up}} {
			b.Run(q.name+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				cpu := processCPU()
				start := time.Now()
				for b.Loop() {
					for _, s := range specs {
						if err := q.ask(c.p, s); err != nil {
							b.Fatal(err)
						}
					}
				}
				n := float64(b.N * len(specs))
				b.ReportMetric(float64(time.Since(start).Nanoseconds())/n, "ns/query")
				b.ReportMetric(float64(processCPU()-cpu)/n, "cpu-ns/query")
			})
		}
	}
}

// BenchmarkGetVolumeNameFullSpec is the binding's general path (whole objects encoded to
// JSON), for comparison with the head-only path the plugin takes.
func BenchmarkGetVolumeNameFullSpec(b *testing.B) {
	k, _ := benchPlugins(b)
	spec := benchSpecs()[0]
	b.ReportAllocs()
	for b.Loop() {
		s := kcsi.Spec{PersistentVolume: spec.PersistentVolume, ReadOnly: spec.ReadOnly}
		if _, err := k.Host().VolumeName(s); err != nil {
			b.Fatal(err)
		}
	}
}

// processCPU is the process's CPU time so far (all threads: Go's, GC's and kcsi's). On a
// shared machine wall time includes time spent descheduled; CPU time does not.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
