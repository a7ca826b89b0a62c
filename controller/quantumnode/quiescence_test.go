package quantumnode

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

func TestQuiescenceHoldsStatusWritesUntilTheNodeIsStill(t *testing.T) {
	const window, maxDelay = 3 * time.Second, 30 * time.Second
	t0 := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	node := func(gen, observed int64, changed ...time.Time) *qnv1alpha1.QuantumNode {
		qn := &qnv1alpha1.QuantumNode{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "n", Generation: gen}}
		qn.Status.ObservedGeneration = observed
		for _, c := range changed {
			qn.Status.Conditions = append(qn.Status.Conditions, metav1.Condition{Type: "X", LastTransitionTime: metav1.NewTime(c)})
		}
		return qn
	}
	type step struct {
		at      time.Duration
		qn      *qnv1alpha1.QuantumNode
		held    bool
		waitMin time.Duration
	}
	for name, steps := range map[string][]step{
		"a new generation waits a window from when it was first seen": {
			{at: 0, qn: node(2, 1), held: true, waitMin: window},
			{at: time.Second, qn: node(2, 1), held: true, waitMin: 2 * time.Second},
			{at: window, qn: node(2, 1)},
		},
		"every new generation of a burst restarts the wait": {
			{at: 0, qn: node(2, 1), held: true},
			{at: 2 * time.Second, qn: node(3, 1), held: true, waitMin: window},
			{at: 4 * time.Second, qn: node(3, 1), held: true, waitMin: time.Second},
			{at: 5 * time.Second, qn: node(3, 1)},
		},
		"a condition that changed within the window holds the next change": {
			{at: 0, qn: node(1, 1, t0.Add(-time.Second)), held: true, waitMin: 2 * time.Second},
			{at: 2 * time.Second, qn: node(1, 1, t0.Add(-time.Second))},
		},
		"a settled node is written at once": {
			{at: 0, qn: node(4, 4, t0.Add(-time.Minute))},
		},
		"a node that never settles is written after maxDelay": {
			{at: 0, qn: node(1, 1, t0), held: true},
			{at: 10 * time.Second, qn: node(1, 1, t0.Add(10*time.Second)), held: true},
			{at: 20 * time.Second, qn: node(1, 1, t0.Add(20*time.Second)), held: true},
			{at: 30 * time.Second, qn: node(1, 1, t0.Add(30*time.Second))},
		},
	} {
		t.Run(name, func(t *testing.T) {
			q := newQuiescence(window, maxDelay)
			for i, s := range steps {
				wait, held := q.hold(s.qn, t0.Add(s.at))
				if held != s.held {
					t.Fatalf("step %d: held=%v, want %v", i, held, s.held)
				}
				if held && (wait < s.waitMin || wait > maxDelay) {
					t.Errorf("step %d: wait %s, want between %s and %s", i, wait, s.waitMin, maxDelay)
				}
			}
		})
	}
	if _, held := newQuiescence(0, maxDelay).hold(node(2, 1), t0); held {
		t.Error("a zero window holds nothing")
	}
}
