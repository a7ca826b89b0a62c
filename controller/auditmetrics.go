package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// auditMetrics are the background audit's series: how long judging one
// node takes, when the last sweep of every node ran and how long it took,
// and (counted at scrape time from the cache, like the phase gauge) how
// many nodes have each PolicyCompliant reason.
type auditMetrics struct {
	duration      prometheus.Histogram
	lastSweep     prometheus.Gauge
	sweepDuration prometheus.Gauge
}

func newAuditMetrics(reg prometheus.Registerer, reader client.Reader) (*auditMetrics, error) {
	m := &auditMetrics{
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "qn_controller_audit_duration_seconds",
			Help:    "Time to judge one stored QuantumNode with the admission policies (every package of its role).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .05, .1, 1},
		}),
		lastSweep: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "qn_controller_audit_last_sweep_timestamp_seconds",
			Help: "When the last sweep (every QuantumNode queued for a new audit: policy change or periodic) finished, Unix time.",
		}),
		sweepDuration: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "qn_controller_audit_sweep_duration_seconds",
			Help: "How long the last sweep took to queue every QuantumNode at the audit rate.",
		}),
	}
	for _, c := range []prometheus.Collector{m.duration, m.lastSweep, m.sweepDuration, newVerdictCollector(reader)} {
		if err := registerReplacing(reg, c); err != nil {
			return nil, fmt.Errorf("register the audit metrics: %w", err)
		}
	}
	return m, nil
}

func (m *auditMetrics) audited(d time.Duration) {
	if m != nil {
		m.duration.Observe(d.Seconds())
	}
}

func (m *auditMetrics) swept(start, end time.Time) {
	if m != nil {
		m.lastSweep.Set(float64(end.UnixNano()) / 1e9)
		m.sweepDuration.Set(end.Sub(start).Seconds())
	}
}

// verdictCollector serves qn_controller_quantumnodes_policy{verdict}: the
// QuantumNodes by the reason of their PolicyCompliant condition (None:
// not audited yet), from the informer cache at scrape time.
type verdictCollector struct {
	reader client.Reader
	desc   *prometheus.Desc
}

func newVerdictCollector(reader client.Reader) *verdictCollector {
	return &verdictCollector{reader: reader, desc: prometheus.NewDesc("qn_controller_quantumnodes_policy",
		"QuantumNodes by the reason of their PolicyCompliant condition (Compliant, PolicyViolation, PolicyError, Exempt; None: not audited yet), as this replica's cache sees them.",
		[]string{"verdict"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *verdictCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector; every verdict is reported, zero
// included.
func (c *verdictCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list := &qnv1alpha1.QuantumNodeList{}
	if err := c.reader.List(ctx, list); err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, fmt.Errorf("list QuantumNodes from the cache: %w", err))
		return
	}
	counts := map[string]int{qnv1alpha1.ReasonCompliant: 0, qnv1alpha1.ReasonPolicyViolation: 0, qnv1alpha1.ReasonPolicyError: 0, qnv1alpha1.ReasonExempt: 0, phaseNone: 0}
	for i := range list.Items {
		verdict := phaseNone
		if cond := findCondition(list.Items[i].Status.Conditions, qnv1alpha1.ConditionPolicyCompliant); cond != nil {
			verdict = cond.Reason
		}
		counts[verdict]++
	}
	for v, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), v)
	}
}
