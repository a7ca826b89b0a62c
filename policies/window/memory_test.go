package window

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// realtime is the bundled realtime role's window.
var realtime = Limit{Count: 120, Period: 60 * time.Second}

func newStore(opts MemoryOptions) (*MemoryStore, *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(t0)
	return NewMemoryStore(clk, opts), clk
}

func take(t testing.TB, s Store, key string, l Limit, uid string) (State, bool) {
	t.Helper()
	tk, err := s.Take(context.Background(), key, l, uid)
	if err != nil {
		t.Fatalf("Take(%q, %v, %q): %v", key, l, uid, err)
	}
	return tk.State, tk.Admitted
}

func peek(t testing.TB, s Store, key string, l Limit) State {
	t.Helper()
	st, err := s.Peek(context.Background(), key, l)
	if err != nil {
		t.Fatalf("Peek(%q, %v): %v", key, l, err)
	}
	return st
}

func full(l Limit, retryAfter time.Duration) State {
	return State{Count: l.Count, Limit: l.Count, Period: l.Period, RetryAfter: retryAfter}
}

func room(l Limit, count int) State {
	return State{Count: count, Limit: l.Count, Period: l.Period, Remaining: l.Count - count}
}

func TestRealtimeWindowFreesOneSlotWhenTheOldestChangeLeaves(t *testing.T) {
	forEachStore(t, func(t *testing.T, sut storeUnderTest) {
		s, clk := sut.new(t)
		const spacing = 250 * time.Millisecond
		at := func(d time.Duration) { clk.SetTime(t0.Add(d)) }
		attempt := 0
		next := func() (State, bool) {
			attempt++
			return take(t, s, "alice", realtime, fmt.Sprintf("req-%d", attempt))
		}

		// 120 changes, one every 250 ms: the last lands at 29.75 s.
		for i := range 120 {
			at(time.Duration(i) * spacing)
			st, ok := next()
			want := room(realtime, i+1)
			if i == 119 {
				want = full(realtime, 60*time.Second-119*spacing)
			}
			if !ok || st != want {
				t.Fatalf("change %d: admitted=%v %+v, want admitted %+v", i+1, ok, st, want)
			}
		}

		at(30 * time.Second)
		if st, ok := next(); ok || st != full(realtime, 30*time.Second) {
			t.Fatalf("121st change: admitted=%v %+v, want denied, retry after the first change leaves at 60 s", ok, st)
		}
		at(60*time.Second - sut.tick)
		if st, ok := next(); ok || st != full(realtime, sut.tick) {
			t.Fatalf("one nanosecond before the first change leaves: admitted=%v %+v, want denied", ok, st)
		}

		// Exactly t0+60s: the first change has left, one slot is free.
		at(60 * time.Second)
		if st := peek(t, s, "alice", realtime); st != room(realtime, 119) {
			t.Fatalf("at t0+60s Peek = %+v, want one slot free", st)
		}
		if st, ok := next(); !ok || st != full(realtime, spacing) {
			t.Fatalf("122nd attempt at t0+60s: admitted=%v %+v, want admitted into the freed slot", ok, st)
		}
		if st, ok := next(); ok || st != full(realtime, spacing) {
			t.Fatalf("the attempt after it: admitted=%v %+v, want denied until the second change leaves", ok, st)
		}

		// The remaining changes leave one by one, each freeing exactly one slot.
		for i := 1; i < 120; i++ {
			leaves := 60*time.Second + time.Duration(i)*spacing
			at(leaves - sut.tick)
			if st, ok := next(); ok || st != full(realtime, sut.tick) {
				t.Fatalf("just before change %d leaves: admitted=%v %+v, want denied", i+1, ok, st)
			}
			at(leaves)
			// The oldest left is the next original change, until none is
			// left and the oldest is the one admitted at t0+60s.
			retry := spacing
			if i == 119 {
				retry = 60*time.Second - 119*spacing
			}
			if st, ok := next(); !ok || st != full(realtime, retry) {
				t.Fatalf("as change %d leaves: admitted=%v %+v, want admitted", i+1, ok, st)
			}
			if _, ok := next(); ok {
				t.Fatalf("as change %d leaves: a second change was admitted into one freed slot", i+1)
			}
		}
	})
}

// step is one call in a scenario: set the clock to t0+at, then Take (or
// Peek, or Release) and compare. Scenarios read as a timeline.
type step struct {
	at    time.Duration
	key   string // "alice" when empty
	limit Limit  // the scenario's limit when zero
	uid   string // a fresh uid when empty; "-" for the empty uid
	peek  bool
	// release gives back the Receipt of the latest Take of uid under key
	// (the zero Receipt when that Take recorded nothing); want is then
	// the state a Peek sees after it.
	release bool
	// n Takes are made (1 when 0); each must be admitted as admitted says,
	// and want is the state after the last.
	n        int
	admitted bool
	want     State
}

type scenario struct {
	limit Limit
	steps []step
	// after, when set, inspects the store at the end.
	after func(t *testing.T, s Store)
}

// on runs the scenario against a fresh store of sut's kind.
func (sc scenario) on(sut storeUnderTest) func(t *testing.T) {
	return func(t *testing.T) { sc.runOn(t, sut) }
}

func (sc scenario) runOn(t *testing.T, sut storeUnderTest) {
	t.Helper()
	s, clk := sut.new(t)
	fresh := 0
	receipts := map[[2]string]Receipt{}
	for i, st := range sc.steps {
		clk.SetTime(t0.Add(st.at))
		key, limit := st.key, st.limit
		if key == "" {
			key = "alice"
		}
		if limit == (Limit{}) {
			limit = sc.limit
		}
		if st.release {
			if err := s.Release(context.Background(), key, receipts[[2]string{key, st.uid}]); err != nil {
				t.Fatalf("step %d (Release %s uid %q): %v", i, key, st.uid, err)
			}
		}
		if st.peek || st.release {
			if got := peek(t, s, key, limit); got != st.want {
				t.Fatalf("step %d (Peek %s at +%s): %+v, want %+v", i, key, st.at, got, st.want)
			}
			continue
		}
		var got State
		for j := range max(st.n, 1) {
			uid := st.uid
			switch uid {
			case "":
				fresh++
				uid = fmt.Sprintf("fresh-%d", fresh)
			case "-":
				uid = ""
			}
			tk, err := s.Take(context.Background(), key, limit, uid)
			if err != nil {
				t.Fatalf("step %d: Take(%q, %v, %q): %v", i, key, limit, uid, err)
			}
			if tk.Receipt.Recorded() && (!tk.Admitted || tk.Before().Count != tk.State.Count-1) {
				t.Fatalf("step %d: a recorded change must be admitted and counted: %+v, before %+v", i, tk, tk.Before())
			}
			receipts[[2]string{key, st.uid}] = tk.Receipt
			got = tk.State
			ok := tk.Admitted
			if ok != st.admitted {
				t.Fatalf("step %d (Take %d/%d %s uid %q at +%s, %v): admitted=%v, want %v (%+v)",
					i, j+1, max(st.n, 1), key, uid, st.at, limit, ok, st.admitted, got)
			}
		}
		if got != st.want {
			t.Fatalf("step %d (Take %s uid %q at +%s, %v): %+v, want %+v", i, key, st.uid, st.at, limit, got, st.want)
		}
	}
	if sc.after != nil {
		sc.after(t, s)
	}
}

func TestWindowEdges(t *testing.T) {
	forEachStore(t, func(t *testing.T, sut storeUnderTest) {
		tick := sut.tick
		three := Limit{Count: 3, Period: 10 * time.Second}
		one := Limit{Count: 1, Period: time.Minute}
		cases := map[string]scenario{
			"the limit-th change is admitted and the next one in the window is denied": {limit: three, steps: []step{
				{at: 0, admitted: true, want: room(three, 1)},
				{at: time.Second, n: 2, admitted: true, want: full(three, 9*time.Second)},
				{at: 2 * time.Second, admitted: false, want: full(three, 8*time.Second)},
			}},
			"a change still counts one tick (the store's resolution) before Period has passed": {limit: three, steps: []step{
				{at: 0, n: 3, admitted: true, want: full(three, 10*time.Second)},
				{at: 10*time.Second - tick, peek: true, want: full(three, tick)},
				{at: 10*time.Second - tick, admitted: false, want: full(three, tick)},
			}},
			"a change has left exactly Period after it was recorded": {limit: three, steps: []step{
				{at: 0, n: 3, admitted: true, want: full(three, 10*time.Second)},
				{at: 10 * time.Second, peek: true, want: room(three, 0)},
			}},
			"changes recorded at one instant leave together": {limit: three, steps: []step{
				{at: time.Second, n: 3, admitted: true, want: full(three, 10*time.Second)},
				{at: 11 * time.Second, n: 3, admitted: true, want: full(three, 10*time.Second)},
				{at: 11 * time.Second, admitted: false, want: full(three, 10*time.Second)},
			}},
			"a limit of one admits one change per period": {limit: one, steps: []step{
				{at: 0, admitted: true, want: full(one, time.Minute)},
				{at: 59 * time.Second, admitted: false, want: full(one, time.Second)},
				{at: time.Minute, admitted: true, want: full(one, time.Minute)},
			}},
			"a key never seen has the whole limit": {limit: three, steps: []step{
				{at: 0, peek: true, want: room(three, 0)},
			}},
		}
		for name, sc := range cases {
			t.Run(name, sc.on(sut))
		}
	})
}

func TestRetriedUIDTakesOneSlot(t *testing.T) {
	forEachStore(t, func(t *testing.T, sut storeUnderTest) {
		two := Limit{Count: 2, Period: 10 * time.Second}
		cases := map[string]scenario{
			"a retried uid takes no second slot": {limit: two, steps: []step{
				{at: 0, uid: "u1", admitted: true, want: room(two, 1)},
				{at: time.Second, uid: "u1", n: 3, admitted: true, want: room(two, 1)},
			}},
			"a retried uid is admitted when the window is otherwise full": {limit: two, steps: []step{
				{at: 0, uid: "u1", admitted: true, want: room(two, 1)},
				{at: time.Second, uid: "u2", admitted: true, want: full(two, 9*time.Second)},
				{at: 2 * time.Second, uid: "u3", admitted: false, want: full(two, 8*time.Second)},
				{at: 2 * time.Second, uid: "u1", admitted: true, want: full(two, 8*time.Second)},
				{at: 2 * time.Second, uid: "u2", admitted: true, want: full(two, 8*time.Second)},
			}},
			"a uid is a new change once its entry has left the window": {limit: two, steps: []step{
				{at: 0, uid: "u1", admitted: true, want: room(two, 1)},
				{at: 5 * time.Second, uid: "u2", admitted: true, want: full(two, 5*time.Second)},
				{at: 10 * time.Second, uid: "u1", admitted: true, want: full(two, 5*time.Second)},
				{at: 10 * time.Second, uid: "u3", admitted: false, want: full(two, 5*time.Second)},
				// The renewed u1 is a retry again inside its new window.
				{at: 14 * time.Second, uid: "u1", admitted: true, want: full(two, time.Second)},
			}},
			"a uid retried after its entry left takes the freed slot only once": {limit: two, steps: []step{
				{at: 0, uid: "u1", n: 2, admitted: true, want: room(two, 1)},
				{at: 10 * time.Second, uid: "u1", n: 5, admitted: true, want: room(two, 1)},
			}},
			"an empty uid is never a retry": {limit: two, steps: []step{
				{at: 0, uid: "-", n: 2, admitted: true, want: full(two, 10*time.Second)},
				{at: 0, uid: "-", admitted: false, want: full(two, 10*time.Second)},
			}},
			"a uid held under one key is a new change under another": {limit: two, steps: []step{
				{at: 0, key: "alice", uid: "u1", admitted: true, want: room(two, 1)},
				{at: 0, key: "bob", uid: "u1", admitted: true, want: room(two, 1)},
				{at: 0, key: "bob", uid: "u1", admitted: true, want: room(two, 1)},
			}},
		}
		for name, sc := range cases {
			t.Run(name, sc.on(sut))
		}
	})
}

func TestLimitChangeBetweenCalls(t *testing.T) {
	forEachStore(t, func(t *testing.T, sut storeUnderTest) {
		tick := sut.tick
		five := Limit{Count: 5, Period: 10 * time.Second}
		three := Limit{Count: 3, Period: 10 * time.Second}
		long := Limit{Count: 3, Period: time.Minute}
		short := Limit{Count: 3, Period: 20 * time.Second}
		entriesAtMost := func(n int) func(t *testing.T, s Store) {
			return func(t *testing.T, s Store) {
				if held := entriesHeld(t, s, "alice"); held > n {
					t.Fatalf("alice's log holds %d entries, want at most %d", held, n)
				}
			}
		}
		cases := map[string]scenario{
			"a lower count admits nothing more until enough changes age out": {steps: []step{
				{at: 0, limit: five, admitted: true, want: room(five, 1)},
				{at: time.Second, limit: five, admitted: true, want: room(five, 2)},
				{at: 2 * time.Second, limit: five, admitted: true, want: room(five, 3)},
				{at: 3 * time.Second, limit: five, admitted: true, want: room(five, 4)},
				// With Count 3, four changes held: full until the changes at
				// 0 s and 1 s have left.
				{at: 4 * time.Second, limit: three, peek: true, want: full(three, 7*time.Second)},
				{at: 4 * time.Second, limit: three, admitted: false, want: full(three, 7*time.Second)},
				{at: 11*time.Second - tick, limit: three, admitted: false, want: full(three, tick)},
				{at: 11 * time.Second, limit: three, admitted: true, want: full(three, time.Second)},
				{at: 11 * time.Second, limit: three, admitted: false, want: full(three, time.Second)},
			}, after: entriesAtMost(3)},
			"a higher count admits more at once": {steps: []step{
				{at: 0, limit: three, n: 3, admitted: true, want: full(three, 10*time.Second)},
				{at: time.Second, limit: three, admitted: false, want: full(three, 9*time.Second)},
				{at: time.Second, limit: five, n: 2, admitted: true, want: full(five, 9*time.Second)},
				{at: time.Second, limit: five, admitted: false, want: full(five, 9*time.Second)},
			}},
			"a shorter period lets older changes leave at once": {steps: []step{
				{at: 0, limit: long, admitted: true, want: room(long, 1)},
				{at: 10 * time.Second, limit: long, admitted: true, want: room(long, 2)},
				{at: 20 * time.Second, limit: long, admitted: true, want: full(long, 40*time.Second)},
				// Under 20 s the change at 0 s has left; the one at 10 s leaves at 30 s.
				{at: 25 * time.Second, limit: short, peek: true, want: room(short, 2)},
				{at: 25 * time.Second, limit: short, admitted: true, want: full(short, 5*time.Second)},
			}},
			"a longer period counts every change still held": {steps: []step{
				{at: 0, limit: short, admitted: true, want: room(short, 1)},
				{at: 5 * time.Second, limit: short, admitted: true, want: room(short, 2)},
				{at: 30 * time.Second, limit: long, peek: true, want: room(long, 2)},
				{at: 30 * time.Second, limit: long, admitted: true, want: full(long, 30*time.Second)},
			}},
			"a count lowered and raised again does not restore the trimmed changes": {steps: []step{
				{at: 0, limit: five, n: 5, admitted: true, want: full(five, 10*time.Second)},
				{at: time.Second, limit: three, admitted: false, want: full(three, 9*time.Second)},
				{at: time.Second, limit: five, n: 2, admitted: true, want: full(five, 9*time.Second)},
			}, after: entriesAtMost(5)},
			"a uid trimmed away by a lower count is a new change": {steps: []step{
				{at: 0, limit: five, uid: "u1", admitted: true, want: room(five, 1)},
				{at: time.Second, limit: five, n: 4, admitted: true, want: full(five, 9*time.Second)},
				{at: 2 * time.Second, limit: three, uid: "u1", admitted: false, want: full(three, 9*time.Second)},
			}},
		}
		for name, sc := range cases {
			t.Run(name, sc.on(sut))
		}
	})
}

// TestPeekNeverChangesState drives two stores through the same Takes and
// Peeks only one of them, with the same and with other limits: every Take
// must answer the same in both.
func TestPeekNeverChangesState(t *testing.T) {
	plain, plainClk := newStore(MemoryOptions{Shards: 1, MaxKeys: 2})
	peeked, peekedClk := newStore(MemoryOptions{Shards: 1, MaxKeys: 2})
	l := Limit{Count: 4, Period: 10 * time.Second}
	others := []Limit{l, {Count: 1, Period: 10 * time.Second}, {Count: 4, Period: time.Second}, {Count: 100, Period: time.Hour}}

	if st := peek(t, peeked, "nobody", l); st != room(l, 0) {
		t.Fatalf("Peek of an unknown key = %+v, want an empty window", st)
	}
	if n := peeked.Len(); n != 0 {
		t.Fatalf("Peek of an unknown key created it: Len = %d", n)
	}
	keys := []string{"alice", "bob", "carol"}
	for i := range 200 {
		at := t0.Add(time.Duration(i) * 700 * time.Millisecond)
		plainClk.SetTime(at)
		peekedClk.SetTime(at)
		key := keys[i%len(keys)]
		if i%7 == 0 {
			key = keys[0]
		}
		uid := fmt.Sprintf("u%d", i/2) // every other Take is a retry
		for _, o := range others {
			for _, k := range keys {
				peek(t, peeked, k, o)
			}
		}
		before := peek(t, peeked, key, l)
		want, wantOK := take(t, plain, key, l, uid)
		got, gotOK := take(t, peeked, key, l, uid)
		if got != want || gotOK != wantOK {
			t.Fatalf("Take %d (%s): peeked store answered %v %+v, the other %v %+v", i, key, gotOK, got, wantOK, want)
		}
		if !wantOK && before != want {
			t.Fatalf("Take %d (%s) denied with %+v, but Peek just before said %+v", i, key, want, before)
		}
	}
	if p, q := plain.Stats(), peeked.Stats(); p != q {
		t.Fatalf("stats differ: %+v without Peek, %+v with", p, q)
	}
}

func TestKeysAreIndependent(t *testing.T) {
	forEachStore(t, func(t *testing.T, sut storeUnderTest) {
		s, _ := sut.new(t)
		l := Limit{Count: 2, Period: time.Minute}
		take(t, s, "user:alice", l, "a1")
		take(t, s, "user:alice", l, "a2")
		if _, ok := take(t, s, "user:alice", l, "a3"); ok {
			t.Fatal("alice's third change was admitted")
		}
		for _, key := range []string{"user:bob", "namespace:alice", "role:realtime", ""} {
			if st, ok := take(t, s, key, l, "a1"); !ok || st != room(l, 1) {
				t.Fatalf("%q after alice filled her window: admitted=%v %+v, want its own empty window", key, ok, st)
			}
		}
		if st := peek(t, s, "user:alice", l); st != full(l, time.Minute) {
			t.Fatalf("alice after other keys' changes: %+v, want still full", st)
		}
	})
}

func TestIdleKeysAreEvicted(t *testing.T) {
	short := Limit{Count: 5, Period: 10 * time.Second}
	long := Limit{Count: 5, Period: time.Minute}
	cases := map[string]struct {
		opts MemoryOptions
		// run works the store and returns the Len it expects.
		run func(t *testing.T, s *MemoryStore, clk *clocktesting.FakeClock) int
	}{
		"Sweep evicts keys with nothing left in their window": {
			run: func(t *testing.T, s *MemoryStore, clk *clocktesting.FakeClock) int {
				for i := range 50 {
					take(t, s, fmt.Sprintf("k%d", i), short, "")
				}
				clk.Step(10 * time.Second)
				if n := s.Sweep(); n != 50 {
					t.Fatalf("Sweep evicted %d keys, want 50", n)
				}
				return 0
			},
		},
		"Sweep keeps a key while its own period has not passed": {
			run: func(t *testing.T, s *MemoryStore, clk *clocktesting.FakeClock) int {
				take(t, s, "short", short, "")
				take(t, s, "long", long, "")
				clk.Step(30 * time.Second)
				s.Sweep()
				if st := peek(t, s, "long", long); st != room(long, 1) {
					t.Fatalf("the long-period key after the sweep: %+v, want its change kept", st)
				}
				return 1
			},
		},
		"Takes sweep idle keys on their own": {
			opts: MemoryOptions{Shards: 1, SweepEvery: 8},
			run: func(t *testing.T, s *MemoryStore, clk *clocktesting.FakeClock) int {
				for i := range 6 {
					take(t, s, fmt.Sprintf("k%d", i), short, "")
				}
				clk.Step(10 * time.Second)
				for range 2 {
					take(t, s, "busy", long, "")
				}
				return 1
			},
		},
		"a rare Take sweeps once SweepInterval has passed": {
			opts: MemoryOptions{Shards: 1},
			run: func(t *testing.T, s *MemoryStore, clk *clocktesting.FakeClock) int {
				for i := range 50 {
					take(t, s, fmt.Sprintf("k%d", i), short, "")
				}
				clk.Step(DefaultSweepInterval)
				take(t, s, "busy", long, "")
				return 1
			},
		},
		"a key whose changes all left is reset when used again": {
			run: func(t *testing.T, s *MemoryStore, clk *clocktesting.FakeClock) int {
				for range 5 {
					take(t, s, "alice", short, "")
				}
				clk.Step(time.Hour)
				if st, ok := take(t, s, "alice", short, ""); !ok || st != room(short, 1) {
					t.Fatalf("alice an hour later: admitted=%v %+v, want a fresh window", ok, st)
				}
				return 1
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s, clk := newStore(tc.opts)
			want := tc.run(t, s, clk)
			if n := s.Len(); n != want {
				t.Fatalf("Len = %d, want %d", n, want)
			}
		})
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestKeyLengthDoesNotChangeMemory: the store keeps 16 bytes of a key,
// whatever its length, so long keys cost what short ones do.
func TestKeyLengthDoesNotChangeMemory(t *testing.T) {
	l := Limit{Count: 5, Period: time.Minute}
	perKey := func(keyLength int) int64 {
		s, _ := newStore(MemoryOptions{})
		before := heapInUse()
		for i := range 10_000 {
			key := fmt.Sprintf("%0*d", keyLength, i)
			take(t, s, key, l, "")
		}
		cost := (heapInUse() - before) / 10_000
		runtime.KeepAlive(s)
		return cost
	}
	short, long := perKey(16), perKey(1024)
	if long > short+short/4 {
		t.Fatalf("a key costs %d bytes with 1 KiB keys and %d with 16-byte keys, want about the same", long, short)
	}
	t.Logf("%d bytes per key with one change", short)
}

// TestABurstOfKeysGivesItsMemoryBack: once a burst of requesters has gone
// idle and been swept, the store's heap is back near where it was, maps
// included (a Go map keeps its largest size unless it is rebuilt).
func TestABurstOfKeysGivesItsMemoryBack(t *testing.T) {
	s, clk := newStore(MemoryOptions{Shards: 4})
	l := Limit{Count: 5, Period: time.Minute}
	take(t, s, "steady", l, "")
	before := heapInUse()
	for i := range 50_000 {
		take(t, s, fmt.Sprintf("burst-%d", i), l, "")
	}
	burst := heapInUse() - before
	clk.Step(l.Period)
	take(t, s, "steady", l, "")
	s.Sweep()
	if n := s.Len(); n != 1 {
		t.Fatalf("Len after the sweep = %d, want 1", n)
	}
	if kept := heapInUse() - before; kept > burst/20 {
		t.Fatalf("the store still holds %d KiB of the burst's %d KiB after its keys were swept, want under 5 %%", kept>>10, burst>>10)
	}
	runtime.KeepAlive(s)
}

func TestMaxKeysBoundsMemory(t *testing.T) {
	cases := map[string]struct {
		opts MemoryOptions
		keys int
	}{
		"three times MaxKeys in one shard":            {opts: MemoryOptions{MaxKeys: 100, Shards: 1}, keys: 300},
		"three times MaxKeys over the default shards": {opts: MemoryOptions{MaxKeys: 1000}, keys: 3000},
		"more shards asked for than keys allowed":     {opts: MemoryOptions{MaxKeys: 10, Shards: 64}, keys: 30},
		"150,000 distinct keys":                       {opts: MemoryOptions{MaxKeys: 1024}, keys: 150_000},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s, clk := newStore(tc.opts)
			for i := range tc.keys {
				clk.Step(time.Microsecond) // every key stays inside its window
				key := fmt.Sprintf("user-%d", i)
				if _, ok := take(t, s, key, realtime, "u"); !ok {
					t.Fatalf("first change of %s denied", key)
				}
				if i%97 == 0 {
					if n := s.Len(); n > tc.opts.MaxKeys {
						t.Fatalf("after %d keys Len = %d > MaxKeys %d", i+1, n, tc.opts.MaxKeys)
					}
				}
			}
			st := s.Stats()
			if st.Keys > tc.opts.MaxKeys || st.Keys < tc.opts.MaxKeys/2 {
				t.Fatalf("Len = %d, want at most MaxKeys %d and not far below", st.Keys, tc.opts.MaxKeys)
			}
			if st.ActiveEvictions != uint64(tc.keys-st.Keys) {
				t.Fatalf("ActiveEvictions = %d, want %d (every key was still active)", st.ActiveEvictions, tc.keys-st.Keys)
			}
			// Memory: the held logs never exceed what MaxKeys keys may hold.
			entries := 0
			for i := range s.shards {
				for _, k := range s.shards[i].keys {
					entries += len(k.entries)
				}
			}
			if entries > tc.opts.MaxKeys*minEntries {
				t.Fatalf("%d ring slots held for %d keys of one change each", entries, st.Keys)
			}
		})
	}
}

func TestFullStoreEvictsIdleKeysFirstThenLeastRecentlyUsed(t *testing.T) {
	s, clk := newStore(MemoryOptions{MaxKeys: 3, Shards: 1})
	short := Limit{Count: 1, Period: 10 * time.Second}
	long := Limit{Count: 1, Period: time.Minute}

	take(t, s, "a", short, "")
	clk.Step(5 * time.Second)
	take(t, s, "b", long, "")
	take(t, s, "c", long, "")
	clk.Step(10 * time.Second) // a is idle, b and c are full
	take(t, s, "d", long, "")
	if st := s.Stats(); st.Keys != 3 || st.IdleEvictions != 1 || st.ActiveEvictions != 0 {
		t.Fatalf("after d: %+v, want the idle key a evicted", st)
	}
	if st := peek(t, s, "b", long); st.Count != 1 {
		t.Fatalf("b lost its change: %+v", st)
	}

	take(t, s, "b", long, "") // denied, but b is now the most recently used
	take(t, s, "e", long, "")
	if st := s.Stats(); st.Keys != 3 || st.ActiveEvictions != 1 {
		t.Fatalf("after e: %+v, want one active key evicted", st)
	}
	for key, want := range map[string]int{"b": 1, "c": 0, "d": 1, "e": 1} {
		if st := peek(t, s, key, long); st.Count != want {
			t.Fatalf("%s holds %d changes, want %d (c was least recently used)", key, st.Count, want)
		}
	}
	// The documented cost of the cap: c's history is gone, so c is
	// admitted again inside what was its full window.
	if _, ok := take(t, s, "c", long, ""); !ok {
		t.Fatal("c was denied after its key was evicted; the store remembered more than MaxKeys keys")
	}
}

func TestConcurrentTakes(t *testing.T) {
	cases := map[string]struct {
		goroutines, each int
		uid              func(g, i int) string
		want             State
	}{
		"many goroutines on one key admit exactly the limit": {
			goroutines: 16, each: 40,
			uid:  func(g, i int) string { return fmt.Sprintf("g%d-%d", g, i) },
			want: full(realtime, time.Minute),
		},
		"one uid retried from many goroutines takes one slot": {
			goroutines: 16, each: 10,
			uid:  func(int, int) string { return "same" },
			want: room(realtime, 1),
		},
	}
	forEachStore(t, func(t *testing.T, sut storeUnderTest) {
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				s, _ := sut.new(t)
				var admitted atomic.Int64
				var wg sync.WaitGroup
				for g := range tc.goroutines {
					wg.Go(func() {
						for i := range tc.each {
							tk, err := s.Take(context.Background(), "alice", realtime, tc.uid(g, i))
							ok := tk.Admitted
							if err != nil {
								t.Error(err)
							}
							if ok {
								admitted.Add(1)
							}
						}
					})
				}
				wg.Wait()
				if st := peek(t, s, "alice", realtime); st != tc.want {
					t.Fatalf("window = %+v, want %+v", st, tc.want)
				}
				if tc.want.Count == realtime.Count && admitted.Load() != int64(realtime.Count) {
					t.Fatalf("%d admitted, want exactly %d", admitted.Load(), realtime.Count)
				}
			})
		}
	})
}

// TestConcurrentUseKeepsEveryBound runs Takes on many keys, Peeks, Sweeps
// and clock steps together, for the race detector and the MaxKeys bound.
func TestConcurrentUseKeepsEveryBound(t *testing.T) {
	s, clk := newStore(MemoryOptions{MaxKeys: 256, SweepEvery: 16})
	l := Limit{Count: 3, Period: time.Second}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				ctx, key := context.Background(), fmt.Sprintf("k%d", (g*7919+i)%1000)
				if _, err := s.Take(ctx, key, l, fmt.Sprintf("%d-%d", g, i%5)); err != nil {
					t.Error(err)
				}
				if i%10 == 0 {
					if _, err := s.Peek(ctx, key, l); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			clk.Step(50 * time.Millisecond)
			s.Sweep()
			if n := s.Len(); n > 256 {
				t.Errorf("Len = %d > MaxKeys 256", n)
			}
		}
	})
	wg.Wait()
	for key := range 1000 {
		if st := peek(t, s, fmt.Sprintf("k%d", key), l); st.Count > l.Count {
			t.Fatalf("k%d holds %d changes, more than the limit", key, st.Count)
		}
	}
}

func TestInvalidLimitsAreErrors(t *testing.T) {
	cases := map[string]struct {
		limit Limit
		inMsg string
	}{
		"a count of zero":   {Limit{Count: 0, Period: time.Minute}, "at least 1 change, got 0"},
		"a negative count":  {Limit{Count: -1, Period: time.Minute}, "got -1"},
		"a period of zero":  {Limit{Count: 5}, "longer than 0, got 0s"},
		"a negative period": {Limit{Count: 5, Period: -time.Second}, "got -1s"},
		"the zero Limit":    {Limit{}, "at least 1 change"},
	}
	forEachStore(t, func(t *testing.T, sut storeUnderTest) {
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				s, _ := sut.new(t)
				tk, err := s.Take(context.Background(), "alice", tc.limit, "u")
				ok := tk.Admitted
				if ok || !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), tc.inMsg) {
					t.Fatalf("Take: admitted=%v err=%v, want ErrInvalidLimit saying %q", ok, err, tc.inMsg)
				}
				if _, err := s.Peek(context.Background(), "alice", tc.limit); !errors.Is(err, ErrInvalidLimit) {
					t.Fatalf("Peek: err=%v, want ErrInvalidLimit", err)
				}
				if n := entriesHeld(t, s, "alice"); n != 0 {
					t.Fatalf("an invalid limit left %d entries", n)
				}
			})
		}
	})
}

func TestCanceledContextTakesNoSlot(t *testing.T) {
	forEachStore(t, func(t *testing.T, sut storeUnderTest) {
		s, _ := sut.new(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if tk, err := s.Take(ctx, "alice", realtime, "u"); tk.Admitted || !errors.Is(err, context.Canceled) {
			t.Fatalf("Take with a canceled context: admitted=%v err=%v, want context.Canceled", tk.Admitted, err)
		}
		if _, err := s.Peek(ctx, "alice", realtime); !errors.Is(err, context.Canceled) {
			t.Fatalf("Peek with a canceled context: err=%v, want context.Canceled", err)
		}
		if st := peek(t, s, "alice", realtime); st != room(realtime, 0) {
			t.Fatalf("after the canceled Take: %+v, want nothing taken", st)
		}
		if n := entriesHeld(t, s, "alice"); n != 0 {
			t.Fatalf("%d entries held, want none", n)
		}
	})
}

// TestClockSteppingBack covers a wall clock without a monotonic reading
// going backwards: no panic, nothing admitted beyond the limit, and the
// change counts until Period after the latest time already seen.
func TestClockSteppingBack(t *testing.T) {
	forEachStore(t, func(t *testing.T, sut storeUnderTest) {
		s, clk := sut.new(t)
		l := Limit{Count: 2, Period: 10 * time.Second}
		clk.SetTime(t0.Add(10 * time.Second))
		take(t, s, "alice", l, "")
		clk.SetTime(t0.Add(5 * time.Second))
		if st, ok := take(t, s, "alice", l, ""); !ok || st != full(l, 15*time.Second) {
			t.Fatalf("after stepping back: admitted=%v %+v, want admitted and counted until t0+20s", ok, st)
		}
		if _, ok := take(t, s, "alice", l, ""); ok {
			t.Fatal("a third change was admitted")
		}
		clk.SetTime(t0.Add(20 * time.Second))
		if st := peek(t, s, "alice", l); st != room(l, 0) {
			t.Fatalf("at t0+20s: %+v, want both changes gone", st)
		}
	})
}

func TestNewMemoryStoreOptions(t *testing.T) {
	cases := map[string]struct {
		opts             MemoryOptions
		shards, perShard int
	}{
		"the zero value uses the defaults":    {MemoryOptions{}, DefaultShards, DefaultMaxKeys / DefaultShards},
		"shards round down to a power of two": {MemoryOptions{MaxKeys: 1000, Shards: 48}, 32, 31},
		"no more shards than keys":            {MemoryOptions{MaxKeys: 10, Shards: 64}, 8, 1},
		"a single key still works":            {MemoryOptions{MaxKeys: 1}, 1, 1},
		"huge shard counts are capped":        {MemoryOptions{Shards: 1 << 20}, maxShards, DefaultMaxKeys / maxShards},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := NewMemoryStore(nil, tc.opts)
			if len(s.shards) != tc.shards || s.shards[0].maxKeys != tc.perShard {
				t.Fatalf("%d shards of %d keys, want %d of %d", len(s.shards), s.shards[0].maxKeys, tc.shards, tc.perShard)
			}
		})
	}
}

func TestLimitString(t *testing.T) {
	if got := realtime.String(); got != "120 per 1m0s" {
		t.Fatalf("String() = %q", got)
	}
}

// TestMemoryStoreMetricsReadItsStats: the keys and evictions a scrape
// shows are the store's at that moment.
func TestMemoryStoreMetricsReadItsStats(t *testing.T) {
	s, clk := newStore(MemoryOptions{MaxKeys: 2, Shards: 1})
	reg := prometheus.NewRegistry()
	RegisterMemoryStore(reg, "memory", s)
	long := Limit{Count: 1, Period: time.Minute}
	take(t, s, "a", Limit{Count: 1, Period: time.Second}, "")
	take(t, s, "b", long, "")
	clk.Step(2 * time.Second) // a is idle
	take(t, s, "c", long, "") // evicts idle a
	take(t, s, "d", long, "") // evicts active b
	want := `
# HELP qn_window_store_evictions_total Window keys an in-process store dropped, by reason: idle (nothing left in the window; no decision changes) or active (dropped to stay under MaxKeys while changes still counted: each lets a requester start over, so a non-zero rate means MaxKeys is too small).
# TYPE qn_window_store_evictions_total counter
qn_window_store_evictions_total{reason="active",store="memory"} 1
qn_window_store_evictions_total{reason="idle",store="memory"} 1
# HELP qn_window_store_keys Window keys (requesters, namespaces or roles with a window) an in-process store holds; at most its MaxKeys.
# TYPE qn_window_store_keys gauge
qn_window_store_keys{store="memory"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
