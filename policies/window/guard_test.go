package window

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quantumnode/qn-admission/test/redistest"
)

// funcStore is a Store made of functions, for unit tests of the Guard
// alone; the outage tests below use a real redis-server.
type funcStore struct {
	take func(ctx context.Context) error
}

func (f funcStore) Peek(ctx context.Context, key string, limit Limit) (State, error) {
	return State{Limit: limit.Count, Period: limit.Period, Remaining: limit.Count}, f.take(ctx)
}

func (f funcStore) Take(ctx context.Context, key string, limit Limit, uid string) (Taken, error) {
	return Taken{State: State{Count: 1, Limit: limit.Count, Period: limit.Period, Remaining: limit.Count - 1}, Admitted: true}, f.take(ctx)
}

func (f funcStore) Release(ctx context.Context, key string, r Receipt) error { return f.take(ctx) }

var errRefused = errors.New("connection refused")

func TestGuardTakesTheStoreDownAfterAFailureAndProbesOncePerTimeout(t *testing.T) {
	var calls atomic.Int64
	var failing atomic.Bool
	failing.Store(true)
	reg := prometheus.NewRegistry()
	g := NewGuard(funcStore{take: func(context.Context) error {
		calls.Add(1)
		if failing.Load() {
			return errRefused
		}
		return nil
	}}, GuardOptions{Name: "fake", Timeout: 50 * time.Millisecond, Metrics: NewStoreMetrics(reg)})
	ctx := context.Background()
	l := Limit{Count: 2, Period: time.Minute}

	_, err := g.Take(ctx, "k", l, "u1")
	if !errors.Is(err, ErrStoreUnavailable) || !errors.Is(err, errRefused) || calls.Load() != 1 {
		t.Fatalf("first Take: err=%v after %d store calls, want ErrStoreUnavailable wrapping the refusal", err, calls.Load())
	}
	if st := g.Status(); st.Up || st.LastError == "" {
		t.Fatalf("Status after a failure = %+v, want down with the error", st)
	}
	// Down: the next calls fail at once without reaching the store.
	for range 5 {
		_, err := g.Take(ctx, "k", l, "u2")
		if !errors.Is(err, ErrStoreUnavailable) || !strings.Contains(err.Error(), "down since") {
			t.Fatalf("Take while down: %v, want a fast failure saying since when", err)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("%d store calls while down, want none after the first", calls.Load())
	}
	// After Timeout one probe goes through; it fails, so still down.
	time.Sleep(60 * time.Millisecond)
	g.Take(ctx, "k", l, "u3")
	g.Take(ctx, "k", l, "u4")
	if calls.Load() != 2 {
		t.Fatalf("%d store calls after one timeout, want exactly one probe", calls.Load())
	}
	// The store returns: the next probe brings it back and every call
	// goes through again.
	failing.Store(false)
	time.Sleep(60 * time.Millisecond)
	for i := range 3 {
		if tk, err := g.Take(ctx, "k", l, fmt.Sprint(i)); err != nil || !tk.Admitted {
			t.Fatalf("Take after the store returned: %v %v", tk.Admitted, err)
		}
	}
	if calls.Load() != 5 || !g.Status().Up {
		t.Fatalf("%d store calls, up=%v; want the probe and two more, and up", calls.Load(), g.Status().Up)
	}
	if got := testutil.ToFloat64(g.metrics.errors.WithLabelValues("fake", "take", "error")); got != 2 {
		t.Fatalf("errors{reason=error} = %v, want 2 (the first call and the failed probe)", got)
	}
	if got := testutil.ToFloat64(g.metrics.errors.WithLabelValues("fake", "take", "down")); got != 6 {
		t.Fatalf("errors{reason=down} = %v, want 6", got)
	}
	if got := testutil.ToFloat64(g.metrics.upGauge.WithLabelValues("fake")); got != 1 {
		t.Fatalf("up = %v, want 1", got)
	}
}

func TestGuardAllowsOneProbeAtATime(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int64
	var down atomic.Bool
	g := NewGuard(funcStore{take: func(ctx context.Context) error {
		calls.Add(1)
		if !down.Load() {
			return errRefused
		}
		<-release // the probe hangs until released
		return nil
	}}, GuardOptions{Timeout: 10 * time.Millisecond})
	l := Limit{Count: 100, Period: time.Minute}
	g.Take(context.Background(), "k", l, "") // down
	down.Store(true)
	time.Sleep(15 * time.Millisecond)
	var wg sync.WaitGroup
	var fast atomic.Int64
	started := make(chan struct{})
	wg.Go(func() { close(started); g.Take(context.Background(), "k", l, "") }) // the probe
	<-started
	time.Sleep(5 * time.Millisecond)
	for range 8 {
		wg.Go(func() {
			if _, err := g.Take(context.Background(), "k", l, ""); errors.Is(err, ErrStoreUnavailable) {
				fast.Add(1)
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	if calls.Load() != 2 || fast.Load() != 8 {
		t.Fatalf("%d store calls, %d fast failures; want the first call, one probe, and 8 refused while it ran", calls.Load(), fast.Load())
	}
}

func TestGuardFailsOpenToTheLocalWindow(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := NewGuard(funcStore{take: func(context.Context) error { return errRefused }},
		GuardOptions{Name: "fake", Metrics: NewStoreMetrics(reg)})
	ctx := context.Background()
	l := Limit{Count: 2, Period: time.Minute}
	for i, wantAdmitted := range []bool{true, true, false} {
		a, err := g.TakeWith(ctx, FailOpen, "k", l, fmt.Sprint(i))
		if err != nil || !a.Fallback || !errors.Is(a.StoreErr, ErrStoreUnavailable) || a.Admitted != wantAdmitted {
			t.Fatalf("Take %d failing open: %+v %v; want admitted=%v from the local window", i, a, err, wantAdmitted)
		}
	}
	// The local window is exact on its own: a retry takes no slot.
	if a, _ := g.TakeWith(ctx, FailOpen, "k", l, "0"); !a.Admitted || a.State.Count != 2 {
		t.Fatalf("retry failing open: %+v, want admitted without a new slot", a)
	}
	if a, err := g.PeekWith(ctx, FailOpen, "k", l); err != nil || !a.Fallback || a.State.Count != 2 {
		t.Fatalf("Peek failing open: %+v %v", a, err)
	}
	if _, err := g.PeekWith(ctx, FailClosed, "k", l); !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("Peek failing closed: %v", err)
	}
	if got := testutil.ToFloat64(g.metrics.fallbacks.WithLabelValues("fake", "take")); got != 4 {
		t.Fatalf("fallbacks{op=take} = %v, want 4", got)
	}
	if st := g.Status(); st.Fallbacks != 5 || !strings.Contains(st.String(), "5 answered locally") {
		t.Fatalf("Status = %s", st)
	}
}

func TestGuardLeavesCallerMistakesAndCancellationsAlone(t *testing.T) {
	var calls atomic.Int64
	g := NewGuard(funcStore{take: func(ctx context.Context) error {
		calls.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}}, GuardOptions{Timeout: time.Second})
	if _, err := g.Take(context.Background(), "k", Limit{}, "u"); !errors.Is(err, ErrInvalidLimit) || calls.Load() != 0 {
		t.Fatalf("invalid limit: %v after %d store calls, want ErrInvalidLimit and no call", err, calls.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	a, err := g.TakeWith(ctx, FailOpen, "k", Limit{Count: 1, Period: time.Minute}, "u")
	if err == nil || a.Fallback {
		t.Fatalf("a caller that gave up: %+v %v; want an error and no local slot", a, err)
	}
	if !g.Status().Up {
		t.Fatal("the store was marked down because a caller gave up")
	}
}

// TestGuardThroughRedisOutages kills or pauses a real redis-server while
// requests keep coming: no call waits past the deadline (plus scheduling
// slack), failClosed refuses every change, failOpen counts them in the
// local window, the failures show in metrics and status, and counting
// resumes in Redis once it is back.
func TestGuardThroughRedisOutages(t *testing.T) {
	type outage struct {
		begin, end func(*redistest.Server)
		// lost says whether the shared windows are gone afterwards (no
		// persistence), or kept (a paused server).
		lost bool
	}
	outages := map[string]outage{
		"redis killed and restarted": {begin: (*redistest.Server).Kill, end: (*redistest.Server).Restart, lost: true},
		"redis stalled (SIGSTOP)":    {begin: (*redistest.Server).Pause, end: (*redistest.Server).Resume},
	}
	const timeout = 100 * time.Millisecond
	// slack covers scheduling on a loaded 2-core machine; the deadline
	// itself is what keeps calls short.
	const slack = 150 * time.Millisecond
	l := Limit{Count: 5, Period: time.Minute}
	for name, o := range outages {
		for _, mode := range []OnStoreError{FailClosed, FailOpen} {
			t.Run(name+"/"+string(mode), func(t *testing.T) {
				srv := redistest.Start(t)
				c, err := NewRedisClient(RedisConfig{Address: srv.Addr, Timeout: timeout})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				reg := prometheus.NewRegistry()
				g := NewGuard(NewRedisStore(c, RedisOptions{}), GuardOptions{Name: "redis", Address: srv.Addr, Timeout: timeout, Metrics: NewStoreMetrics(reg)})
				ctx := context.Background()
				key := "rt/user/alice"
				for i := range 3 {
					if a, err := g.TakeWith(ctx, mode, key, l, fmt.Sprint("before-", i)); err != nil || !a.Admitted || a.Fallback {
						t.Fatalf("Take before the outage: %+v %v", a, err)
					}
				}

				o.begin(srv)
				var mu sync.Mutex
				var slowest time.Duration
				admitted, refused := 0, 0
				var wg sync.WaitGroup
				for w := range 4 {
					wg.Go(func() {
						for i := range 10 {
							start := time.Now()
							a, err := g.TakeWith(ctx, mode, key, l, fmt.Sprintf("during-%d-%d", w, i))
							d := time.Since(start)
							mu.Lock()
							slowest = max(slowest, d)
							switch {
							case err != nil && mode == FailClosed && errors.Is(err, ErrStoreUnavailable):
								refused++
							case err == nil && mode == FailOpen && a.Fallback:
								if a.Admitted {
									admitted++
								}
							default:
								t.Errorf("Take during the outage (%s): %+v %v", mode, a, err)
							}
							mu.Unlock()
							time.Sleep(10 * time.Millisecond)
						}
					})
				}
				wg.Wait()
				if slowest > timeout+slack {
					t.Errorf("a call waited %s; the deadline is %s", slowest, timeout)
				}
				switch mode {
				case FailClosed:
					if refused != 40 {
						t.Errorf("%d of 40 changes refused failing closed", refused)
					}
				case FailOpen:
					// The local window started empty: exactly the limit.
					if admitted != l.Count {
						t.Errorf("%d changes admitted from the local window, want %d", admitted, l.Count)
					}
				}
				st := g.Status()
				if st.Up || st.LastError == "" || !strings.Contains(st.String(), "DOWN since") {
					t.Errorf("Status during the outage: %s", st)
				}
				if got := testutil.ToFloat64(g.metrics.upGauge.WithLabelValues("redis")); got != 0 {
					t.Errorf("qn_window_store_up = %v during the outage", got)
				}
				failures := 0.0
				for _, reason := range []string{"timeout", "error", "down"} {
					failures += testutil.ToFloat64(g.metrics.errors.WithLabelValues("redis", "take", reason))
				}
				if failures != 40 {
					t.Errorf("qn_window_store_errors_total = %v, want one per call, 40", failures)
				}
				t.Logf("slowest call %s; %s", slowest, st)

				o.end(srv)
				// Counting resumes in Redis with the first probe after the
				// store is back (at most one timeout later).
				var a Answer
				deadline := time.Now().Add(5 * time.Second)
				for {
					a, err = g.PeekWith(ctx, FailClosed, key, l)
					if err == nil || time.Now().After(deadline) {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				if err != nil || a.Fallback || !g.Status().Up {
					t.Fatalf("Peek after the store returned: %+v %v", a, err)
				}
				held := a.State.Count
				switch {
				case o.lost && held != 0:
					t.Fatalf("a restarted Redis without persistence holds %d changes", held)
				case !o.lost && (held < 3 || held > l.Count):
					// Takes that timed out while it was stalled may run
					// when it resumes: they err toward counting.
					t.Fatalf("the stalled Redis holds %d changes after it resumed, want 3 to %d", held, l.Count)
				}
				for i := range l.Count - held {
					if a, err := g.TakeWith(ctx, mode, key, l, fmt.Sprint("after-", i)); err != nil || !a.Admitted || a.Fallback {
						t.Fatalf("Take %d after the store returned: %+v %v", i, a, err)
					}
				}
				if a, err := g.TakeWith(ctx, mode, key, l, "one-too-many"); err != nil || a.Admitted || a.Fallback || a.State.RetryAfter <= 0 {
					t.Fatalf("the change past the limit after the store returned: %+v %v; want denied by Redis", a, err)
				}
			})
		}
	}
}

// TestGuardGivesASlotBackWhereItWasCounted: a change counted in the local
// window while the store was down is given back there, not to the store.
func TestGuardGivesASlotBackWhereItWasCounted(t *testing.T) {
	var storeCalls atomic.Int64
	g := NewGuard(funcStore{take: func(context.Context) error { storeCalls.Add(1); return errRefused }}, GuardOptions{Name: "fake"})
	ctx := context.Background()
	l := Limit{Count: 1, Period: time.Minute}
	a, err := g.TakeWith(ctx, FailOpen, "k", l, "u1")
	if err != nil || !a.Fallback || !a.Receipt.Recorded() {
		t.Fatalf("Take failing open: %+v %v, want a change recorded in the local window", a, err)
	}
	calls := storeCalls.Load()
	if err := g.Release(ctx, "k", a.Receipt); err != nil {
		t.Fatalf("Release of a local change: %v", err)
	}
	if storeCalls.Load() != calls {
		t.Fatal("a change counted locally was given back to the store")
	}
	if a, _ := g.TakeWith(ctx, FailOpen, "k", l, "u2"); !a.Admitted {
		t.Fatalf("the local window of one is still full after its change was given back: %+v", a)
	}
	if err := g.Release(ctx, "k", Receipt{}); err != nil || storeCalls.Load() != calls {
		t.Fatalf("releasing nothing: %v, %d store calls", err, storeCalls.Load()-calls)
	}
}

// TestGuardReleaseWhileRedisStalls: a slot taken in Redis cannot be given
// back while Redis does not answer. The Release fails within the deadline
// with ErrStoreUnavailable and the change stays counted: the requester
// loses that slot for one period, and the limit is never exceeded.
func TestGuardReleaseWhileRedisStalls(t *testing.T) {
	srv := redistest.Start(t)
	const deadline = 100 * time.Millisecond
	g := NewGuard(NewRedisStore(redisClient(t, srv), RedisOptions{}), GuardOptions{Name: "redis", Timeout: deadline})
	ctx := context.Background()
	l := Limit{Count: 2, Period: time.Minute}
	a, err := g.TakeWith(ctx, FailClosed, "rt/user/alice", l, "refused-by-policy")
	if err != nil || !a.Receipt.Recorded() {
		t.Fatalf("Take: %+v %v", a, err)
	}
	srv.Pause()
	start := time.Now()
	err = g.Release(ctx, "rt/user/alice", a.Receipt)
	took := time.Since(start)
	srv.Resume()
	if !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("Release while Redis stalls: %v, want ErrStoreUnavailable", err)
	}
	if took > deadline+500*time.Millisecond {
		t.Fatalf("Release waited %s; the deadline is %s", took, deadline)
	}
	// The Guard probes the store again once per deadline.
	var st State
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(deadline) {
		a, err := g.PeekWith(ctx, FailClosed, "rt/user/alice", l)
		if err == nil {
			st = a.State
			break
		}
		if time.Now().After(end) {
			t.Fatalf("Redis does not answer after it resumed: %v", err)
		}
	}
	if st.Count != 1 {
		t.Fatalf("after a failed release the window counts %d, want the change still counted (1)", st.Count)
	}
}

// TestGuardPutsADeadlineOnlyOnStoresOutsideTheProcess: a call to another
// store gets the guard's deadline; a call to a MemoryStore gets none (it
// waits on nothing a deadline could end), yet still counts, and a caller
// whose context has ended is still refused by it.
func TestGuardPutsADeadlineOnlyOnStoresOutsideTheProcess(t *testing.T) {
	var sawDeadline bool
	remote := NewGuard(funcStore{take: func(ctx context.Context) error {
		_, sawDeadline = ctx.Deadline()
		return nil
	}}, GuardOptions{Timeout: time.Second})
	if _, err := remote.TakeWith(context.Background(), FailClosed, "k", Limit{Count: 5, Period: time.Minute}, "u1"); err != nil {
		t.Fatal(err)
	}
	if !sawDeadline {
		t.Error("a store outside the process was called without the guard's deadline")
	}
	if remote.inProcess {
		t.Error("a funcStore was taken for an in-process store")
	}

	mem := NewGuard(NewMemoryStore(nil, MemoryOptions{}), GuardOptions{Timeout: time.Second})
	if !mem.inProcess {
		t.Fatal("a MemoryStore was not recognised as in-process")
	}
	limit := Limit{Count: 2, Period: time.Minute}
	for i, want := range []bool{true, true, false} {
		a, err := mem.TakeWith(context.Background(), FailClosed, "k", limit, fmt.Sprintf("u%d", i))
		if err != nil || a.Admitted != want {
			t.Fatalf("take %d in a window of 2: admitted %v, %v; want %v", i+1, a.Admitted, err, want)
		}
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := mem.TakeWith(ended, FailClosed, "other", limit, "u9"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a take for a caller whose context ended: %v, want context.Canceled", err)
	}
}
