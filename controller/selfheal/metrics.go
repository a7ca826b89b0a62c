package selfheal

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/internal/promreg"
)

// metrics are self-healing's series. The health gauge is counted at
// scrape time from the cache, like the phase gauge; the counters count
// what this replica did (only the leader acts).
type metrics struct {
	remediations *prometheus.CounterVec
	blocked      *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer, reader client.Reader) (*metrics, error) {
	m := &metrics{
		remediations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qn_controller_remediations_total",
			Help: "Remediation steps by action and result: Started when a step acts, then Succeeded, Failed, Abandoned; DryRun for a step a dry run recorded.",
		}, []string{"action", "result"}),
		blocked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "qn_controller_remediation_blocked",
			Help: "1 while more than maxUnhealthy of a QuantumNodeHealthPolicy's nodes are unhealthy, which stops its remediation.",
		}, []string{"policy"}),
	}
	for _, a := range []qnv1alpha1.RemediationAction{qnv1alpha1.ActionRestart, qnv1alpha1.ActionReschedule, qnv1alpha1.ActionRebuild} {
		for _, r := range []string{"Started", string(qnv1alpha1.ResultSucceeded), string(qnv1alpha1.ResultFailed)} {
			m.remediations.WithLabelValues(string(a), r)
		}
	}
	for _, c := range []prometheus.Collector{m.remediations, m.blocked, newHealthCollector(reader)} {
		if err := promreg.RegisterReplacing(reg, c); err != nil {
			return nil, fmt.Errorf("register the self-healing metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) started(s qnv1alpha1.RemediationStatus) {
	if m == nil {
		return
	}
	result := "Started"
	if s.Result == qnv1alpha1.ResultDryRun {
		result = string(qnv1alpha1.ResultDryRun)
	}
	m.remediations.WithLabelValues(string(s.Action), result).Inc()
}

func (m *metrics) concluded(s qnv1alpha1.RemediationStatus) {
	if m != nil && s.Result != qnv1alpha1.ResultDryRun {
		m.remediations.WithLabelValues(string(s.Action), string(s.Result)).Inc()
	}
}

func (m *metrics) setBlocked(policy string, blocked bool) {
	if m == nil {
		return
	}
	v := 0.0
	if blocked {
		v = 1
	}
	m.blocked.WithLabelValues(policy).Set(v)
}

func (m *metrics) forgetPolicy(policy string) {
	if m != nil {
		m.blocked.DeleteLabelValues(policy)
	}
}

// newHealthCollector serves qn_controller_quantumnodes_health{health}.
func newHealthCollector(reader client.Reader) *controller.CacheCounter {
	return controller.NewCacheCounter(reader, "qn_controller_quantumnodes_health",
		"QuantumNodes by status.health (None: no policy judges them), as this replica's cache sees them. Aggregate with max, not sum.",
		"health", []string{string(qnv1alpha1.HealthHealthy), string(qnv1alpha1.HealthDegraded), string(qnv1alpha1.HealthFailed), string(qnv1alpha1.HealthIsolated)},
		func(qn *qnv1alpha1.QuantumNode) string { return string(qn.Status.Health) })
}
