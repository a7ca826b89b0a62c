package window

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// OnStoreError says what a role's window does when the store cannot answer
// within its deadline (Redis down, slow or unreachable).
type OnStoreError string

const (
	// FailClosed refuses the change (503): the limit is never exceeded,
	// at the price of refusing the role's changes while the store is down.
	FailClosed OnStoreError = "failClosed"
	// FailOpen admits the change with a warning and counts it in this
	// replica's local window instead: changes go on, and each replica
	// still enforces the limit on its own, so a requester gets at most
	// one limit per replica while the store is down.
	FailOpen OnStoreError = "failOpen"
)

// Valid reports whether m is one of the modes ("" is not).
func (m OnStoreError) Valid() bool { return m == FailClosed || m == FailOpen }

// DefaultStoreTimeout bounds one store call: well under the webhook's own
// timeout (10 s at most, 5 s in the chart), so a store that does not
// answer delays a request by at most this, never into an apiserver timeout.
// A loopback call takes ~30 µs, but on a CPU-starved node a healthy Redis
// answered a handler benchmark in over 150 ms now and then; 250 ms keeps
// such stalls from counting as outages.
const DefaultStoreTimeout = 250 * time.Millisecond

// ErrStoreUnavailable is wrapped by every error the Guard returns because
// the store failed, timed out or is known to be down, so the engine can
// answer 503 rather than 500.
var ErrStoreUnavailable = errors.New("rate window store unavailable")

// Answer is a window call's result and where it came from.
type Answer struct {
	State State
	// Admitted is Take's verdict; always false for Peek.
	Admitted bool
	// Receipt names the change Take recorded, for Release.
	Receipt Receipt
	// Fallback is set when the store failed and the caller asked to fail
	// open: State and Admitted come from this replica's local window.
	Fallback bool
	// StoreErr is why the store did not answer, set with Fallback.
	StoreErr error
	// Latency is the time spent waiting for the store (0 when it was
	// known to be down and not asked).
	Latency time.Duration
}

// GuardOptions configure a Guard.
type GuardOptions struct {
	// Name is the store's kind ("memory", "redis"), for metrics and
	// readiness.
	Name string
	// Address says where the store is, for readiness detail; never a
	// password.
	Address string
	// Timeout bounds each call (default DefaultStoreTimeout).
	Timeout time.Duration
	// Fallback counts changes while the store is down for roles that
	// fail open; nil makes an in-process MemoryStore.
	Fallback *MemoryStore
	// Metrics, when set, records latency, errors and fallbacks.
	Metrics *StoreMetrics
}

// Guard puts a deadline on every call to a Store outside the process (a
// MemoryStore's calls need none), reports its latency and errors, and
// answers from a local MemoryStore for callers that fail open.
// It implements Store itself, failing closed.
//
// After a failure the store is taken to be down: calls then fail at once
// instead of each waiting for the deadline, except one probe at a time, at
// most one per Timeout, that goes to the store; the first probe that
// succeeds brings it back. So a store that hangs costs a request at most
// one deadline, and counting resumes with the first request after the store
// returns.
type Guard struct {
	store   Store
	name    string
	address string
	timeout time.Duration
	local   *MemoryStore
	metrics *StoreMetrics
	// inProcess: the store is a MemoryStore, whose calls wait on nothing
	// a deadline could end (a lock held for microseconds), so they get no
	// deadline: deriving one costs a timer at every call.
	inProcess bool

	mu        sync.Mutex
	down      bool
	downSince time.Time
	probing   bool
	nextProbe time.Time
	lastErr   error
	lastErrAt time.Time
	calls     uint64
	failures  uint64
	fallbacks uint64
	latency   latencyRing
}

var _ Store = (*Guard)(nil)

// NewGuard guards store.
func NewGuard(store Store, opts GuardOptions) *Guard {
	g := &Guard{store: store, name: opts.Name, address: opts.Address, timeout: opts.Timeout, local: opts.Fallback, metrics: opts.Metrics}
	_, g.inProcess = store.(*MemoryStore)
	if g.name == "" {
		g.name = "store"
	}
	if g.timeout <= 0 {
		g.timeout = DefaultStoreTimeout
	}
	if g.local == nil {
		g.local = NewMemoryStore(nil, MemoryOptions{})
	}
	g.metrics.up(g.name, true)
	return g
}

// Timeout is the deadline of each call.
func (g *Guard) Timeout() time.Duration { return g.timeout }

// Take implements Store, failing closed.
func (g *Guard) Take(ctx context.Context, key string, limit Limit, uid string) (Taken, error) {
	a, err := g.TakeWith(ctx, FailClosed, key, limit, uid)
	return Taken{State: a.State, Admitted: a.Admitted, Receipt: a.Receipt}, err
}

// Peek implements Store, failing closed.
func (g *Guard) Peek(ctx context.Context, key string, limit Limit) (State, error) {
	a, err := g.PeekWith(ctx, FailClosed, key, limit)
	return a.State, err
}

// TakeWith is Store.Take under a deadline. When the store fails, onErr
// decides: FailClosed returns an error wrapping ErrStoreUnavailable;
// FailOpen takes the slot in the local window and reports Fallback.
func (g *Guard) TakeWith(ctx context.Context, onErr OnStoreError, key string, limit Limit, uid string) (Answer, error) {
	if err := limit.Validate(); err != nil {
		return Answer{}, err
	}
	var a Answer
	a.Latency, a.StoreErr = g.call(ctx, "take", func(ctx context.Context) error {
		t, err := g.store.Take(ctx, key, limit, uid)
		a.State, a.Admitted, a.Receipt = t.State, t.Admitted, t.Receipt
		return err
	})
	if a.StoreErr == nil {
		return a, nil
	}
	if onErr != FailOpen || ctx.Err() != nil {
		return a, a.StoreErr
	}
	t, err := g.local.Take(ctx, key, limit, uid)
	if err != nil {
		return a, err
	}
	g.fellBack("take")
	a.State, a.Admitted, a.Receipt, a.Fallback = t.State, t.Admitted, t.Receipt, true
	a.Receipt.local = true
	return a, nil
}

// Release implements Store and Counter: it gives r back to the window that
// recorded it, the local one for a change counted while the store was
// down. A store that cannot answer keeps the change counted until it
// leaves the window: the requester loses that slot for one period, and the
// limit is never exceeded. The error wraps ErrStoreUnavailable then.
func (g *Guard) Release(ctx context.Context, key string, r Receipt) error {
	if !r.recorded {
		return nil
	}
	if r.local {
		return g.local.Release(ctx, key, r)
	}
	_, err := g.call(ctx, "release", func(ctx context.Context) error {
		return g.store.Release(ctx, key, r)
	})
	return err
}

// PeekWith is Store.Peek under a deadline, failing as onErr says (see
// TakeWith).
func (g *Guard) PeekWith(ctx context.Context, onErr OnStoreError, key string, limit Limit) (Answer, error) {
	if err := limit.Validate(); err != nil {
		return Answer{}, err
	}
	var a Answer
	a.Latency, a.StoreErr = g.call(ctx, "peek", func(ctx context.Context) error {
		var err error
		a.State, err = g.store.Peek(ctx, key, limit)
		return err
	})
	if a.StoreErr == nil {
		return a, nil
	}
	if onErr != FailOpen || ctx.Err() != nil {
		return a, a.StoreErr
	}
	st, err := g.local.Peek(ctx, key, limit)
	if err != nil {
		return a, err
	}
	g.fellBack("peek")
	a.State, a.Fallback = st, true
	return a, nil
}

// call runs f under the deadline unless the store is down and it is not
// this call's turn to probe. Errors wrap ErrStoreUnavailable.
func (g *Guard) call(ctx context.Context, op string, f func(context.Context) error) (time.Duration, error) {
	if err := g.enter(); err != nil {
		g.metrics.failed(g.name, op, "down")
		return 0, err
	}
	callCtx, cancel := ctx, context.CancelFunc(nil)
	if !g.inProcess {
		callCtx, cancel = context.WithTimeout(ctx, g.timeout)
	}
	start := time.Now()
	err := f(callCtx)
	d := time.Since(start)
	if cancel != nil {
		cancel()
	}
	if err != nil && ctx.Err() != nil {
		// The caller gave up (the apiserver's own timeout, a shutdown):
		// no verdict on the store.
		g.leave(d, nil, true)
		return d, fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
	}
	g.metrics.observe(g.name, op, d)
	if err == nil {
		g.leave(d, nil, false)
		return d, nil
	}
	reason := "error"
	if errors.Is(err, ErrStoreOutOfMemory) {
		reason = "oom"
	}
	if isTimeout(err) {
		reason = "timeout"
		err = fmt.Errorf("no answer within %s: %w", g.timeout, err)
	}
	g.leave(d, err, false)
	g.metrics.failed(g.name, op, reason)
	return d, fmt.Errorf("%w: %s: %w", ErrStoreUnavailable, g.name, err)
}

// enter lets a call through, or says why not while the store is down.
func (g *Guard) enter() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	if !g.down {
		return nil
	}
	now := time.Now()
	if !g.probing && !now.Before(g.nextProbe) {
		g.probing = true
		return nil
	}
	g.failures++
	return fmt.Errorf("%w: %s down since %s (%s ago): %w", ErrStoreUnavailable, g.name,
		g.downSince.UTC().Format(time.RFC3339), now.Sub(g.downSince).Round(time.Millisecond), g.lastErr)
}

// leave records a call's outcome. A call abandoned by its caller says
// nothing about the store, but ends a probe.
func (g *Guard) leave(d time.Duration, err error, abandoned bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	wasProbe := g.probing && g.down
	if wasProbe {
		g.probing = false
	}
	if abandoned {
		return
	}
	g.latency.add(d)
	now := time.Now()
	if err == nil {
		if g.down {
			g.down = false
			g.metrics.up(g.name, true)
		}
		return
	}
	g.failures++
	g.lastErr, g.lastErrAt = err, now
	if !g.down {
		g.down, g.downSince = true, now
		g.metrics.up(g.name, false)
	}
	g.nextProbe = now.Add(g.timeout)
}

func (g *Guard) fellBack(op string) {
	g.mu.Lock()
	g.fallbacks++
	g.mu.Unlock()
	g.metrics.fellBack(g.name, op)
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// GuardStatus is what readiness detail shows about the store.
type GuardStatus struct {
	Store   string
	Address string
	Timeout time.Duration
	// Up is false from a failure until a call succeeds again.
	Up        bool
	DownSince time.Time
	// LastError and LastErrorAt describe the latest failure, if any.
	LastError   string
	LastErrorAt time.Time
	// Calls, Failures and Fallbacks count since start: every call, those
	// the store did not answer, and answers from the local window.
	Calls, Failures, Fallbacks uint64
	// P50 and P99 are over the latest calls that reached the store.
	P50, P99 time.Duration
	Samples  int
}

// Status reports the store's health and latency.
func (g *Guard) Status() GuardStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := GuardStatus{
		Store: g.name, Address: g.address, Timeout: g.timeout, Up: !g.down,
		Calls: g.calls, Failures: g.failures, Fallbacks: g.fallbacks,
	}
	if g.down {
		s.DownSince = g.downSince
	}
	if g.lastErr != nil {
		s.LastError, s.LastErrorAt = g.lastErr.Error(), g.lastErrAt
	}
	s.P50, s.P99, s.Samples = g.latency.percentiles()
	return s
}

// String is one line for /readyz?verbose.
func (s GuardStatus) String() string {
	var b strings.Builder
	b.WriteString(s.Store)
	if s.Address != "" {
		fmt.Fprintf(&b, " at %s", s.Address)
	}
	fmt.Fprintf(&b, " (deadline %s): ", s.Timeout)
	if s.Up {
		b.WriteString("up")
	} else {
		fmt.Fprintf(&b, "DOWN since %s", s.DownSince.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(&b, "; %d calls, %d unanswered, %d answered locally", s.Calls, s.Failures, s.Fallbacks)
	if s.Samples > 0 {
		fmt.Fprintf(&b, "; latency p50 %s p99 %s over the last %d", s.P50.Round(time.Microsecond), s.P99.Round(time.Microsecond), s.Samples)
	}
	if s.LastError != "" {
		fmt.Fprintf(&b, "; last error at %s: %s", s.LastErrorAt.UTC().Format(time.RFC3339), s.LastError)
	}
	return b.String()
}

// latencyRing keeps the latest call latencies for percentiles.
type latencyRing struct {
	d    [1024]time.Duration
	next int
	n    int
}

func (r *latencyRing) add(d time.Duration) {
	r.d[r.next] = d
	r.next = (r.next + 1) % len(r.d)
	r.n = min(r.n+1, len(r.d))
}

func (r *latencyRing) percentiles() (p50, p99 time.Duration, n int) {
	if r.n == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(r.d[:r.n])
	slices.Sort(s)
	return s[(len(s)-1)/2], s[(len(s)-1)*99/100], len(s)
}
