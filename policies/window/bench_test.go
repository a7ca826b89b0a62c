package window

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/quantumnode/qn-admission/test/redistest"
)

// tickClock advances by step on every reading, so a benchmark reaches a
// steady state where each Take lets one change leave and records one: the
// admitted path with a full log to search, not the cheaper denied path.
type tickClock struct {
	step  time.Duration
	ticks atomic.Int64
}

func (c *tickClock) Now() time.Time {
	return t0.Add(time.Duration(c.ticks.Add(1)) * c.step)
}

func (c *tickClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// uids returns n request uids shaped like the apiserver's.
func uids(prefix string, n int) []string {
	u := make([]string, n)
	for i := range u {
		u[i] = fmt.Sprintf("%s-0b9d-4c1e-9a1f-%012d", prefix, i)
	}
	return u
}

func BenchmarkTakeExistingKey(b *testing.B) {
	ctx := context.Background()
	fill, u := uids("0f1c2a7e", realtime.Count), uids("6f1c2a7e", 1<<12)
	cases := map[string]struct {
		step time.Duration
		uid  func(i int) string
		want bool
	}{
		// One change leaves per Take: 119 held, the uid check scans them all.
		// The retried uid is the oldest entry, the longest scan.
		"admitted at the realtime limit": {step: realtime.Period / time.Duration(realtime.Count), uid: func(i int) string { return u[i&(len(u)-1)] }, want: true},
		"denied in a full window":        {step: 0, uid: func(i int) string { return u[i&(len(u)-1)] }, want: false},
		"retried uid":                    {step: 0, uid: func(int) string { return fill[0] }, want: true},
	}
	for name, tc := range cases {
		b.Run(name, func(b *testing.B) {
			clk := &tickClock{step: tc.step}
			s := NewMemoryStore(clk, MemoryOptions{})
			for _, uid := range fill {
				take(b, s, "user:alice", realtime, uid)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				tk, err := s.Take(ctx, "user:alice", realtime, tc.uid(i))
				ok := tk.Admitted
				if err != nil || ok != tc.want {
					b.Fatalf("Take %d: admitted=%v err=%v, want admitted=%v", i, ok, err, tc.want)
				}
			}
		})
	}
}

func BenchmarkTakeParallelDistinctKeys(b *testing.B) {
	ctx := context.Background()
	const keysPerGoroutine = 1 << 10
	// Each key sees a Take every keysPerGoroutine×goroutines ticks; a
	// period of 100×keysPerGoroutine ticks keeps about 100/goroutines
	// changes per key, so every Take is admitted and one change leaves.
	clk := &tickClock{step: time.Microsecond}
	limit := Limit{Count: realtime.Count, Period: 100 * keysPerGoroutine * time.Microsecond}
	s := NewMemoryStore(clk, MemoryOptions{})
	u := uids("6f1c2a7e", 1<<12)
	var goroutine atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		g := goroutine.Add(1)
		keys := make([]string, keysPerGoroutine)
		for i := range keys {
			keys[i] = fmt.Sprintf("user:g%d-%d", g, i)
		}
		for i := 0; pb.Next(); i++ {
			tk, err := s.Take(ctx, keys[i&(keysPerGoroutine-1)], limit, u[i&(len(u)-1)])
			ok := tk.Admitted
			if err != nil || !ok {
				b.Errorf("Take: admitted=%v err=%v", ok, err)
				return
			}
		}
	})
}

func BenchmarkPeek(b *testing.B) {
	ctx := context.Background()
	clk := &tickClock{}
	s := NewMemoryStore(clk, MemoryOptions{})
	for _, uid := range uids("6f1c2a7e", realtime.Count) {
		take(b, s, "user:alice", realtime, uid)
	}
	b.ReportAllocs()
	for b.Loop() {
		st, err := s.Peek(ctx, "user:alice", realtime)
		if err != nil || st.Count != realtime.Count {
			b.Fatalf("Peek = %+v, %v", st, err)
		}
	}
}

// redisBenchStore is a RedisStore on a fresh redis-server on loopback,
// configured as qn-webhook's but with a deadline no stall of a shared
// machine reaches (filling 10,000 users' windows once hit 250 ms under a
// load average of 20): the benchmarks measure cost, not outages.
func redisBenchStore(b *testing.B, clk clock.PassiveClock) (*RedisStore, redis.UniversalClient, *redistest.Server) {
	srv := redistest.Start(b)
	c, err := NewRedisClient(RedisConfig{Address: srv.Addr, Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return NewRedisStore(c, RedisOptions{Clock: clk}), c, srv
}

// reportLatency adds the median and 99th percentile of one call to the
// benchmark's figures: the latency a request waits for its window.
func reportLatency(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkRedisTake is one Take over loopback against a real
// redis-server: the round trip, the Lua script and the client's
// allocations. Each case mirrors BenchmarkTakeExistingKey.
func BenchmarkRedisTake(b *testing.B) {
	ctx := context.Background()
	fill, u := uids("0f1c2a7e", realtime.Count), uids("6f1c2a7e", 1<<12)
	cases := map[string]struct {
		// step, when set, drives a caller clock (one change leaves per
		// Take); otherwise the server's clock runs.
		step time.Duration
		key  func(i int) string
		uid  func(i int) string
		want bool
	}{
		"admitted at the realtime limit": {step: realtime.Period / time.Duration(realtime.Count), key: func(int) string { return "rt/user/alice" }, uid: func(i int) string { return u[i&(len(u)-1)] }, want: true},
		"denied in a full window":        {key: func(int) string { return "rt/user/alice" }, uid: func(i int) string { return u[i&(len(u)-1)] }, want: false},
		"retried uid":                    {key: func(int) string { return "rt/user/alice" }, uid: func(int) string { return fill[0] }, want: true},
		"first change of a new user":     {key: func(i int) string { return fmt.Sprintf("rt/user/u%d", i) }, uid: func(i int) string { return u[i&(len(u)-1)] }, want: true},
	}
	for name, tc := range cases {
		b.Run(name, func(b *testing.B) {
			var clk clock.PassiveClock
			if tc.step > 0 {
				clk = &tickClock{step: tc.step}
			}
			s, _, srv := redisBenchStore(b, clk)
			for _, uid := range fill {
				if _, err := s.Take(ctx, "rt/user/alice", realtime, uid); err != nil {
					b.Fatal(err)
				}
			}
			lat := make([]time.Duration, 0, 1<<16)
			b.ReportAllocs()
			cpu, redisCPU := cpuTime(), srv.CPU()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				tk, err := s.Take(ctx, tc.key(i), realtime, tc.uid(i))
				ok := tk.Admitted
				if len(lat) < cap(lat) {
					lat = append(lat, time.Since(start))
				}
				if err != nil || ok != tc.want {
					b.Fatalf("Take %d: admitted=%v err=%v, want admitted=%v", i, ok, err, tc.want)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
			// redis-server's side: the script, and the round trip's syscalls.
			b.ReportMetric(float64((srv.CPU()-redisCPU).Nanoseconds())/1e3/float64(b.N), "redis-cpu-µs/op")
			reportLatency(b, lat)
		})
	}
}

// cpuTime is the user and system CPU this process has used: what a Take
// costs the webhook, Redis's own CPU excluded.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRedisTakeParallel is many requests at once from one replica,
// each its own user: the pool's concurrency against one server.
func BenchmarkRedisTakeParallel(b *testing.B) {
	s, _, _ := redisBenchStore(b, nil)
	var goroutine atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		g := goroutine.Add(1)
		for i := 0; pb.Next(); i++ {
			key := fmt.Sprintf("rt/user/g%d-%d", g, i%1024)
			if _, err := s.Take(context.Background(), key, realtime, fmt.Sprintf("g%d-%d", g, i)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRedisMemoryPer10kUsers measures Redis's used_memory for 10,000
// users' windows holding 1, 10 or 120 changes each (the realtime limit),
// written as the script writes them (8-byte members, microsecond scores,
// a TTL), and reports it per user.
func BenchmarkRedisMemoryPer10kUsers(b *testing.B) {
	const users = 10_000
	for _, changes := range []int{1, 10, 120} {
		b.Run(fmt.Sprintf("%d changes each", changes), func(b *testing.B) {
			s, c, _ := redisBenchStore(b, nil)
			ctx := context.Background()
			var perUser float64
			for b.Loop() {
				if err := c.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				before := usedMemory(b, c)
				now := time.Now().UnixMicro()
				pipe := c.Pipeline()
				for u := range users {
					key := s.Key(fmt.Sprintf("realtime/user/user-%d", u))
					members := make([]redis.Z, changes)
					for i := range members {
						id, _ := changeID(fmt.Sprintf("uid-%d-%d", u, i))
						members[i] = redis.Z{Score: float64(now + int64(i)*1000), Member: id}
					}
					pipe.ZAdd(ctx, key, members...)
					pipe.PExpire(ctx, key, realtime.Period)
					if u%500 == 499 {
						if _, err := pipe.Exec(ctx); err != nil {
							b.Fatal(err)
						}
					}
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
				perUser = float64(usedMemory(b, c)-before) / users
			}
			b.ReportMetric(perUser, "bytes/user")
			b.ReportMetric(perUser*users/(1<<20), "MiB/10k-users")
		})
	}
}

func usedMemory(b *testing.B, c redis.UniversalClient) int64 {
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}
