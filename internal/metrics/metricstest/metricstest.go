// Package metricstest reads metric families in tests: by scrape (Parse)
// or from a registry (Gather), and picks samples by name and labels.
package metricstest

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are metric families by name.
type Families map[string]*dto.MetricFamily

// Parse reads the Prometheus text format, as /metrics serves it.
func Parse(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// Gather gathers reg.
func Gather(t testing.TB, reg *prometheus.Registry) Families {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := Families{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// Lookup returns the value of the first sample of family name whose
// labels include every "k=v" of labels: a counter's, gauge's or
// untyped value, or a histogram's sample count.
func (f Families) Lookup(name string, labels ...string) (float64, error) {
	mf := f[name]
	if mf == nil {
		return 0, fmt.Errorf("no metric %s", name)
	}
	for _, m := range mf.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), nil
		case m.Gauge != nil:
			return m.Gauge.GetValue(), nil
		case m.Untyped != nil:
			return m.Untyped.GetValue(), nil
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), nil
		}
	}
	return 0, fmt.Errorf("no sample of %s with labels %v", name, labels)
}

// Value is Lookup that fails t.
func (f Families) Value(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	v, err := f.Lookup(name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Want is a sample's expected value.
type Want struct {
	Name   string
	Labels []string // "k=v" pairs that pick the sample
	Value  float64
}

// Expect reports every sample that is not as wanted, prefixing what.
func (f Families) Expect(t testing.TB, what string, ws []Want) {
	t.Helper()
	for _, w := range ws {
		if got := f.Value(t, w.Name, w.Labels...); got != w.Value {
			t.Errorf("%s: %s%v = %v, want %v", what, w.Name, w.Labels, got, w.Value)
		}
	}
}

func hasLabels(m *dto.Metric, want []string) bool {
	for _, kv := range want {
		k, v, _ := strings.Cut(kv, "=")
		found := false
		for _, l := range m.GetLabel() {
			found = found || l.GetName() == k && l.GetValue() == v
		}
		if !found {
			return false
		}
	}
	return true
}
