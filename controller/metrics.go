package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// KeyNone labels the QuantumNodes a CacheCounter finds no key for (no
// status yet, not audited, not judged); an empty label value would read
// as an absent label.
const KeyNone = "None"

// CacheCounter serves a gauge of QuantumNodes by one key (phase, audit
// verdict, health), counted at scrape time from the informer cache instead
// of counters kept up to date in Reconcile: the numbers are then true by
// construction (deletes, restarts and leader changes included) and no
// state lives in the process. Every key it knows is reported, zero
// included, so a rule like qn_controller_quantumnodes{phase="Failed"} > 0
// has a series to compare against. controller-runtime already exports
// reconcile counts, errors and durations (controller_runtime_reconcile_*);
// these are what it cannot know.
type CacheCounter struct {
	reader client.Reader
	desc   *prometheus.Desc
	// keys are always reported; keyOf gives a node's ("" counts as None).
	keys  []string
	keyOf func(*qnv1alpha1.QuantumNode) string
	// timeout bounds one scrape; a cache that has not synced yet would
	// otherwise hold the scrape until it has.
	timeout time.Duration
}

// NewCacheCounter serves the gauge name{label} of the QuantumNodes reader
// holds, by keyOf, reporting every one of keys (and KeyNone) even at 0.
func NewCacheCounter(reader client.Reader, name, help, label string, keys []string, keyOf func(*qnv1alpha1.QuantumNode) string) *CacheCounter {
	return &CacheCounter{reader: reader, desc: prometheus.NewDesc(name, help, []string{label}, nil),
		keys: append(keys, KeyNone), keyOf: keyOf, timeout: 5 * time.Second}
}

// Describe implements prometheus.Collector.
func (c *CacheCounter) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *CacheCounter) Collect(ch chan<- prometheus.Metric) {
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
			k = KeyNone
		}
		counts[k]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), k)
	}
}
