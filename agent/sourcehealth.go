// The health of what a volume's device stands on (an LV's thin pool and
// VG), as a HealthChecker reports it at the resync: a condition, a line
// of status and the source's metrics.

package agent

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/volumed/volumed/internal/readonce"
	"github.com/volumed/volumed/store"
)

// SourceHealth is what a HealthChecker saw of one volume's source.
type SourceHealth struct {
	// Problem is what puts the volume's data at risk; nil when nothing.
	Problem *Problem
	// Detail says what the source is, for the status ("LV vg0/data in
	// VG vg0, thin in pool vg0/pool").
	Detail string
	// Gauges are the source's metrics. Volumes on one VG or pool report
	// the same series: it is exposed once.
	Gauges []Gauge
}

// Gauge is one metric series of a source, e.g.
// volumed_lvm_thinpool_data_percent{volume_group="vg0",thin_pool="pool"}.
type Gauge struct {
	Name, Help string
	Labels     [][2]string // name, value; in this order
	Value      float64
}

func (g Gauge) key() string {
	var b strings.Builder
	b.WriteString(g.Name)
	for _, l := range g.Labels {
		b.WriteString("\x00" + l[0] + "=" + l[1])
	}
	return b.String()
}

// sourceHealth keeps the last health check's details and gauges, so the
// status and a scrape read memory, never run a program. The zero value
// is ready.
type sourceHealth struct {
	mu      sync.Mutex
	details map[string]string
	gauges  map[string]Gauge
}

func (s *sourceHealth) detail(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.details[name]
}

func (s *sourceHealth) replace(details map[string]string, gauges map[string]Gauge) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.details, s.gauges = details, gauges
}

func (s *sourceHealth) all() []Gauge {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Gauge, 0, len(s.gauges))
	for _, g := range s.gauges {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b Gauge) int { return strings.Compare(a.key(), b.key()) })
	return out
}

// checkSources asks each attached volume's HealthChecker, raises or
// clears CondSourceDegraded and keeps the details and gauges. A check
// that fails keeps the condition as it was and the volume's last
// detail; its gauges go (a stale number looks like a live one).
func (a *Agent) checkSources(ctx context.Context, desired map[string]*Desired, recs map[string]*store.Volume) {
	details, gauges := map[string]string{}, map[string]Gauge{}
	for name, rec := range recs {
		d := desired[name]
		if rec.Attachment == nil || !d.Wanted() {
			a.apply(name, CondSourceDegraded, nil, nil)
			continue
		}
		hc, ok := a.cfg.Attachers[rec.Attachment.Kind].(HealthChecker)
		if !ok {
			continue
		}
		h, err := hc.Health(ctx, d, *rec.Attachment)
		a.apply(name, CondSourceDegraded, h.Problem, err)
		if err != nil {
			details[name] = a.sources.detail(name)
			continue
		}
		details[name] = h.Detail
		for _, g := range h.Gauges {
			gauges[g.key()] = g
		}
	}
	a.sources.replace(details, gauges)
}

// checkSourcesNow runs the health checks out of the resync (a disk
// went), in one look at the host, and reports whether any source has
// one: with none, nothing is run.
func (a *Agent) checkSourcesNow(ctx context.Context) bool {
	recs := a.state.Snapshot()
	for _, rec := range recs {
		if rec.Attachment == nil {
			continue
		}
		if _, ok := a.cfg.Attachers[rec.Attachment.Kind].(HealthChecker); ok {
			a.checkSources(readonce.Open(ctx), a.desiredSnapshot(), recs)
			return true
		}
	}
	return false
}

// sourceCollector exposes the gauges of the last health check; its
// series are not known in advance (an unchecked collector).
type sourceCollector struct{ a *Agent }

func (c *sourceCollector) Describe(chan<- *prometheus.Desc) {}

func (c *sourceCollector) Collect(ch chan<- prometheus.Metric) {
	for _, g := range c.a.sources.all() {
		names, values := make([]string, len(g.Labels)), make([]string, len(g.Labels))
		for i, l := range g.Labels {
			names[i], values[i] = l[0], l[1]
		}
		m, err := prometheus.NewConstMetric(prometheus.NewDesc(g.Name, g.Help, names, nil), prometheus.GaugeValue, g.Value, values...)
		if err != nil {
			m = prometheus.NewInvalidMetric(prometheus.NewDesc(g.Name, g.Help, nil, nil), err)
		}
		ch <- m
	}
}
