package audit

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/internal/promreg"
)

// metrics are the background audit's series: how long judging one
// node takes, when the last sweep of every node ran and how long it took,
// and (counted at scrape time from the cache, like the phase gauge) how
// many nodes have each PolicyCompliant reason.
type metrics struct {
	duration      prometheus.Histogram
	lastSweep     prometheus.Gauge
	sweepDuration prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, reader client.Reader) (*metrics, error) {
	m := &metrics{
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
		if err := promreg.RegisterReplacing(reg, c); err != nil {
			return nil, fmt.Errorf("register the audit metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) audited(d time.Duration) {
	if m != nil {
		m.duration.Observe(d.Seconds())
	}
}

func (m *metrics) swept(start, end time.Time) {
	if m != nil {
		m.lastSweep.Set(float64(end.UnixNano()) / 1e9)
		m.sweepDuration.Set(end.Sub(start).Seconds())
	}
}

// newVerdictCollector serves qn_controller_quantumnodes_policy{verdict}:
// the QuantumNodes by the reason of their PolicyCompliant condition (None:
// not audited yet).
func newVerdictCollector(reader client.Reader) *controller.CacheCounter {
	return controller.NewCacheCounter(reader, "qn_controller_quantumnodes_policy",
		"QuantumNodes by the reason of their PolicyCompliant condition (Compliant, PolicyViolation, PolicyError, Exempt; None: not audited yet), as this replica's cache sees them.",
		"verdict", []string{qnv1alpha1.ReasonCompliant, qnv1alpha1.ReasonPolicyViolation, qnv1alpha1.ReasonPolicyError, qnv1alpha1.ReasonExempt},
		func(qn *qnv1alpha1.QuantumNode) string {
			if cond := meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionPolicyCompliant); cond != nil {
				return cond.Reason
			}
			return ""
		})
}
