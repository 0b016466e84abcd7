package harness

import (
	"fmt"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is what a node's /metrics says: each counter's, gauge's and
// untyped metric's samples added up over their labels, by name.
type Metrics map[string]float64

// Metrics reads nd's /metrics with Prometheus's own text parser.
func (nd *Node) Metrics() (Metrics, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + nd.Addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("node %s: /metrics answered %s", nd.Name, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("node %s: /metrics: %w", nd.Name, err)
	}
	m := Metrics{}
	for name, f := range families {
		for _, s := range f.GetMetric() {
			m[name] += value(s)
		}
	}
	return m, nil
}

// value is a sample's value; 0 for histograms and summaries, whose
// series no one here reads.
func value(s *dto.Metric) float64 {
	switch {
	case s.Counter != nil:
		return s.Counter.GetValue()
	case s.Gauge != nil:
		return s.Gauge.GetValue()
	case s.Untyped != nil:
		return s.Untyped.GetValue()
	}
	return 0
}
