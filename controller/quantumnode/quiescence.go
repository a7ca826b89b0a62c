package quantumnode

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// quiescence holds status writes back until a QuantumNode is quiescent:
// its spec has stayed at one generation for the window, and none of its
// conditions changed within the window. A burst of spec updates then ends
// in one settled status instead of one write per update, and a condition
// that flaps is written at most once per window.
//
// It remembers, per node, when it first saw the current generation and
// since when the node's status has been held back. That is pacing only:
// a new leader starts empty and at worst waits one window more, and the
// status it writes still comes only from the API server's objects. A node
// held back for longer than maxDelay is written anyway, so a node whose
// spec never stops changing still gets a status.
type quiescence struct {
	window   time.Duration
	maxDelay time.Duration

	mu    sync.Mutex
	nodes map[types.NamespacedName]*settling
}

type settling struct {
	generation int64
	seenAt     time.Time
	// heldSince is when the first write was held back; zero when none is.
	heldSince time.Time
	// attempts counts hold-backs at this generation, for the backoff.
	attempts int
}

func newQuiescence(window, maxDelay time.Duration) *quiescence {
	if maxDelay <= 0 {
		maxDelay = 30 * time.Second
	}
	return &quiescence{window: window, maxDelay: maxDelay, nodes: map[types.NamespacedName]*settling{}}
}

// hold says whether the status write for qn must wait, and how long to
// wait before looking again: until the node would be quiescent, at least
// a backoff that doubles with each hold-back, at most maxDelay.
func (q *quiescence) hold(qn *qnv1alpha1.QuantumNode, now time.Time) (time.Duration, bool) {
	if q == nil || q.window <= 0 {
		return 0, false
	}
	key := types.NamespacedName{Namespace: qn.Namespace, Name: qn.Name}
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.nodes[key]
	if s == nil || s.generation != qn.Generation {
		if s == nil {
			s = &settling{}
			q.nodes[key] = s
		}
		// A new change starts its own wait; the backoff is for a node
		// held again and again at one generation (flapping conditions).
		s.generation, s.seenAt, s.attempts = qn.Generation, now, 0
	}
	var wait time.Duration
	if qn.Generation != qn.Status.ObservedGeneration {
		wait = s.seenAt.Add(q.window).Sub(now)
	}
	for _, c := range qn.Status.Conditions {
		if w := c.LastTransitionTime.Add(q.window).Sub(now); w > wait {
			wait = w
		}
	}
	if wait <= 0 || (!s.heldSince.IsZero() && now.Sub(s.heldSince) >= q.maxDelay) {
		s.heldSince, s.attempts = time.Time{}, 0
		return 0, false
	}
	if s.heldSince.IsZero() {
		s.heldSince = now
	}
	backoff := q.window / 8 << min(s.attempts, 16)
	s.attempts++
	return min(max(wait, backoff), q.maxDelay), true
}

// forget drops a deleted node.
func (q *quiescence) forget(key types.NamespacedName) {
	if q == nil {
		return
	}
	q.mu.Lock()
	delete(q.nodes, key)
	q.mu.Unlock()
}
