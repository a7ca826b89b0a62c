package policies

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantumnode/qn-admission/internal/tracing"
	"github.com/quantumnode/qn-admission/policies/window"
)

// A role's rate window, as the engine uses it: the plan names the window
// (planWindow), the validating path reads it for the policies
// (readWindow), and a change the policies admit takes a slot (takeSlot).
// Every call goes through one window.Counter, with the role's
// onStoreError: a window.Guard in the server, the in-process store it
// guards, or qnctl's prefilled one.

// PlannedWindow is the window a request counts against.
type PlannedWindow struct {
	// Key identifies the window in the store: role, key kind and a fixed-size
	// hash of the subject, so a key's size never depends on the request.
	Key   string
	Limit window.Limit
	Spec  *Window
}

// planWindow is the window of role w a request with facts c counts
// against.
func planWindow(role string, w *Window, c Facts) *PlannedWindow {
	return &PlannedWindow{Key: windowKey(role, w, c), Limit: window.Limit{Count: w.Limit, Period: w.Period}, Spec: w}
}

// windowKey names whose window a request counts against. The subject is
// hashed: a key has the same size whatever the user or namespace name, and
// names are not kept in memory or in a shared store.
func windowKey(role string, w *Window, c Facts) string {
	switch w.Key {
	case KeyNamespace:
		return role + "/namespace/" + subjectHash(c.Namespace)
	case KeyRole:
		return role + "/role"
	default:
		return role + "/user/" + subjectHash(c.User)
	}
}

func subjectHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
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

// readWindow puts the requester's window before this request into facts
// (input.context.window) on the validating path. done is true when the
// decision is made: the store failed and the role fails closed, or the
// read failed.
func (e *Engine) readWindow(ctx context.Context, p *Plan, v *verdict, facts *Facts) (d Decision, done bool) {
	if p.Window == nil {
		return Decision{}, false
	}
	_, span := tracing.Child(ctx, "window")
	st, err := e.peek(ctx, p, v)
	if span != nil {
		span.SetAttributes(attribute.String("qn.window.op", "peek"), attribute.String("qn.window.key", string(p.Window.Key)))
	}
	tracing.End(span, err)
	switch {
	case errors.Is(err, window.ErrStoreUnavailable):
		if v.refuse(storeRefusal(p), SourceWindowStore); v.settled() {
			return v.decision(), true
		}
	case err != nil:
		return v.failed(err), true
	default:
		facts.Window = st
	}
	return Decision{}, false
}

// peek reads the requester's window before this request, as policies see
// it in input.context.window.
func (e *Engine) peek(ctx context.Context, p *Plan, v *verdict) (*WindowState, error) {
	st, err := e.peekWindow(ctx, p, v)
	if err != nil {
		return nil, fmt.Errorf("read rate window %s: %w", p.Window.Key, err)
	}
	return windowState(p.Window.Spec, st), nil
}

// takeSlot counts a change the policies admit against its window. Only a
// request that will be admitted takes a slot; a dry run is judged against
// the window as it is and takes nothing. done is true when the decision is
// made (a full window, a store that fails closed, an error).
func (e *Engine) takeSlot(ctx context.Context, p *Plan, v *verdict) (d Decision, done bool) {
	if p.Window == nil {
		return Decision{}, false
	}
	_, span := tracing.Child(ctx, "window")
	d, done = e.take(ctx, p, v)
	if span != nil {
		span.SetAttributes(attribute.String("qn.window.op", "take"), attribute.String("qn.window.key", string(p.Window.Key)))
		if v.window != nil {
			span.SetAttributes(attribute.Int("qn.window.count", v.window.Count), attribute.Int("qn.window.limit", v.window.Limit))
		}
	}
	tracing.End(span, nil)
	return d, done
}

func (e *Engine) take(ctx context.Context, p *Plan, v *verdict) (Decision, bool) {
	w := p.Window
	var st window.State
	var err error
	admitted := true
	if p.Facts.DryRun {
		st, err = e.peekWindow(ctx, p, v)
		admitted = err == nil && st.Remaining > 0
	} else {
		var a window.Answer
		a, err = e.windows.TakeWith(ctx, w.Spec.OnStoreError, w.Key, w.Limit, p.Facts.UID)
		v.storeAnswered(p, a, err)
		st, admitted = a.State, a.Admitted
	}
	if errors.Is(err, window.ErrStoreUnavailable) {
		if v.refuse(storeRefusal(p), SourceWindowStore); v.settled() {
			return v.decision(), true
		}
		return Decision{}, false
	}
	if err != nil {
		return v.failed(fmt.Errorf("take a slot of rate window %s: %w", w.Key, err)), true
	}
	v.window = windowState(w.Spec, st)
	e.metrics.windowUsed(p.Role, st.Count, st.Limit)
	if !admitted {
		e.metrics.windowRejected(p.Role)
		d := TooManyRequests(windowMessage(p.Role, w.Spec, p.Facts, st))
		d.RetryAfter = st.RetryAfter
		if v.refuse(d, SourceWindow); v.settled() {
			return v.decision(), true
		}
	}
	return Decision{}, false
}

// peekWindow reads p's window for the policy input or a dry run.
func (e *Engine) peekWindow(ctx context.Context, p *Plan, v *verdict) (window.State, error) {
	w := p.Window
	a, err := e.windows.PeekWith(ctx, w.Spec.OnStoreError, w.Key, w.Limit)
	v.storeAnswered(p, a, err)
	return a.State, err
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

func windowState(w *Window, st window.State) *WindowState {
	return &WindowState{
		Key: string(w.Key), Count: st.Count, Limit: st.Limit,
		PeriodSeconds: w.Period.Seconds(), Remaining: st.Remaining,
	}
}

// windowSubject names whose window a request counts against, for people.
func windowSubject(role string, w *Window, c Facts) string {
	switch w.Key {
	case KeyNamespace:
		return fmt.Sprintf("namespace %q", c.Namespace)
	case KeyRole:
		return fmt.Sprintf("role %q", role)
	default:
		return fmt.Sprintf("user %q", c.User)
	}
}

// windowMessage says who hit which limit and when a slot frees.
func windowMessage(role string, w *Window, c Facts, st window.State) string {
	return fmt.Sprintf("rate window full: role %q allows %d changes per %s per %s; %s has made %d in the last %s; a slot frees in %s",
		role, w.Limit, w.Period, w.Key, windowSubject(role, w, c), st.Count, w.Period, st.RetryAfter.Round(time.Millisecond))
}
