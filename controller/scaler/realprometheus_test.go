package scaler

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	testharness "github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/promtest"
)

// The series the scenarios set on the exporter.
const (
	queueMetric      = "qn_test_queue_depth"
	errorRatioMetric = "qn_test_error_ratio"
)

// shared is one Prometheus scraping one exporter for the whole package.
var shared struct {
	once sync.Once
	err  error
	prom *promtest.Server
	exp  *promtest.Exporter
	dir  string
}

// sharedPrometheus returns the package's Prometheus and its exporter,
// starting them on first use.
func sharedPrometheus(t testing.TB) (*promtest.Server, *promtest.Exporter) {
	t.Helper()
	bin := promtest.Binary(t)
	shared.once.Do(func() {
		shared.exp = promtest.NewExporter()
		if shared.dir, shared.err = os.MkdirTemp("", "qn-scaler-prometheus-"); shared.err != nil {
			return
		}
		shared.prom, shared.err = promtest.Start(bin, promtest.Options{Dir: shared.dir, Targets: []string{shared.exp.Target()}})
	})
	if shared.err != nil {
		t.Fatalf("start the shared Prometheus: %v", shared.err)
	}
	return shared.prom, shared.exp
}

// stopShared ends what sharedPrometheus started (from TestMain).
func stopShared() {
	shared.prom.Stop()
	if shared.exp != nil {
		shared.exp.Close()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
}

// waitForValue waits until query returns want through the product's client.
func waitForValue(t testing.TB, p *Prometheus, server Server, query string, want float64) {
	t.Helper()
	testharness.WaitFor(t, 30*time.Second, fmt.Sprintf("%s on %s is %v", query, server.URL, want), func() error {
		if r := p.Query(context.Background(), server, query); r.Err != nil || r.Value != want {
			return fmt.Errorf("last reading %+v", r)
		}
		return nil
	})
}
