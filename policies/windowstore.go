package policies

import (
	"context"
	"fmt"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantumnode/qn-admission/policies/window"
)

// guardedWindows is a window store that applies a role's onStoreError
// itself when the store cannot answer (window.Guard): failOpen answers from
// the replica's local window, failClosed returns window.ErrStoreUnavailable.
type guardedWindows interface {
	TakeWith(ctx context.Context, onErr window.OnStoreError, key string, limit window.Limit, uid string) (window.Answer, error)
	PeekWith(ctx context.Context, onErr window.OnStoreError, key string, limit window.Limit) (window.Answer, error)
}

// WindowStoreReport says how the window store served one request, for the
// decision log.
type WindowStoreReport struct {
	// OnStoreError is the role's setting for a store that cannot answer.
	OnStoreError window.OnStoreError
	// Latency is the time spent waiting for the store (the window read for
	// the policies, then the slot).
	Latency time.Duration
	// Error is why the store did not answer, when it did not.
	Error string
	// CountedLocally is set when the role failed open and this replica's
	// own window answered instead.
	CountedLocally bool
}

// peekWindow reads p's window for the policy input or a dry run.
func (e *Engine) peekWindow(ctx context.Context, p *Plan, v *verdict) (window.State, error) {
	w := p.Window
	if e.guarded == nil {
		return e.windows.Peek(ctx, w.Key, w.Limit)
	}
	a, err := e.guarded.PeekWith(ctx, w.Spec.OnStoreError, w.Key, w.Limit)
	v.storeAnswered(p, a, err)
	return a.State, err
}

// takeWindow takes a slot of p's window for an admitted change.
func (e *Engine) takeWindow(ctx context.Context, p *Plan, v *verdict) (window.State, bool, error) {
	w := p.Window
	if e.guarded == nil {
		return e.windows.Take(ctx, w.Key, w.Limit, p.Facts.UID)
	}
	a, err := e.guarded.TakeWith(ctx, w.Spec.OnStoreError, w.Key, w.Limit, p.Facts.UID)
	v.storeAnswered(p, a, err)
	return a.State, a.Admitted, err
}

// storeAnswered records one store call in the verdict's report, and warns
// the requester once when the change was counted on this replica only.
func (v *verdict) storeAnswered(p *Plan, a window.Answer, err error) {
	if v.store == nil {
		v.store = &WindowStoreReport{OnStoreError: p.Window.Spec.OnStoreError}
	}
	v.store.Latency += a.Latency
	if a.StoreErr != nil {
		v.store.Error = a.StoreErr.Error()
	} else if err != nil {
		v.store.Error = err.Error()
	}
	if a.Fallback && !v.store.CountedLocally {
		v.store.CountedLocally = true
		v.warnings = append(v.warnings, fmt.Sprintf(
			"rate window store unavailable: this change was counted on this replica only (role %q, onStoreError: failOpen)", p.Role))
	}
}

// storeRefusal is the answer of a role that fails closed while its window
// store cannot count: 503, so clients retry, with a message that says the
// request itself was fine. The store's error goes to the decision log, not
// to the requester.
func storeRefusal(p *Plan) Decision {
	d := Deny(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, fmt.Sprintf(
		"rate window store unavailable: role %q admits no change it cannot count (onStoreError: failClosed); retry in a moment", p.Role))
	d.RetryAfter = time.Second
	return d
}
