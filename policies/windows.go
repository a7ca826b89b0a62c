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
// (planWindow); the validating path counts the request in it before the
// policies run (countWindow: one store call that takes the slot and
// answers the window as it was, which the policies read as
// input.context.window), then keeps the slot if the policies admit the
// change and gives it back if they refuse it (settleSlot, giveBack).
// Every call goes through one window.Counter, with the role's
// onStoreError: a window.Guard in the server, the in-process store it
// guards, or qnctl's prefilled one.
//
// Taking first makes a shared window one round trip per request instead
// of two (a read for the policies, then the slot). The slot is held while
// the policies run: a change they refuse counts for that long, so a
// concurrent change of the same window may be refused with 429 in that
// moment although the window would have had room once the slot was given
// back (only ever refusing early, never admitting beyond the limit).

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

// windowCount is what countWindow did, for settleSlot and giveBack.
type windowCount struct {
	answer window.Answer
	// err is the store's failure, already recorded in the verdict.
	err error
	// peeked is set for a dry run, or a change the deny rules refused,
	// which take nothing.
	peeked bool
}

// countWindow counts the request in its window on the validating path,
// before the policies run: a dry run, or a change the deny rules already
// refuse (readOnly, validateDenyFirst), reads the window, any other
// request takes its slot. Either way the window as it was before this
// request goes into facts (input.context.window). done is true when the
// decision is made: the store failed and the role fails closed, or the
// call failed.
func (e *Engine) countWindow(ctx context.Context, p *Plan, v *verdict, facts *Facts, readOnly bool) (c windowCount, d Decision, done bool) {
	if p.Window == nil {
		return c, Decision{}, false
	}
	w := p.Window
	// A caller that went away reads no answer: the change it asked for is
	// not judged further and takes no slot (nor asks the store anything,
	// which would answer a canceled call as a store failure).
	if err := CallerGone(ctx); err != nil {
		return c, callerGoneDecision(p, err), true
	}
	_, span := tracing.Child(ctx, "window")
	var before window.State
	if p.Facts.DryRun || readOnly {
		c.peeked = true
		c.answer, c.err = e.windows.PeekWith(ctx, w.Spec.OnStoreError, w.Key, w.Limit)
		before = c.answer.State
	} else {
		c.answer, c.err = e.windows.TakeWith(ctx, w.Spec.OnStoreError, w.Key, w.Limit, p.Facts.UID)
		before = window.Taken{State: c.answer.State, Receipt: c.answer.Receipt}.Before()
	}
	v.storeAnswered(p, c.answer, c.err)
	if span != nil {
		op := "take"
		if c.peeked {
			op = "peek"
		}
		span.SetAttributes(attribute.String("qn.window.op", op), attribute.String("qn.window.key", string(w.Key)),
			attribute.Int("qn.window.count", c.answer.State.Count), attribute.Int("qn.window.limit", c.answer.State.Limit))
	}
	tracing.End(span, c.err)
	switch {
	case errors.Is(c.err, window.ErrStoreUnavailable):
		if v.refuse(storeRefusal(p, c.err), SourceWindowStore); v.settled() {
			return c, v.decision(), true
		}
	case c.err != nil:
		return c, v.failed(fmt.Errorf("count the change in rate window %s: %w", w.Key, c.err)), true
	default:
		facts.Window = windowState(w.Spec, before)
	}
	return c, Decision{}, false
}

// settleSlot applies the window to a change the policies admit (or do not
// enforce a refusal of): the slot countWindow took is kept, and a full
// window refuses with 429. A dry run is judged against the window as it
// was and takes nothing. done is true when the decision is made.
func (e *Engine) settleSlot(p *Plan, v *verdict, c windowCount) (d Decision, done bool) {
	if p.Window == nil || c.err != nil {
		// A store failure was answered when counting.
		return Decision{}, false
	}
	w := p.Window
	st, admitted := c.answer.State, c.answer.Admitted
	if c.peeked {
		admitted = st.Remaining > 0
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

// giveBack returns the slot countWindow took for a change that is not
// admitted after all: its policies refused it, or could not judge it. It
// runs even when the caller has given up (the slot must not stay taken
// because the apiserver closed the connection), under the store's own
// deadline. A store that cannot answer keeps the change counted until it
// leaves the window: the requester loses one slot for one period, which
// the decision log records; the limit is never exceeded.
func (e *Engine) giveBack(ctx context.Context, p *Plan, v *verdict, c windowCount) {
	if p.Window == nil || !c.answer.Receipt.Recorded() {
		return
	}
	_, span := tracing.Child(ctx, "window")
	start := time.Now()
	err := e.windows.Release(context.WithoutCancel(ctx), p.Window.Key, c.answer.Receipt)
	if v.store != nil {
		v.store.Latency += time.Since(start)
		if err != nil {
			v.store.Error = "the slot of this refused change could not be given back, so it counts until it leaves the window: " + err.Error()
		}
	}
	if span != nil {
		span.SetAttributes(attribute.String("qn.window.op", "release"), attribute.String("qn.window.key", string(p.Window.Key)))
	}
	tracing.End(span, err)
}

// peek reads the requester's window before this request, as policies see
// it in input.context.window, changing nothing (qnctl's explanations).
func (e *Engine) peek(ctx context.Context, p *Plan, v *verdict) (*WindowState, error) {
	w := p.Window
	a, err := e.windows.PeekWith(ctx, w.Spec.OnStoreError, w.Key, w.Limit)
	v.storeAnswered(p, a, err)
	if err != nil {
		return nil, fmt.Errorf("read rate window %s: %w", w.Key, err)
	}
	return windowState(w.Spec, a.State), nil
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
			"rate window store unavailable%s: this change was counted on this replica only (role %q, onStoreError: failOpen)", storeCause(a.StoreErr), p.Role))
	}
}

// storeRefusal is the answer of a role that fails closed while its window
// store cannot count: 503, so clients retry, with a message that says the
// request itself was fine. The store's error goes to the decision log, not
// to the requester, but for a cause the operator must act on (storeCause).
func storeRefusal(p *Plan, err error) Decision {
	d := Deny(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, fmt.Sprintf(
		"rate window store unavailable%s: role %q admits no change it cannot count (onStoreError: failClosed); retry in a moment", storeCause(err), p.Role))
	d.RetryAfter = time.Second
	return d
}

// storeCause names, in an answer, a store failure that lasts until an
// operator acts: a Redis out of memory refuses every change until it gets
// memory or an eviction policy, where a timeout or a reset passes.
func storeCause(err error) string {
	if errors.Is(err, window.ErrStoreOutOfMemory) {
		return " (Redis is out of memory: at its maxmemory, evicting nothing)"
	}
	return ""
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
