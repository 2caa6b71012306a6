package volumeplugin

import (
	"math"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"kcsi.dev/kcsi"
)

// csiOperationsSeconds is upstream's csiOperationsLatencyMetric (pkg/volume/util/metrics.go),
// which the kubelet registers in legacyregistry whether or not a CSI plugin records into it.
// The help is component-base's, stability level included, so the families merge on a scrape.
const (
	csiOperationsSeconds     = "csi_operations_seconds"
	csiOperationsSecondsHelp = "[ALPHA] Container Storage Interface operation duration with gRPC error code status total"
)

// legacyHosts are the kcsi hosts of the initialized plugins in this process: their RPCs go to
// the kubelet's own /metrics (legacyregistry), where upstream's CSI plugin records them.
var legacyHosts = struct {
	sync.Mutex
	hosts    map[*kcsi.Host]struct{}
	register sync.Once
}{hosts: map[*kcsi.Host]struct{}{}}

func addLegacyHost(h *kcsi.Host) {
	legacyHosts.register.Do(func() { legacyregistry.RawMustRegister(legacyCollector{}) })
	legacyHosts.Lock()
	legacyHosts.hosts[h] = struct{}{}
	legacyHosts.Unlock()
}

func removeLegacyHost(h *kcsi.Host) {
	legacyHosts.Lock()
	delete(legacyHosts.hosts, h)
	legacyHosts.Unlock()
}

// legacyCollector sends csi_operations_seconds of every live host, summed per label set (two
// plugins in one process may talk to the same driver). It is unchecked: its series depend on
// the RPCs seen so far.
type legacyCollector struct{}

func (legacyCollector) Describe(chan<- *prometheus.Desc) {}

type histogram struct {
	labels  []*dto.LabelPair
	count   uint64
	sum     float64
	buckets map[float64]uint64
}

func (legacyCollector) Collect(ch chan<- prometheus.Metric) {
	legacyHosts.Lock()
	hosts := make([]*kcsi.Host, 0, len(legacyHosts.hosts))
	for h := range legacyHosts.hosts {
		hosts = append(hosts, h)
	}
	legacyHosts.Unlock()
	merged := map[string]*histogram{}
	var order []string
	for _, h := range hosts {
		text, err := h.Metrics()
		if err != nil {
			continue // a host closed since the list was taken
		}
		parser := expfmt.NewTextParser(model.LegacyValidation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(text))
		if err != nil {
			klog.ErrorS(err, "kcsi: parsing the host's metrics failed")
			continue
		}
		for _, m := range families[csiOperationsSeconds].GetMetric() {
			key := labelKey(m.GetLabel())
			acc, ok := merged[key]
			if !ok {
				acc = &histogram{labels: m.GetLabel(), buckets: map[float64]uint64{}}
				merged[key] = acc
				order = append(order, key)
			}
			hm := m.GetHistogram()
			acc.count += hm.GetSampleCount()
			acc.sum += hm.GetSampleSum()
			for _, b := range hm.GetBucket() {
				if !math.IsInf(b.GetUpperBound(), +1) { // implicit in a const histogram
					acc.buckets[b.GetUpperBound()] += b.GetCumulativeCount()
				}
			}
		}
	}
	for _, key := range order {
		acc := merged[key]
		names := make([]string, 0, len(acc.labels))
		values := make([]string, 0, len(acc.labels))
		for _, l := range acc.labels {
			names = append(names, l.GetName())
			values = append(values, l.GetValue())
		}
		desc := prometheus.NewDesc(csiOperationsSeconds, csiOperationsSecondsHelp, names, nil)
		m, err := prometheus.NewConstHistogram(desc, acc.count, acc.sum, acc.buckets, values...)
		if err != nil {
			m = prometheus.NewInvalidMetric(desc, err)
		}
		ch <- m
	}
}

func labelKey(labels []*dto.LabelPair) string {
	var b strings.Builder
	for _, l := range labels {
		b.WriteString(l.GetName())
		b.WriteByte('=')
		b.WriteString(l.GetValue())
		b.WriteByte(0)
	}
	return b.String()
}
