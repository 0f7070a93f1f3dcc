package agent

import (
	"runtime"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/volumed/volumed/agent/api"
)

// Metrics are volumed's Prometheus metrics (design §6). They live in a
// registry of their own, not the global one.
type Metrics struct {
	Registry       *prometheus.Registry
	opDuration     *prometheus.HistogramVec
	opErrors       *prometheus.CounterVec
	reconcile      prometheus.Histogram
	manifestErrors prometheus.Gauge
	commit         prometheus.Histogram
	stateRecovered prometheus.Counter
}

// durationBuckets span 1 ms to 10 min.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

var allPhases = []string{api.PhasePending, api.PhaseAttaching, api.PhaseAttached, api.PhaseFormatting, api.PhaseMounting,
	api.PhaseReady, api.PhaseDegraded, api.PhaseUnmounting, api.PhaseDetaching, api.PhaseError, api.PhaseUncertain, api.PhaseAbsent}

// NewMetrics registers every metric but the per-volume ones, which New
// adds once the agent exists.
func NewMetrics(version string) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "volumed_operation_duration_seconds", Help: "Duration of volume operations.", Buckets: durationBuckets,
		}, []string{"operation", "driver", "result"}),
		opErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "volumed_operation_errors_total", Help: "Failed volume operations.",
		}, []string{"operation", "driver"}),
		reconcile: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "volumed_reconcile_duration_seconds", Help: "Duration of reconcile passes (deciding and dispatching).", Buckets: durationBuckets,
		}),
		manifestErrors: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "volumed_manifest_errors", Help: "Manifest files refused right now.",
		}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "volumed_state_commit_duration_seconds", Help: "Duration of durable state commits (one fsync each).", Buckets: durationBuckets,
		}),
		stateRecovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "volumed_state_file_recoveries_total", Help: "Damaged state files moved aside and rebuilt from the kernel.",
		}),
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "volumed_build_info", Help: "Build information.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(version, runtime.Version()).Set(1)
	reg.MustRegister(m.opDuration, m.opErrors, m.reconcile, m.manifestErrors, m.commit, m.stateRecovered, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *Metrics) observeOp(op, kind string, d time.Duration, err error) {
	if m == nil {
		return
	}
	result := "success"
	if err != nil {
		result = "error"
		m.opErrors.WithLabelValues(op, kind).Inc()
	}
	m.opDuration.WithLabelValues(op, kind, result).Observe(d.Seconds())
}

// StateRecovered counts a damaged state file moved aside.
func (m *Metrics) StateRecovered() {
	if m != nil {
		m.stateRecovered.Inc()
	}
}

// ObserveCommit is the store's OnCommit hook.
func (m *Metrics) ObserveCommit(d time.Duration, _ int) {
	if m != nil {
		m.commit.Observe(d.Seconds())
	}
}

var (
	phaseDesc     = prometheus.NewDesc("volumed_volume_phase", "1 for the volume's current phase.", []string{"volume", "phase"}, nil)
	capacityDesc  = prometheus.NewDesc("volumed_volume_capacity_bytes", "Size of the volume's filesystem.", []string{"volume"}, nil)
	availDesc     = prometheus.NewDesc("volumed_volume_available_bytes", "Bytes available to unprivileged users.", []string{"volume"}, nil)
	usedDesc      = prometheus.NewDesc("volumed_volume_used_bytes", "Bytes used.", []string{"volume"}, nil)
	inodesDesc    = prometheus.NewDesc("volumed_volume_inodes", "Inodes in the filesystem.", []string{"volume"}, nil)
	inodesFree    = prometheus.NewDesc("volumed_volume_inodes_free", "Free inodes.", []string{"volume"}, nil)
	inodesUsedDsc = prometheus.NewDesc("volumed_volume_inodes_used", "Used inodes.", []string{"volume"}, nil)
	conditionDesc = prometheus.NewDesc("volumed_volume_condition", "1 while the volume has a condition of this type (something wrong), else 0.", []string{"volume", "type"}, nil)
	encryptedDesc = prometheus.NewDesc("volumed_volume_encrypted", "1 for a volume encrypted at rest (LUKS2; open or not), else 0.", []string{"volume"}, nil)
)

// volumeCollector reads the agent's cached view at scrape time: phases
// from memory and usage from the statfs cache, never from a mount, so a
// hung filesystem cannot block a scrape.
type volumeCollector struct{ a *Agent }

func deadFilesystem(conds []api.Condition) bool {
	return slices.ContainsFunc(conds, func(c api.Condition) bool {
		return c.Type == CondFilesystemError || c.Type == CondBackingChanged
	})
}

func (c *volumeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{phaseDesc, conditionDesc, encryptedDesc, capacityDesc, availDesc, usedDesc, inodesDesc, inodesFree, inodesUsedDsc} {
		ch <- d
	}
}

func (c *volumeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, v := range c.a.Status() {
		for _, p := range allPhases {
			val := 0.0
			if p == v.Phase {
				val = 1
			}
			ch <- prometheus.MustNewConstMetric(phaseDesc, prometheus.GaugeValue, val, v.Name, p)
		}
		for _, typ := range AllConditionTypes {
			val := 0.0
			if slices.ContainsFunc(v.Conditions, func(c api.Condition) bool { return c.Type == typ }) {
				val = 1
			}
			ch <- prometheus.MustNewConstMetric(conditionDesc, prometheus.GaugeValue, val, v.Name, typ)
		}
		encrypted := 0.0
		if v.Encryption != nil {
			encrypted = 1
		}
		ch <- prometheus.MustNewConstMetric(encryptedDesc, prometheus.GaugeValue, encrypted, v.Name)
		u, ok := c.a.usage.get(v.Name)
		if !ok || deadFilesystem(v.Conditions) {
			// Free space on a filesystem that is shut down, read-only
			// by error or whose image is gone is a claim nobody can use.
			continue
		}
		for d, val := range map[*prometheus.Desc]int64{
			capacityDesc: u.CapacityBytes, availDesc: u.AvailableBytes, usedDesc: u.UsedBytes,
			inodesDesc: u.Inodes, inodesFree: u.InodesFree, inodesUsedDsc: u.InodesUsed,
		} {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(val), v.Name)
		}
	}
}
