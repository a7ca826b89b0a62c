package window

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestReleaseGivesTheSlotBack is the specification of Release, for both
// stores: the engine takes a slot before the policies run and gives it
// back when they refuse the change, so a refused change never counts, and
// an admitted one always does.
func TestReleaseGivesTheSlotBack(t *testing.T) {
	forEachStore(t, func(t *testing.T, sut storeUnderTest) {
		two := Limit{Count: 2, Period: 10 * time.Second}
		three := Limit{Count: 3, Period: 10 * time.Second}
		cases := map[string]scenario{
			"a released change frees its slot for the next": {limit: two, steps: []step{
				{at: 0, uid: "u1", admitted: true, want: room(two, 1)},
				{at: time.Second, uid: "u2", admitted: true, want: full(two, 9*time.Second)},
				{at: time.Second, uid: "u2", release: true, want: room(two, 1)},
				{at: 2 * time.Second, uid: "u3", admitted: true, want: full(two, 8*time.Second)},
			}},
			"a released uid is a new change when it comes again": {limit: two, steps: []step{
				{at: 0, uid: "u1", admitted: true, want: room(two, 1)},
				{at: 0, uid: "u1", release: true, want: room(two, 0)},
				{at: time.Second, uid: "u1", admitted: true, want: room(two, 1)},
				// ... and a retry of that new change takes no second slot.
				{at: 2 * time.Second, uid: "u1", admitted: true, want: room(two, 1)},
			}},
			"a denial and a retry record nothing to give back": {limit: two, steps: []step{
				{at: 0, uid: "u1", admitted: true, want: room(two, 1)},
				{at: 0, uid: "u2", admitted: true, want: full(two, 10*time.Second)},
				{at: time.Second, uid: "u3", admitted: false, want: full(two, 9*time.Second)},
				{at: time.Second, uid: "u3", release: true, want: full(two, 9*time.Second)},
				{at: time.Second, uid: "u2", admitted: true, want: full(two, 9*time.Second)},
				{at: time.Second, uid: "u2", release: true, want: full(two, 9*time.Second)},
			}},
			"releasing twice gives back one slot": {limit: two, steps: []step{
				{at: 0, uid: "u1", admitted: true, want: room(two, 1)},
				{at: 0, uid: "u2", admitted: true, want: full(two, 10*time.Second)},
				{at: 0, uid: "u2", release: true, want: room(two, 1)},
				{at: 0, uid: "u2", release: true, want: room(two, 1)},
			}},
			"a change that has left the window releases nothing": {limit: two, steps: []step{
				{at: 0, uid: "u1", admitted: true, want: room(two, 1)},
				{at: 10 * time.Second, uid: "u1", release: true, want: room(two, 0)},
				{at: 11 * time.Second, uid: "u2", admitted: true, want: room(two, 1)},
			}},
			"giving back the middle change keeps the oldest first": {limit: three, steps: []step{
				{at: 0, uid: "u1", admitted: true, want: room(three, 1)},
				{at: time.Second, uid: "u2", admitted: true, want: room(three, 2)},
				{at: 2 * time.Second, uid: "u3", admitted: true, want: full(three, 8*time.Second)},
				{at: 2 * time.Second, uid: "u2", release: true, want: room(three, 2)},
				{at: 3 * time.Second, uid: "u4", admitted: true, want: full(three, 7*time.Second)},
				// u1 leaves at +10 s, then u3 at +12 s, u4 at +13 s.
				{at: 10 * time.Second, peek: true, want: room(three, 2)},
				{at: 10 * time.Second, uid: "u5", admitted: true, want: full(three, 2*time.Second)},
				{at: 12 * time.Second, peek: true, want: room(three, 2)},
			}},
			"one of several changes without a uid recorded at one instant is given back": {limit: three, steps: []step{
				{at: 0, uid: "-", n: 3, admitted: true, want: full(three, 10*time.Second)},
				{at: 0, uid: "-", release: true, want: room(three, 2)},
				{at: 0, uid: "-", admitted: true, want: full(three, 10*time.Second)},
			}},
			"a release under one key leaves another key's change alone": {limit: two, steps: []step{
				{at: 0, key: "alice", uid: "u1", admitted: true, want: room(two, 1)},
				{at: 0, key: "bob", uid: "u1", admitted: true, want: room(two, 1)},
				{at: 0, key: "alice", uid: "u1", release: true, want: room(two, 0)},
				{at: 0, key: "bob", peek: true, want: room(two, 1)},
			}},
		}
		for name, sc := range cases {
			t.Run(name, sc.on(sut))
		}
	})
}

// TestReleaseAfterARetryKeepsTheChange replays the race the one-round-trip
// window path must survive: the first attempt of a request takes a slot,
// the apiserver's retry of it (same uid) is admitted on the strength of
// that slot, and then the first attempt is refused by its policies (its
// evaluation was cancelled with its connection) and gives its slot back.
// The retry's change was admitted, so it must still count: the window of
// one holds it, and a new change is refused.
func TestReleaseAfterARetryKeepsTheChange(t *testing.T) {
	forEachStore(t, func(t *testing.T, sut storeUnderTest) {
		s, _ := sut.new(t)
		one := Limit{Count: 1, Period: time.Minute}
		ctx := context.Background()
		first, err := s.Take(ctx, "alice", one, "req-1")
		if err != nil || !first.Receipt.Recorded() {
			t.Fatalf("first attempt: %+v %v, want a recorded change", first, err)
		}
		retry, err := s.Take(ctx, "alice", one, "req-1")
		if err != nil || !retry.Admitted || retry.Receipt.Recorded() {
			t.Fatalf("retry: %+v %v, want admitted on the first attempt's slot, recording nothing", retry, err)
		}
		if err := s.Release(ctx, "alice", first.Receipt); err != nil {
			t.Fatal(err)
		}
		if st := peek(t, s, "alice", one); st.Count != 1 {
			t.Fatalf("after the first attempt gave its slot back the window counts %d; the retry's admitted change must still count", st.Count)
		}
		if _, ok := take(t, s, "alice", one, "req-2"); ok {
			t.Fatal("a second change was admitted into a window of one")
		}
		// And the retried change is still recognised as such.
		if _, ok := take(t, s, "alice", one, "req-1"); !ok {
			t.Fatal("a further retry of the admitted change was refused")
		}
	})
}

// TestConcurrentTakesAndReleasesNeverExceedTheLimit has many goroutines
// take slots on one key, each giving back every other slot it took (the
// policies refused that change), until the key has admitted the limit's
// worth of kept changes: at no instant may the kept changes exceed the
// limit, and at the end the window counts exactly the kept ones.
func TestConcurrentTakesAndReleasesNeverExceedTheLimit(t *testing.T) {
	forEachStore(t, func(t *testing.T, sut storeUnderTest) {
		s, _ := sut.new(t)
		l := Limit{Count: 40, Period: time.Hour}
		ctx := context.Background()
		var kept, released atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 60 {
					tk, err := s.Take(ctx, "alice", l, fmt.Sprintf("g%d-%d", g, i))
					if err != nil {
						t.Error(err)
						return
					}
					if !tk.Admitted {
						continue
					}
					if i%2 == 1 {
						if err := s.Release(ctx, "alice", tk.Receipt); err != nil {
							t.Error(err)
						}
						released.Add(1)
						continue
					}
					if n := kept.Add(1); n > int64(l.Count) {
						t.Errorf("%d changes kept in a window of %d", n, l.Count)
					}
				}
			})
		}
		wg.Wait()
		if st := peek(t, s, "alice", l); st.Count != int(kept.Load()) || kept.Load() != int64(l.Count) {
			t.Fatalf("the window counts %d changes, %d were kept (%d given back); want both %d", st.Count, kept.Load(), released.Load(), l.Count)
		}
	})
}
