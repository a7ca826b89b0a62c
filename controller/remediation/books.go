package remediation

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller/health"
)

// Census counts one policy's nodes by their stored health.
type Census struct {
	Selected, Healthy, Unhealthy, Isolated, InFlight int
	At                                               time.Time
}

// Books keep what the guards need across reconciles: each policy's census
// (recomputed from the informer cache at most once per MaxAge, however many
// nodes ask) and the steps in flight, which a reconcile reserves before it
// writes a step's record, so two reconciles at once cannot both take the
// last slot. Books live on the leader; a new leader seeds the steps in
// flight from the stored status.
type Books struct {
	// Reader is the manager's cache.
	Reader client.Reader
	// Clock dates the census; default the real clock.
	Clock clock.PassiveClock
	// MaxAge bounds how stale a census may be; default 1s.
	MaxAge time.Duration

	mu       sync.Mutex
	census   map[string]Census
	inFlight map[types.NamespacedName]string // node → policy
	seeded   bool
}

// NewBooks returns empty books reading from r.
func NewBooks(r client.Reader) *Books {
	return &Books{Reader: r, census: map[string]Census{}, inFlight: map[types.NamespacedName]string{}}
}

func (b *Books) now() time.Time {
	if b.Clock == nil {
		return time.Now()
	}
	return b.Clock.Now()
}

// Census returns the census of policy, fresh within MaxAge. policies are
// every policy, compiled: a node belongs to the first that selects it.
func (b *Books) Census(ctx context.Context, policy string, policies []health.Selector) (Census, error) {
	maxAge := b.MaxAge
	if maxAge <= 0 {
		maxAge = time.Second
	}
	b.mu.Lock()
	c, ok := b.census[policy]
	b.mu.Unlock()
	if ok && b.now().Sub(c.At) < maxAge {
		return c, nil
	}
	all, err := b.Count(ctx, policies)
	if err != nil {
		return Census{}, err
	}
	return all[policy], nil
}

// Cached is the last census of policy, however old.
func (b *Books) Cached(policy string) (Census, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.census[policy]
	return c, ok
}

// Count takes the census of every policy in one pass over the cached
// QuantumNodes, and keeps it.
func (b *Books) Count(ctx context.Context, policies []health.Selector) (map[string]Census, error) {
	list := &qnv1alpha1.QuantumNodeList{}
	// Read only: no copy of every node per census.
	if err := b.Reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list QuantumNodes for the census: %w", err)
	}
	now := b.now()
	out := make(map[string]Census, len(policies))
	for _, p := range policies {
		out[p.Policy.Name] = Census{At: now}
	}
	for i := range list.Items {
		qn := &list.Items[i]
		p := health.PolicyFor(qn, policies)
		if p == nil {
			continue
		}
		c := out[p.Name]
		c.Selected++
		switch qn.Status.Health {
		case qnv1alpha1.HealthHealthy, "":
			// Not judged yet counts as healthy: a node appears Healthy
			// or not within one reconcile of its policy.
			c.Healthy++
		case qnv1alpha1.HealthIsolated:
			c.Isolated++
			c.Unhealthy++
		default:
			c.Unhealthy++
		}
		if r := qn.Status.Remediation; r != nil && r.FinishedAt == nil && r.Result == qnv1alpha1.ResultInProgress {
			c.InFlight++
		}
		out[p.Name] = c
	}
	b.mu.Lock()
	for name, c := range out {
		b.census[name] = c
	}
	b.mu.Unlock()
	return out, nil
}

// Reserve takes one of policy's maxInFlight slots for key (policies are
// every policy, compiled, to seed the books on first use). It answers
// false, with the number running, when none is free. A node that holds a
// slot keeps it (its step is running).
func (b *Books) Reserve(ctx context.Context, policy string, key types.NamespacedName, maxInFlight int, policies []health.Selector) (bool, int, error) {
	if err := b.seed(ctx, policies); err != nil {
		return false, 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inFlight[key] == policy {
		return true, b.runningLocked(policy), nil
	}
	running := b.runningLocked(policy)
	if running >= maxInFlight {
		return false, running, nil
	}
	b.inFlight[key] = policy
	return true, running + 1, nil
}

// Release frees key's slot: its step ended, or the node is gone.
func (b *Books) Release(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.inFlight, key)
}

// Running is how many steps of policy are in flight.
func (b *Books) Running(policy string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.runningLocked(policy)
}

func (b *Books) runningLocked(policy string) int {
	n := 0
	for _, p := range b.inFlight {
		if p == policy {
			n++
		}
	}
	return n
}

// seed fills the steps in flight from the stored status, once: after a
// restart or a change of leader the running steps still hold their slots.
func (b *Books) seed(ctx context.Context, policies []health.Selector) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seeded {
		return nil
	}
	list := &qnv1alpha1.QuantumNodeList{}
	if err := b.Reader.List(ctx, list, client.MatchingFields{InFlightIndex: "true"}); err != nil {
		return fmt.Errorf("list the QuantumNodes with a remediation in flight: %w", err)
	}
	for i := range list.Items {
		qn := &list.Items[i]
		if p := health.PolicyFor(qn, policies); p != nil {
			b.inFlight[types.NamespacedName{Namespace: qn.Namespace, Name: qn.Name}] = p.Name
		}
	}
	b.seeded = true
	return nil
}

// InFlightIndex is the field index of QuantumNodes whose remediation step
// is in flight ("true"), so seeding reads only those.
const InFlightIndex = "qn.dev/remediationInFlight"

// InFlightOf is the index function of InFlightIndex.
func InFlightOf(obj client.Object) []string {
	qn, ok := obj.(*qnv1alpha1.QuantumNode)
	if !ok || qn.Status.Remediation == nil {
		return nil
	}
	if r := qn.Status.Remediation; r.FinishedAt == nil && r.Result == qnv1alpha1.ResultInProgress {
		return []string{"true"}
	}
	return nil
}
