// Package window limits how many changes a requester may make inside a
// sliding time window, so that one role's requesters cannot change
// QuantumNodes faster than the role allows (e.g. 120 changes per 60 s).
//
// The window is a sliding log over (now-Period, now]: a change recorded at t0
// counts while now < t0+Period and has left at exactly now == t0+Period, so
// one slot frees exactly when the oldest change leaves. The Count-th change
// inside a window is admitted; the next one in the same window is denied
// until a slot frees. A log, unlike a token bucket or fixed buckets, gives
// the exact answer a person expects from "at most 120 per minute" and an
// exact "retry in" time for the 429 message.
//
// The package knows nothing of roles or HTTP: the policy engine builds the
// key (user, namespace or role) and the Limit from the role table, evaluates
// policies first and only then takes a slot.
package window

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrInvalidLimit is wrapped by every error about a Limit that cannot be
// enforced, so a caller can tell a role-table mistake from a store failure.
var ErrInvalidLimit = errors.New("invalid rate window")

// Limit is a role's window: at most Count changes per Period.
type Limit struct {
	Count  int
	Period time.Duration
}

// Validate says why l cannot be enforced. A window of no changes or of no
// time has no sensible meaning (deny all? admit all?), so both are errors
// rather than a silent guess.
func (l Limit) Validate() error {
	if l.Count <= 0 {
		return fmt.Errorf("%w: the limit must allow at least 1 change, got %d", ErrInvalidLimit, l.Count)
	}
	if l.Period <= 0 {
		return fmt.Errorf("%w: the period must be longer than 0, got %s", ErrInvalidLimit, l.Period)
	}
	return nil
}

// String reads like the role table ("120 per 1m0s"), for messages and logs.
func (l Limit) String() string {
	return fmt.Sprintf("%d per %s", l.Count, l.Period)
}

// State is a key's window as seen at one instant. It describes the window,
// not the decision: a retried request admitted into a full window still sees
// Remaining 0 and a RetryAfter.
type State struct {
	// Count is the number of changes inside the window (now-Period, now].
	// It never exceeds Limit: when a Limit's Count was lowered, only the
	// newest Limit changes are kept (see Store).
	Count  int
	Limit  int
	Period time.Duration
	// Remaining is Limit - Count, never negative.
	Remaining int
	// RetryAfter is, when the window is full, the time until its oldest
	// change leaves and a slot frees; it is then always > 0. It is 0 when
	// the window has room.
	RetryAfter time.Duration
}

// Full reports whether the next new change would be denied.
func (s State) Full() bool { return s.Remaining == 0 }

// Store keeps the windows of all keys. Implementations must make Take an
// atomic check-and-add per key, so that concurrent requests can never admit
// more than Limit.Count changes in one window.
//
// The Limit is passed on every call rather than fixed per key, because a
// policy reload may change it at any time; a store must work with the state
// recorded under the old Limit: a lower Count admits fewer changes until
// enough entries age out, a shorter Period lets older entries leave at once,
// a longer Period counts the entries still held. A store keeps at most
// Count entries per key, so after Count is lowered and raised again, the
// entries trimmed in between are not restored.
type Store interface {
	// Peek reports key's window now without taking a slot and without
	// changing anything; dry-run requests use it.
	Peek(ctx context.Context, key string, limit Limit) (State, error)
	// Take atomically checks and adds: if the window has room, it records
	// one change at now and answers Admitted with the state after adding
	// and the Receipt of the change. If uid already took a slot for this
	// key inside the current window, it is admitted again without taking
	// another slot (and without a Receipt), because the apiserver reuses
	// the request uid when it retries a webhook call; an empty uid is never
	// a retry. When the window is full, Admitted is false and
	// State.RetryAfter says when a slot frees.
	Take(ctx context.Context, key string, limit Limit, uid string) (Taken, error)
	// Release gives back the slot of a change Take recorded, when the
	// request it was taken for is not admitted after all (its policies
	// refused it). It removes that change only if nothing else relies on
	// it: once a retry of the same uid was admitted on the strength of the
	// change, Release keeps it, so an admitted change is always counted. A
	// zero Receipt, or a change that has left the window, releases nothing.
	Release(ctx context.Context, key string, r Receipt) error
}

// Taken is what Take answers.
type Taken struct {
	// State is the window after the call.
	State State
	// Admitted is true when the change may go ahead: a slot was taken,
	// or the uid's change is already counted.
	Admitted bool
	// Receipt names the change this call recorded; it is zero when the
	// call recorded none (a full window, a retried uid).
	Receipt Receipt
}

// Before is the window as it was before this call: what the policies see
// as input.context.window. A call that recorded nothing changed nothing.
func (t Taken) Before() State {
	st := t.State
	if t.Receipt.Recorded() {
		// The window had room for this change, so it was not full.
		st.Count--
		st.Remaining++
		st.RetryAfter = 0
	}
	return st
}

// Receipt names one change a store recorded, so that Release can give its
// slot back. Only the store that issued it can read it.
type Receipt struct {
	recorded bool
	// at is when the change was recorded, in the store's own time (µs
	// for Redis, ns since the store's base for memory).
	at int64
	// member is the change's sorted-set member in Redis; uidHash its
	// hash in the MemoryStore.
	member  string
	uidHash uint64
	// local is set by a Guard when its local window recorded the change
	// (a failOpen role while the store was down).
	local bool
}

// Recorded reports whether r names a change.
func (r Receipt) Recorded() bool { return r.recorded }

// Counter is what the policy engine asks of rate windows: Take and Peek
// with the role's onStoreError. A Guard applies it to a store that can
// fail (Redis, or any Store under a deadline); a MemoryStore cannot fail,
// so it answers itself and onErr never applies.
type Counter interface {
	// TakeWith is Store.Take, failing as onErr says when the store cannot
	// answer (see Guard.TakeWith).
	TakeWith(ctx context.Context, onErr OnStoreError, key string, limit Limit, uid string) (Answer, error)
	// PeekWith is Store.Peek, failing as onErr says.
	PeekWith(ctx context.Context, onErr OnStoreError, key string, limit Limit) (Answer, error)
	// Release is Store.Release for the Receipt of an Answer, given back to
	// the window that recorded it.
	Release(ctx context.Context, key string, r Receipt) error
}

// Remote reports whether c's calls may leave the process: a Guard whose
// store is not the in-process MemoryStore, or a View of such a Counter. The
// engine saves calls where they cost a round trip (policies' deny-first
// validation) and keeps the simpler order where they cost a map lookup.
func Remote(c Counter) bool {
	r, ok := c.(interface{ remote() bool })
	return ok && r.remote()
}

func (g *Guard) remote() bool {
	_, inProcess := g.store.(*MemoryStore)
	return !inProcess
}

func (v *View) remote() bool { return Remote(v.counter) }

var (
	_ Counter = (*Guard)(nil)
	_ Counter = (*MemoryStore)(nil)
)
