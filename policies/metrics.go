package policies

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the engine's Prometheus series. A nil *Metrics records
// nothing, so the engine runs without a registry in tests and in qnctl.
type Metrics struct {
	evalDuration     *prometheus.HistogramVec
	evalErrors       *prometheus.CounterVec
	windowRejections *prometheus.CounterVec
	wouldDeny        *prometheus.CounterVec
	windowUsage      *prometheus.HistogramVec
	reloads          *prometheus.CounterVec
	activeRevision   *prometheus.GaugeVec
	reloadFailing    prometheus.Gauge
}

// NewMetrics registers the engine's series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		evalDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "qn_admission_policy_eval_duration_seconds",
			Help:    "Time of one Rego evaluation of a role's policies.",
			Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .1, 1},
		}, []string{"role"}),
		evalErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qn_admission_policy_eval_errors_total",
			Help: "Rego evaluations that failed or timed out, by role.",
		}, []string{"role"}),
		windowRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qn_admission_window_rejections_total",
			Help: "Changes refused because the role's rate window was full, by role.",
		}, []string{"role"}),
		wouldDeny: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qn_admission_would_deny_total",
			Help: "Denials not enforced because the role, or the package or pattern policy, is in warn or dryrun mode, by role and package (a package or pattern policy as roles.yaml lists it, roles.yaml for the role table, window for a full rate window).",
		}, []string{"role", "package"}),
		windowUsage: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "qn_admission_window_usage_ratio",
			Help:    "How full the requester's rate window is after each change it counts (count/limit), by role: how close requesters come to their limit.",
			Buckets: []float64{.1, .25, .5, .75, .9, 1},
		}, []string{"role"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qn_admission_policy_reloads_total",
			Help: "Policy directory reloads, by result (success|failure).",
		}, []string{"result"}),
		activeRevision: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "qn_admission_policy_revision_info",
			Help: "The policy revision being served (value 1), by revision.",
		}, []string{"revision"}),
		reloadFailing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "qn_admission_policy_reload_failing",
			Help: "1 while the policy directory's current content is not being served (the last reload failed, or the directory is deleted or unreadable) and the last good set serves instead; 0 otherwise.",
		}),
	}
	reg.MustRegister(m.evalDuration, m.evalErrors, m.windowRejections, m.wouldDeny, m.windowUsage, m.reloads, m.activeRevision, m.reloadFailing)
	return m
}

func (m *Metrics) evaluated(role string, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.evalDuration.WithLabelValues(role).Observe(d.Seconds())
	if err != nil {
		m.evalErrors.WithLabelValues(role).Inc()
	}
}

func (m *Metrics) windowUsed(role string, count, limit int) {
	if m != nil && limit > 0 {
		m.windowUsage.WithLabelValues(role).Observe(float64(count) / float64(limit))
	}
}

// wouldHaveDenied counts the denials of d that were not enforced, once
// per source.
func (m *Metrics) wouldHaveDenied(role string, d Decision) {
	if m == nil || len(d.WouldDeny) == 0 {
		return
	}
	for i, f := range d.Denials {
		if f.Enforcement == EnforceDeny || slices.ContainsFunc(d.Denials[:i], func(g Finding) bool { return g.Source == f.Source }) {
			continue
		}
		m.wouldDeny.WithLabelValues(role, f.Source).Inc()
	}
}

func (m *Metrics) windowRejected(role string) {
	if m != nil {
		m.windowRejections.WithLabelValues(role).Inc()
	}
}

// Reloaded records a reload attempt and, on success, the active revision.
func (m *Metrics) Reloaded(revision string, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.reloads.WithLabelValues("failure").Inc()
		m.reloadFailing.Set(1)
		return
	}
	m.reloads.WithLabelValues("success").Inc()
	m.reloadFailing.Set(0)
	m.activeRevision.Reset()
	m.activeRevision.WithLabelValues(revision).Set(1)
}

// Recovered records that a directory that could not be read can be read
// again, with the content already served.
func (m *Metrics) Recovered() {
	if m != nil {
		m.reloadFailing.Set(0)
	}
}
