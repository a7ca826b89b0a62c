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
