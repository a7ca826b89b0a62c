package scaler

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// Polls keep their cadence: one that came late (a busy Prometheus) does
// not push the next ones back; a spec change polls at once and starts a
// new cadence.
func TestPollsKeepTheirCadence(t *testing.T) {
	var p pollTimes
	key := types.NamespacedName{Namespace: "shop", Name: "orders"}
	s := &qnv1alpha1.HorizontalQNScaler{}
	s.Generation = 1
	const interval = 15 * time.Second
	if w := p.wait(key, s, t0, interval); w != 0 {
		t.Fatalf("the first poll waits %s", w)
	}
	next := p.mark(key, s, t0, interval)
	if !next.Equal(t0.Add(15 * time.Second)) {
		t.Fatalf("next %s", next)
	}
	if w := p.wait(key, s, t0.Add(5*time.Second), interval); w != 10*time.Second {
		t.Fatalf("an event 5s after the poll waits %s, want 10s", w)
	}
	// Due at 15s, polled at 17s (it waited for Prometheus): the next is due at 30s.
	if next = p.mark(key, s, t0.Add(17*time.Second), interval); !next.Equal(t0.Add(30 * time.Second)) {
		t.Fatalf("after a late poll the next is due at %s, want 30s after t0", next.Sub(t0))
	}
	// Far behind (more than an interval late): a new cadence from now.
	if next = p.mark(key, s, t0.Add(50*time.Second), interval); !next.Equal(t0.Add(65 * time.Second)) {
		t.Fatalf("a poll far behind: next at %s, want 65s after t0", next.Sub(t0))
	}
	// A spec change polls at once and starts a new cadence.
	s.Generation = 2
	if w := p.wait(key, s, t0.Add(51*time.Second), interval); w != 0 {
		t.Fatalf("a spec change waits %s", w)
	}
	if next = p.mark(key, s, t0.Add(51*time.Second), interval); !next.Equal(t0.Add(66 * time.Second)) {
		t.Fatalf("after a spec change: next at %s, want 66s after t0", next.Sub(t0))
	}
}
