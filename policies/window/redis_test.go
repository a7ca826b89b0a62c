package window

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quantumnode/qn-admission/test/redistest"
)

// newRedisStore is a RedisStore on a fresh real redis-server, with the
// server's clock unless clk is set.
func newRedisStore(t *testing.T, clk *clocktesting.FakeClock) (*RedisStore, redis.UniversalClient) {
	t.Helper()
	srv := redistest.Start(t)
	c := redisClient(t, srv)
	opts := RedisOptions{}
	if clk != nil {
		opts.Clock = clk
	}
	return NewRedisStore(c, opts), c
}

func TestRedisKeysCarryRoleAndKindButNeverTheSubject(t *testing.T) {
	s := NewRedisStore(nil, RedisOptions{})
	cases := map[string]struct {
		key, prefix string
		secret      string // must not appear in the Redis key
	}{
		"a user's window":                  {key: "realtime/user/alice", prefix: "qn:window:realtime:user:", secret: "alice"},
		"a namespace's window":             {key: "batch/namespace/team-a", prefix: "qn:window:batch:namespace:", secret: "team-a"},
		"a user name with slashes":         {key: "realtime/user/alice/admin", prefix: "qn:window:realtime:user:", secret: "admin"},
		"an e-mail user name":              {key: "realtime/user/alice@example.com", prefix: "qn:window:realtime:user:", secret: "example"},
		"a role name with a hash tag":      {key: "rt{x}/user/bob", prefix: "qn:window:rt_x_:user:", secret: "bob"},
		"a role name with separators":      {key: "a:b c/user/bob", prefix: "qn:window:a_b_c:user:", secret: "bob"},
		"a key without the engine's shape": {key: "alice", prefix: "qn:window:", secret: "alice"},
		"a role-wide window":               {key: "batch/role", prefix: "qn:window:batch:role:", secret: "\x00"},
		"two parts that are not role-wide": {key: "batch/alice", prefix: "qn:window:", secret: "alice"},
		"a very long role name is cut":     {key: strings.Repeat("r", 100) + "/user/bob", prefix: "qn:window:" + strings.Repeat("r", maxLabel) + ":user:", secret: "bob"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := s.Key(tc.key)
			hash, ok := strings.CutPrefix(got, tc.prefix)
			if !ok || len(hash) != 32 || strings.Trim(hash, "0123456789abcdef") != "" {
				t.Fatalf("Key(%q) = %q, want %q and 32 hex digits", tc.key, got, tc.prefix)
			}
			if strings.Contains(got, tc.secret) || strings.ContainsAny(got, "{}") {
				t.Fatalf("Key(%q) = %q shows %q or a hash tag", tc.key, got, tc.secret)
			}
		})
	}
	// Keys that read alike stay apart: the hash covers the whole key.
	seen := map[string]string{}
	for _, k := range []string{"a:b/user/x", "a b/user/x", "a_b/user/x", "rt/user/x", "rt/user/y", "rt/namespace/x", "rt/user/x/", "rt/user"} {
		rk := s.Key(k)
		if other, dup := seen[rk]; dup {
			t.Fatalf("%q and %q share the Redis key %q", k, other, rk)
		}
		seen[rk] = k
	}
	if got := NewRedisStore(nil, RedisOptions{Prefix: "prod:"}).Key("rt/user/x"); !strings.HasPrefix(got, "prod:rt:user:") {
		t.Fatalf("with Prefix prod: Key = %q", got)
	}
}

func TestRedisKeyExpiresWithItsNewestChange(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s, c := newRedisStore(t, clk)
	ctx := context.Background()
	l := Limit{Count: 3, Period: 10 * time.Second}
	pttl := func() time.Duration {
		d, err := c.PTTL(ctx, s.Key("rt/user/alice")).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	take(t, s, "rt/user/alice", l, "u1")
	if d := pttl(); d <= 9*time.Second || d > 10*time.Second {
		t.Fatalf("after the first change PTTL = %s, want the period, 10s", d)
	}
	clk.Step(4 * time.Second)
	take(t, s, "rt/user/alice", l, "u2")
	if d := pttl(); d <= 9*time.Second || d > 10*time.Second {
		t.Fatalf("after a change 4s later PTTL = %s, want 10s from the newest change", d)
	}
	clk.Step(time.Second)
	take(t, s, "rt/user/alice", l, "u3")
	take(t, s, "rt/user/alice", l, "u4") // denied: the key still lives 10s from u3
	if d := pttl(); d <= 9*time.Second || d > 10*time.Second {
		t.Fatalf("after a denied change PTTL = %s, want 10s from the newest change", d)
	}
	// A reload to a longer period keeps the key for the longer period.
	take(t, s, "rt/user/alice", Limit{Count: 3, Period: time.Minute}, "u5")
	if d := pttl(); d <= 59*time.Second || d > time.Minute {
		t.Fatalf("after a Take under a 1m period PTTL = %s, want 1m", d)
	}

	// With the server's clock, the key is gone once the window has passed.
	real, c2 := newRedisStore(t, nil)
	short := Limit{Count: 2, Period: 150 * time.Millisecond}
	take(t, real, "rt/user/bob", short, "")
	time.Sleep(400 * time.Millisecond)
	if n, err := c2.Exists(ctx, real.Key("rt/user/bob")).Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS after the window passed = %d, %v; want the key expired", n, err)
	}
}

// On the server's clock a key lives until its newest change leaves the
// window, to the microsecond rounded up: not from the command's start in
// whole milliseconds, which is up to a millisecond before the change's
// time and let a burst of changes leave early (six changes within 99.2
// ms of a 5 per 100 ms window, TestRedisWindowEdgesUnderConcurrency once
// in a while).
func TestRedisKeyOnTheServersClockOutlivesItsNewestChange(t *testing.T) {
	s, c := newRedisStore(t, nil)
	ctx := context.Background()
	l := Limit{Count: 50, Period: 100 * time.Millisecond}
	key := s.Key("rt/user/carol")
	for i := range 40 {
		tk, err := s.Take(ctx, "rt/user/carol", l, fmt.Sprintf("u%d", i))
		if err != nil || !tk.Receipt.Recorded() {
			t.Fatalf("take %d: %+v, %v", i, tk, err)
		}
		at, err := c.Do(ctx, "PEXPIRETIME", key).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if leaves := tk.Receipt.at + micros(l.Period); at*1000 < leaves {
			t.Fatalf("take %d: the key expires at %d ms, before its newest change leaves the window at %d µs", i, at, leaves)
		}
	}
}

// TestRedisMemoryPerKey measures what a window costs in Redis (MEMORY
// USAGE, jemalloc on 64-bit) and holds it to bounds that docs/architecture.md
// relies on: up to 128 changes a key stays in the compact listpack encoding.
func TestRedisMemoryPerKey(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s, c := newRedisStore(t, clk)
	ctx := context.Background()
	cases := map[string]struct {
		changes, limit int
		encoding       string
		maxBytes       int64
	}{
		"one change":                            {changes: 1, limit: 120, encoding: "listpack", maxBytes: 200},
		"ten changes":                           {changes: 10, limit: 120, encoding: "listpack", maxBytes: 400},
		"a full realtime window (120)":          {changes: 120, limit: 120, encoding: "listpack", maxBytes: 3 * 1024},
		"a window of 500 leaves the listpack":   {changes: 500, limit: 500, encoding: "skiplist", maxBytes: 64 * 1024},
		"a window of 128, the listpack's limit": {changes: 128, limit: 128, encoding: "listpack", maxBytes: 3584},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			key := "realtime/user/" + name
			l := Limit{Count: tc.limit, Period: time.Hour}
			for i := range tc.changes {
				clk.Step(time.Millisecond)
				if _, ok := take(t, s, key, l, fmt.Sprintf("uid-%d", i)); !ok {
					t.Fatalf("change %d denied", i)
				}
			}
			bytes, err := c.MemoryUsage(ctx, s.Key(key)).Result()
			if err != nil {
				t.Fatal(err)
			}
			enc, err := c.ObjectEncoding(ctx, s.Key(key)).Result()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d changes: %d bytes (%.1f per change), %s", tc.changes, bytes, float64(bytes)/float64(tc.changes), enc)
			if enc != tc.encoding || bytes > tc.maxBytes {
				t.Fatalf("%d changes take %d bytes as %s; want at most %d as %s", tc.changes, bytes, enc, tc.maxBytes, tc.encoding)
			}
		})
	}
}

// TestRedisAnswersLikeMemory replays one random history (takes, retries,
// releases, peeks, limit changes on reload, many keys, time moving forward
// in whole microseconds) against both stores: every answer must be
// identical.
func TestRedisAnswersLikeMemory(t *testing.T) {
	t.Run("Redis 7 and later", func(t *testing.T) {
		rs, _ := newRedisStore(t, clocktesting.NewFakeClock(t0))
		redisAnswersLikeMemory(t, rs)
	})
	// Before Redis 7 the script reads a uid's two forms with two ZSCOREs
	// instead of one ZMSCORE: the same answers.
	t.Run("Redis before 7", func(t *testing.T) {
		rs, _ := newRedisStore(t, clocktesting.NewFakeClock(t0))
		withoutVersion := strings.Replace(takeSource, "if redis.REDIS_VERSION_NUM then", "if false then", 1)
		if withoutVersion == takeSource {
			t.Fatal("take.lua no longer chooses ZMSCORE by redis.REDIS_VERSION_NUM: update this test")
		}
		rs.take.Store(redis.NewScript(withoutVersion))
		redisAnswersLikeMemory(t, rs)
	})
}

func redisAnswersLikeMemory(t *testing.T, rs *RedisStore) {
	clk := rs.clk.(*clocktesting.FakeClock)
	ms := NewMemoryStore(clk, MemoryOptions{})
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"rt/user/alice", "rt/user/bob", "rt/namespace/a", "batch/role"}
	limits := []Limit{{Count: 3}, {Count: 5}, {Count: 2}, {Count: 4}}
	// Each key keeps one period, while reloads change its count. Both
	// stores forget a key once its newest change is older than the last
	// period it was taken under, so a period lowered and raised again
	// forgets changes early, alike by design; but here the memory store
	// judges that on this test's clock and Redis by the key's TTL in real
	// time, so such a history would differ by the test's two clocks, not
	// by the stores (TestRedisKeyExpiresWithItsNewestChange covers the
	// TTL).
	periods := map[string]time.Duration{
		"rt/user/alice": 2 * time.Second, "rt/user/bob": 2 * time.Second,
		"rt/namespace/a": 500 * time.Millisecond, "batch/role": 3 * time.Second,
	}
	uids := []string{""}
	// Receipts of recorded changes, each store's, to give back later.
	type taken struct {
		key           string
		memory, redis Receipt
	}
	var recorded []taken
	ctx := context.Background()
	for i := range 3000 {
		// Steps of 1 µs to 300 ms. Never 0: among changes recorded in one
		// microsecond, a lowered Count trims the memory store's first
		// arrived but Redis's lowest member, so which retry is still
		// recognised may differ (TestWindowEdges covers shared instants).
		step := time.Duration(1+rng.IntN(300_000)) * time.Microsecond
		if rng.IntN(3) == 0 {
			step = time.Microsecond
		}
		clk.Step(step)
		key := keys[rng.IntN(len(keys))]
		limit := limits[0]
		if rng.IntN(10) == 0 { // a reload changed the role's window
			limit = limits[rng.IntN(len(limits))]
		}
		limit.Period = periods[key]
		if rng.IntN(8) == 0 && len(recorded) > 0 {
			// The policies refused a change: give its slot back, maybe
			// long after (it may have left, or been retried since).
			tk := recorded[len(recorded)-1-rng.IntN(min(len(recorded), 4))]
			err1 := ms.Release(ctx, tk.key, tk.memory)
			err2 := rs.Release(ctx, tk.key, tk.redis)
			peek := Limit{Count: limit.Count, Period: periods[tk.key]}
			want, err3 := ms.Peek(ctx, tk.key, peek)
			got, err4 := rs.Peek(ctx, tk.key, peek)
			if err := errors.Join(err1, err2, err3, err4); err != nil || got != want {
				t.Fatalf("op %d Release(%s) then Peek: redis %+v, memory %+v, %v", i, tk.key, got, want, err)
			}
			continue
		}
		if rng.IntN(5) == 0 {
			want, err1 := ms.Peek(ctx, key, limit)
			got, err2 := rs.Peek(ctx, key, limit)
			if err1 != nil || err2 != nil || got != want {
				t.Fatalf("op %d Peek(%s, %v): redis %+v %v, memory %+v %v", i, key, limit, got, err2, want, err1)
			}
			continue
		}
		uid := fmt.Sprintf("uid-%d", i)
		switch rng.IntN(4) {
		case 0: // an apiserver retry of an earlier request
			uid = uids[rng.IntN(len(uids))]
		case 1:
			uid = ""
		}
		uids = append(uids, uid)
		wantTk, err1 := ms.Take(ctx, key, limit, uid)
		gotTk, err2 := rs.Take(ctx, key, limit, uid)
		want, wantOK, got, gotOK := wantTk.State, wantTk.Admitted, gotTk.State, gotTk.Admitted
		if err1 != nil || err2 != nil || got != want || gotOK != wantOK || gotTk.Receipt.Recorded() != wantTk.Receipt.Recorded() {
			t.Fatalf("op %d Take(%s, %v, %q) at +%s: redis %v %+v %v, memory %v %+v %v",
				i, key, limit, uid, clk.Since(t0), gotOK, got, err2, wantOK, want, err1)
		}
		if wantTk.Receipt.Recorded() {
			recorded = append(recorded, taken{key, wantTk.Receipt, gotTk.Receipt})
		}
	}
}

// TestRedisWindowEdgesUnderConcurrency runs several stores with their own
// connections (as replicas would) against one key of a short window on the
// server's clock, for long enough that changes keep leaving while others
// arrive. Whatever the interleaving, no span shorter than the period may
// hold more than Limit.Count admitted changes, and the window must keep
// admitting as slots free.
func TestRedisWindowEdgesUnderConcurrency(t *testing.T) {
	srv := redistest.Start(t)
	const replicas, workers = 3, 4
	l := Limit{Count: 5, Period: 100 * time.Millisecond}
	run := 1500 * time.Millisecond
	var mu sync.Mutex
	var admitted []int64 // when each new change was recorded, µs
	var wg sync.WaitGroup
	stop := time.Now().Add(run)
	for r := range replicas {
		s := NewRedisStore(redisClient(t, srv), RedisOptions{})
		for w := range workers {
			wg.Go(func() {
				for i := 0; time.Now().Before(stop); i++ {
					// Every third request is a retry of the one before.
					uid := fmt.Sprintf("r%d-w%d-%d", r, w, i-i%3/2)
					tk, err := s.Take(context.Background(), "rt/user/alice", l, uid)
					st, ok, at := tk.State, tk.Admitted, tk.Receipt.at
					if err != nil {
						t.Error(err)
						return
					}
					if st.Count > l.Count {
						t.Errorf("a Take saw %d changes in a window of %d", st.Count, l.Count)
					}
					if at != 0 {
						mu.Lock()
						admitted = append(admitted, at)
						mu.Unlock()
					}
					if !ok && (st.RetryAfter <= 0 || st.RetryAfter > l.Period) {
						t.Errorf("denied with retry-after %s, want within (0, %s]", st.RetryAfter, l.Period)
					}
				}
			})
		}
	}
	wg.Wait()
	slices.Sort(admitted)
	period := micros(l.Period)
	for i := 0; i+l.Count < len(admitted); i++ {
		if span := admitted[i+l.Count] - admitted[i]; span < period {
			t.Fatalf("%d changes recorded within %d µs, a window of %v holds at most %d", l.Count+1, span, l, l.Count)
		}
	}
	// Liveness: slots freed and were taken again (ideally Count per
	// Period; a loaded machine may leave some unused).
	if min := int(run/l.Period) * l.Count / 3; len(admitted) < min {
		t.Fatalf("only %d changes admitted in %s, want at least %d", len(admitted), run, min)
	}
	t.Logf("%d changes admitted over %s by %d stores × %d workers (the limit allows %d)", len(admitted), run, replicas, workers, int(run/l.Period+1)*l.Count)
}
