package window

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StoreMetrics are the window store's Prometheus series. A nil
// *StoreMetrics records nothing.
type StoreMetrics struct {
	duration  *prometheus.HistogramVec
	errors    *prometheus.CounterVec
	fallbacks *prometheus.CounterVec
	upGauge   *prometheus.GaugeVec
}

// NewStoreMetrics registers the store's series on reg.
func NewStoreMetrics(reg prometheus.Registerer) *StoreMetrics {
	m := &StoreMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "qn_window_store_duration_seconds",
			Help: "Time of one call to the rate window store (take, peek or release) that reached it, failed calls included.",
			// From a loopback Redis (~100 µs) to the deadline (250 ms
			// by default) and past it.
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"store", "op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qn_window_store_errors_total",
			Help: "Rate window store calls that got no answer, by reason: timeout (no answer within the deadline), oom (Redis at its maxmemory with an eviction policy that evicts nothing refused to record the change), error (refused, reset, a script error), down (not tried: the store failed recently and another call is probing it).",
		}, []string{"store", "op", "reason"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qn_window_store_fallbacks_total",
			Help: "Window calls answered from this replica's local window because the store failed and the role fails open.",
		}, []string{"store", "op"}),
		upGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "qn_window_store_up",
			Help: "1 while the rate window store answers, 0 from a failure until a call succeeds again.",
		}, []string{"store"}),
	}
	reg.MustRegister(m.duration, m.errors, m.fallbacks, m.upGauge)
	return m
}

func (m *StoreMetrics) observe(store, op string, d time.Duration) {
	if m != nil {
		m.duration.WithLabelValues(store, op).Observe(d.Seconds())
	}
}

func (m *StoreMetrics) failed(store, op, reason string) {
	if m != nil {
		m.errors.WithLabelValues(store, op, reason).Inc()
	}
}

func (m *StoreMetrics) fellBack(store, op string) {
	if m != nil {
		m.fallbacks.WithLabelValues(store, op).Inc()
	}
}

func (m *StoreMetrics) up(store string, up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.upGauge.WithLabelValues(store).Set(v)
}

// RegisterMemoryStore exports a MemoryStore's size and evictions, read at
// scrape time, labelled with the store's role: "memory" for the store of
// --window-store memory, "local" for the fallback in which a shared store's
// fail-open roles count.
func RegisterMemoryStore(reg prometheus.Registerer, name string, s *MemoryStore) {
	labels := prometheus.Labels{"store": name}
	reg.MustRegister(&memoryStoreCollector{
		store: s,
		keys: prometheus.NewDesc("qn_window_store_keys",
			"Window keys (requesters, namespaces or roles with a window) an in-process store holds; at most its MaxKeys.", nil, labels),
		evictions: prometheus.NewDesc("qn_window_store_evictions_total",
			"Window keys an in-process store dropped, by reason: idle (nothing left in the window; no decision changes) or active (dropped to stay under MaxKeys while changes still counted: each lets a requester start over, so a non-zero rate means MaxKeys is too small).",
			[]string{"reason"}, labels),
	})
}

type memoryStoreCollector struct {
	store           *MemoryStore
	keys, evictions *prometheus.Desc
}

func (c *memoryStoreCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.keys
	ch <- c.evictions
}

func (c *memoryStoreCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.store.Stats()
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(st.Keys))
	ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(st.IdleEvictions), "idle")
	ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(st.ActiveEvictions), "active")
}
