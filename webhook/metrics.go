package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the webhook's Prometheus series.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	inFlight *prometheus.GaugeVec
	// abandoned counts reviews not judged because their caller went away.
	abandoned *prometheus.CounterVec
}

// NewMetrics registers the webhook's series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qn_admission_requests_total",
			Help: "Admission requests answered, by webhook (validate|mutate), role, decision (allowed|denied|error: our own failure or an answer from the role's onError, allowed or not) and code.",
		}, []string{"webhook", "role", "decision", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "qn_admission_request_duration_seconds",
			Help: "Time from request received to response written, by webhook.",
			// Up to the API server's longest webhook timeout (10 s), so
			// a p99 against the timeout's budget can be read off.
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"webhook"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "qn_admission_requests_in_flight",
			Help: "Admission requests being handled now, by webhook.",
		}, []string{"webhook"}),
		abandoned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qn_admission_abandoned_reviews_total",
			Help: "Reviews read whole but not judged, because their caller reset or closed the connection first, by webhook and stage (judging: before the policies ran; counting: before the change took a rate-window slot). None is in qn_admission_requests_total.",
		}, []string{"webhook", "stage"}),
	}
	reg.MustRegister(m.requests, m.latency, m.inFlight, m.abandoned)
	return m
}
