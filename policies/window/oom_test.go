package window

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/quantumnode/qn-admission/test/redistest"
)

// TestARedisOutOfMemoryRecordsNothing: with Redis at maxmemory under
// maxmemory-policy noeviction, a Take is refused with ErrStoreOutOfMemory
// and writes nothing; through the Guard it counts as a store failure of
// reason "oom", and the role's onStoreError decides: failOpen counts the
// change locally, failClosed refuses it. A slot taken before can still be
// given back. Before, the script ran on and wrote past maxmemory: five
// Takes admitted, each a ZADD and a PEXPIREAT over the limit.
func TestARedisOutOfMemoryRecordsNothing(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	rs := NewRedisStore(srv.Client(), RedisOptions{})
	ctx := context.Background()
	limit := Limit{Count: 100, Period: time.Minute}
	if err := rs.Load(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := rs.Take(ctx, "r/user/early", limit, "early")
	if err != nil {
		t.Fatal(err)
	}
	srv.FillToMaxmemory()

	for i := range 5 {
		_, err := rs.Take(ctx, "r/user/alice", limit, fmt.Sprintf("u%d", i))
		if !errors.Is(err, ErrStoreOutOfMemory) || !strings.Contains(err.Error(), "redis is out of memory") {
			t.Fatalf("take %d at maxmemory: err = %v, want ErrStoreOutOfMemory", i, err)
		}
	}
	if n, err := srv.Client().Exists(ctx, rs.Key("r/user/alice")).Result(); err != nil || n != 0 {
		t.Fatalf("the window key exists after refused takes (%d, %v): the script wrote at maxmemory", n, err)
	}
	if err := rs.Release(ctx, "r/user/early", before.Receipt); err != nil {
		t.Fatalf("giving a slot back at maxmemory: %v", err)
	}

	reg := prometheus.NewRegistry()
	metrics := NewStoreMetrics(reg)
	g := NewGuard(rs, GuardOptions{Name: "redis", Timeout: time.Second, Metrics: metrics})
	open, err := g.TakeWith(ctx, FailOpen, "r/user/bob", limit, "b1")
	if err != nil || !open.Fallback || !open.Admitted || !errors.Is(open.StoreErr, ErrStoreOutOfMemory) {
		t.Fatalf("failOpen at maxmemory: %+v, %v; want a local count that says Redis is out of memory", open, err)
	}
	if _, err := g.TakeWith(ctx, FailClosed, "r/user/bob", limit, "b2"); !errors.Is(err, ErrStoreUnavailable) || !errors.Is(err, ErrStoreOutOfMemory) {
		t.Fatalf("failClosed at maxmemory: err = %v, want unavailable, out of memory", err)
	}
	if got := testutil.ToFloat64(metrics.errors.WithLabelValues("redis", "take", "oom")); got != 1 {
		t.Fatalf("qn_window_store_errors_total{reason=oom} = %v, want 1 (the second call found the store down)", got)
	}
	t.Logf("refused: %v", open.StoreErr)
}

// replyError is an error reply of the server (redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// redis6 makes a Redis 7 answer as Redis 6 does to a script with a
// shebang: a compile error on its first line.
type redis6 struct{}

func (redis6) DialHook(next redis.DialHook) redis.DialHook { return next }

func (redis6) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && (s == takeScript.Hash() || strings.HasPrefix(s, "#!")) {
				err := replyError("ERR Error compiling script (new function): user_script:1: unexpected symbol near '#'")
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (redis6) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestARedisBefore7TakesInTheOldForm: a server that refuses take.lua's
// shebang (Redis before 7) gets the script in Redis 6's form, at Load and
// at a Take without Load, and the takes count as before.
func TestARedisBefore7TakesInTheOldForm(t *testing.T) {
	for name, load := range map[string]bool{"after Load": true, "without Load": false} {
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			c := srv.Client()
			c.AddHook(redis6{})
			rs := NewRedisStore(c, RedisOptions{})
			if load {
				if err := rs.Load(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			limit := Limit{Count: 2, Period: time.Minute}
			for i, want := range []bool{true, true, false} {
				tk, err := rs.Take(context.Background(), "r/user/alice", limit, fmt.Sprintf("u%d", i))
				if err != nil || tk.Admitted != want {
					t.Fatalf("take %d: admitted %v, %v; want %v", i, tk.Admitted, err, want)
				}
			}
			if rs.take.Load() != legacyTakeScript {
				t.Fatal("the store still runs the shebang form")
			}
		})
	}
}
