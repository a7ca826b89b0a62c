package scaler

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quantumnode/qn-admission/internal/promreg"
)

// metrics are qn-controller's series per HorizontalQNScaler, labelled
// scaler_namespace and scaler (not namespace: a scrape's target labels
// would rename that one to exported_namespace); a deleted scaler's series
// are removed.
type metrics struct {
	// value is labelled metric too: the scaler's qnMetric.name.
	value *prometheus.GaugeVec
	// names is each scaler's metric label on value, so a renamed figure's
	// old series is removed.
	names           sync.Map // types.NamespacedName -> string
	desired         *prometheus.GaugeVec
	maxReplicas     *prometheus.GaugeVec
	metricAvailable *prometheus.GaugeVec
	ableToScale     *prometheus.GaugeVec
	queryErrors     *prometheus.CounterVec
	queryDuration   *prometheus.HistogramVec
	scales          *prometheus.CounterVec
	errors          *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	scaler := []string{"scaler_namespace", "scaler"}
	m := &metrics{
		value: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "qn_scaler_value", Help: "The last value a HorizontalQNScaler's query returned; metric is its qnMetric.name (empty when unnamed).",
		}, append(scaler, "metric")),
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "qn_scaler_desired_replicas", Help: "The replicas a HorizontalQNScaler's rule asks for.",
		}, scaler),
		maxReplicas: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "qn_scaler_max_replicas", Help: "A HorizontalQNScaler's spec.maxReplicas, for alerts on a scaler stuck at its maximum.",
		}, scaler),
		metricAvailable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "qn_scaler_metric_available", Help: "1 when a HorizontalQNScaler's last query returned a value, 0 when it failed.",
		}, scaler),
		ableToScale: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "qn_scaler_able_to_scale", Help: "1 when a HorizontalQNScaler's AbleToScale condition is True, 0 when it is False (no target, no /scale, a conflicting scaler, a failed write).",
		}, scaler),
		queryErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qn_scaler_query_errors_total", Help: "Failed queries of a HorizontalQNScaler (its metric and its abort conditions), by reason.",
		}, append(scaler, "reason")),
		queryDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "qn_scaler_query_duration_seconds", Help: "Time of a HorizontalQNScaler's instant queries, failed ones included.",
			Buckets: []float64{0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10},
		}, scaler),
		scales: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qn_scaler_scales_total", Help: "Writes of a HorizontalQNScaler to its target's /scale, by direction (up, down).",
		}, append(scaler, "direction")),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qn_scaler_reconcile_errors_total", Help: "Polls of a HorizontalQNScaler that failed and are retried with backoff (an API error; a missing target or metric is a condition, not an error).",
		}, scaler),
	}
	for _, c := range []prometheus.Collector{m.value, m.desired, m.maxReplicas, m.metricAvailable, m.ableToScale, m.queryErrors, m.queryDuration, m.scales, m.errors} {
		if err := promreg.RegisterReplacing(reg, c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// setValue sets a scaler's value under its metric name, removing the
// series of the name it had before.
func (m *metrics) setValue(key types.NamespacedName, name string, v float64) {
	if old, ok := m.names.Swap(key, name); ok && old.(string) != name {
		m.value.DeleteLabelValues(key.Namespace, key.Name, old.(string))
	}
	m.value.WithLabelValues(key.Namespace, key.Name, name).Set(v)
}

// setAbleToScale reports a scaler's AbleToScale condition, when it has one.
func (m *metrics) setAbleToScale(key types.NamespacedName, c *metav1.Condition) {
	switch {
	case c == nil:
	case c.Status == metav1.ConditionTrue:
		m.ableToScale.WithLabelValues(key.Namespace, key.Name).Set(1)
	case c.Status == metav1.ConditionFalse:
		m.ableToScale.WithLabelValues(key.Namespace, key.Name).Set(0)
	}
}

// forget removes a deleted scaler's series.
func (m *metrics) forget(key types.NamespacedName) {
	labels := prometheus.Labels{"scaler_namespace": key.Namespace, "scaler": key.Name}
	if name, ok := m.names.LoadAndDelete(key); ok {
		m.value.DeleteLabelValues(key.Namespace, key.Name, name.(string))
	}
	m.desired.Delete(labels)
	m.maxReplicas.Delete(labels)
	m.metricAvailable.Delete(labels)
	m.ableToScale.Delete(labels)
	m.queryErrors.DeletePartialMatch(labels)
	m.queryDuration.Delete(labels)
	m.scales.DeletePartialMatch(labels)
	m.errors.Delete(labels)
}
