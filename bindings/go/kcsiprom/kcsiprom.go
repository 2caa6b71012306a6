// Package kcsiprom exposes a kcsi host's metrics to a Prometheus registry: a
// prometheus.Collector over kcsi_host_metrics. It lives in its own module so the kcsi binding
// itself needs nothing but the standard library.
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(kcsiprom.NewCollector(host)) // host is a *kcsi.Host
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
package kcsiprom

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Source is what the collector reads: *kcsi.Host satisfies it.
type Source interface {
	// Metrics returns metrics in the Prometheus text exposition format (version 0.0.4).
	Metrics() (string, error)
}

// Collector reads a kcsi host's metrics on every scrape. It is unchecked (its series
// depend on the drivers and RPCs seen so far), so Describe sends nothing.
type Collector struct {
	src Source
}

// NewCollector returns a collector over src.
func NewCollector(src Source) *Collector { return &Collector{src: src} }

// Describe sends no descriptor: the collector is unchecked.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect reads the host's metrics and sends each sample; a failure to read or parse them
// is sent as an invalid metric, which the registry reports on the scrape.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	families, err := c.families()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(prometheus.NewDesc("kcsi_error", "kcsi metrics unavailable", nil, nil), err)
		return
	}
	for _, mf := range families {
		for _, m := range convert(mf) {
			ch <- m
		}
	}
}

func (c *Collector) families() ([]*dto.MetricFamily, error) {
	text, err := c.src.Metrics()
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	byName, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("kcsi metrics text: %w", err)
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]*dto.MetricFamily, 0, len(names))
	for _, n := range names {
		out = append(out, byName[n])
	}
	return out, nil
}

// convert turns one parsed family into constant metrics, each with its own label names.
func convert(mf *dto.MetricFamily) []prometheus.Metric {
	var out []prometheus.Metric
	for _, m := range mf.GetMetric() {
		names := make([]string, 0, len(m.GetLabel()))
		values := make([]string, 0, len(m.GetLabel()))
		for _, l := range m.GetLabel() {
			names = append(names, l.GetName())
			values = append(values, l.GetValue())
		}
		desc := prometheus.NewDesc(mf.GetName(), mf.GetHelp(), names, nil)
		var metric prometheus.Metric
		var err error
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			metric, err = prometheus.NewConstMetric(desc, prometheus.CounterValue, m.GetCounter().GetValue(), values...)
		case dto.MetricType_GAUGE:
			metric, err = prometheus.NewConstMetric(desc, prometheus.GaugeValue, m.GetGauge().GetValue(), values...)
		case dto.MetricType_HISTOGRAM:
			h := m.GetHistogram()
			buckets := make(map[float64]uint64, len(h.GetBucket()))
			for _, b := range h.GetBucket() {
				if !math.IsInf(b.GetUpperBound(), +1) { // implicit in a const histogram
					buckets[b.GetUpperBound()] = b.GetCumulativeCount()
				}
			}
			metric, err = prometheus.NewConstHistogram(desc, h.GetSampleCount(), h.GetSampleSum(), buckets, values...)
		default:
			metric, err = prometheus.NewConstMetric(desc, prometheus.UntypedValue, m.GetUntyped().GetValue(), values...)
		}
		if err != nil {
			metric = prometheus.NewInvalidMetric(desc, err)
		}
		out = append(out, metric)
	}
	return out
}
