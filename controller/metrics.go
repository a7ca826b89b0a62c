package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/internal/promreg"
)

// phaseNone labels QuantumNodes the controller has not written a status for
// yet; an empty label value would read as an absent label.
const phaseNone = "None"

// phaseCollector serves qn_controller_quantumnodes{phase}. It counts at
// scrape time from the informer cache instead of keeping counters up to
// date in Reconcile: the numbers are then true by construction (deletes,
// restarts and leader changes included) and no state lives in the process.
// controller-runtime already exports reconcile counts, errors and durations
// (controller_runtime_reconcile_*); this is the one thing it cannot know.
type phaseCollector struct {
	reader client.Reader
	desc   *prometheus.Desc
	// timeout bounds one scrape; a cache that has not synced yet would
	// otherwise hold the scrape until it has.
	timeout time.Duration
}

func newPhaseCollector(reader client.Reader) *phaseCollector {
	return &phaseCollector{
		reader: reader,
		desc: prometheus.NewDesc("qn_controller_quantumnodes",
			"QuantumNodes by status.phase (None: no status yet), as this replica's cache sees them. Every replica reports it: aggregate with max, not sum.",
			[]string{"phase"}, nil),
		timeout: 5 * time.Second,
	}
}

// Describe implements prometheus.Collector.
func (c *phaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector. Every phase is reported, zero
// included, so a rule like qn_controller_quantumnodes{phase="Failed"} > 0
// has a series to compare against.
func (c *phaseCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	list := &qnv1alpha1.QuantumNodeList{}
	if err := c.reader.List(ctx, list); err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, fmt.Errorf("list QuantumNodes from the cache: %w", err))
		return
	}
	counts := map[string]int{phaseNone: 0}
	for _, p := range []qnv1alpha1.Phase{qnv1alpha1.PhasePending, qnv1alpha1.PhaseProgressing, qnv1alpha1.PhaseReady, qnv1alpha1.PhaseFailed} {
		counts[string(p)] = 0
	}
	for i := range list.Items {
		phase := string(list.Items[i].Status.Phase)
		if phase == "" {
			phase = phaseNone
		}
		counts[phase]++
	}
	for phase, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), phase)
	}
}

// registerReplacing registers c, replacing a collector of the same metric
// left by an earlier manager in this process (tests run several).
var registerReplacing = promreg.RegisterReplacing
