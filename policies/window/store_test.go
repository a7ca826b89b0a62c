package window

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quantumnode/qn-admission/test/redistest"
)

// storeUnderTest makes fresh, empty stores of one kind whose time the test
// steps, so the same specification runs against every Store.
type storeUnderTest struct {
	name string
	// tick is the store's time resolution: the shortest step that
	// changes an answer.
	tick time.Duration
	new  func(t *testing.T) (Store, *clocktesting.FakeClock)
}

// forEachStore runs spec against the MemoryStore and against a RedisStore
// on a real redis-server (started once per top-level test; each store gets
// its own key prefix, so stores never see each other's windows).
func forEachStore(t *testing.T, spec func(t *testing.T, sut storeUnderTest)) {
	t.Helper()
	var srv *redistest.Server
	if _, err := exec.LookPath("redis-server"); err == nil {
		srv = redistest.Start(t)
	}
	made := 0
	stores := []storeUnderTest{
		{name: "memory", tick: time.Nanosecond, new: func(*testing.T) (Store, *clocktesting.FakeClock) {
			return newStore(MemoryOptions{})
		}},
		{name: "redis", tick: time.Microsecond, new: func(t *testing.T) (Store, *clocktesting.FakeClock) {
			if srv == nil {
				redistest.Binary(t) // skips loudly, or fails in CI
			}
			made++
			clk := clocktesting.NewFakeClock(t0)
			return NewRedisStore(redisClient(t, srv), RedisOptions{Prefix: fmt.Sprintf("test%d:", made), Clock: clk}), clk
		}},
	}
	for _, sut := range stores {
		t.Run(sut.name, func(t *testing.T) { spec(t, sut) })
	}
}

// redisClient is a client of srv configured as qn-webhook's, closed when
// the test ends.
func redisClient(t testing.TB, srv *redistest.Server) redis.UniversalClient {
	c, err := NewRedisClient(RedisConfig{Address: srv.Addr, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// entriesHeld is how many changes the store keeps for key, counted or not:
// the memory a key costs.
func entriesHeld(t *testing.T, s Store, key string) int {
	t.Helper()
	switch s := s.(type) {
	case *MemoryStore:
		id, sh := s.lookup(key)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if k := sh.keys[id]; k != nil {
			return max(k.n, len(k.entries))
		}
		return 0
	case *RedisStore:
		n, err := s.client.(redis.Cmdable).ZCard(context.Background(), s.Key(key)).Result()
		if err != nil {
			t.Fatalf("ZCARD %s: %v", s.Key(key), err)
		}
		return int(n)
	}
	t.Fatalf("entriesHeld: unknown store %T", s)
	return 0
}
