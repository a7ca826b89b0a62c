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

// cacheCounter serves a gauge of QuantumNodes by one key (phase, audit
// verdict, health), counted at scrape time from the informer cache instead
// of counters kept up to date in Reconcile: the numbers are then true by
// construction (deletes, restarts and leader changes included) and no
// state lives in the process. Every key it knows is reported, zero
// included, so a rule like qn_controller_quantumnodes{phase="Failed"} > 0
// has a series to compare against. controller-runtime already exports
// reconcile counts, errors and durations (controller_runtime_reconcile_*);
// these are what it cannot know.
type cacheCounter struct {
	reader client.Reader
	desc   *prometheus.Desc
	// keys are always reported; keyOf gives a node's ("" counts as None).
	keys  []string
	keyOf func(*qnv1alpha1.QuantumNode) string
	// timeout bounds one scrape; a cache that has not synced yet would
	// otherwise hold the scrape until it has.
	timeout time.Duration
}

func newCacheCounter(reader client.Reader, name, help, label string, keys []string, keyOf func(*qnv1alpha1.QuantumNode) string) *cacheCounter {
	return &cacheCounter{reader: reader, desc: prometheus.NewDesc(name, help, []string{label}, nil),
		keys: append(keys, phaseNone), keyOf: keyOf, timeout: 5 * time.Second}
}

// newPhaseCollector serves qn_controller_quantumnodes{phase}.
func newPhaseCollector(reader client.Reader) *cacheCounter {
	return newCacheCounter(reader, "qn_controller_quantumnodes",
		"QuantumNodes by status.phase (None: no status yet), as this replica's cache sees them. Every replica reports it: aggregate with max, not sum.",
		"phase", []string{string(qnv1alpha1.PhasePending), string(qnv1alpha1.PhaseProgressing), string(qnv1alpha1.PhaseReady), string(qnv1alpha1.PhaseFailed)},
		func(qn *qnv1alpha1.QuantumNode) string { return string(qn.Status.Phase) })
}

// Describe implements prometheus.Collector.
func (c *cacheCounter) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *cacheCounter) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	list := &qnv1alpha1.QuantumNodeList{}
	if err := c.reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, fmt.Errorf("list QuantumNodes from the cache: %w", err))
		return
	}
	counts := make(map[string]int, len(c.keys))
	for _, k := range c.keys {
		counts[k] = 0
	}
	for i := range list.Items {
		k := c.keyOf(&list.Items[i])
		if k == "" {
			k = phaseNone
		}
		counts[k]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), k)
	}
}

// registerReplacing registers c, replacing a collector of the same metric
// left by an earlier manager in this process (tests run several).
var registerReplacing = promreg.RegisterReplacing
