package webhook

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
	"github.com/quantumnode/qn-admission/test/redistest"
)

// BenchmarkValidateWindowStore is the whole validate path of a realtime
// CREATE (BenchmarkValidateRealtime) with each window store, on the real
// clock, eight requests in flight, each by one of 1,024 users so none
// reaches its limit. It reports this process's CPU per request (user +
// system, from getrusage, GC included): the webhook's cost of a shared
// window (two round trips: the window for the policy input, then the
// slot), Redis's own CPU excluded.
func BenchmarkValidateWindowStore(b *testing.B) {
	stores := map[string]func(b *testing.B) window.Counter{
		"memory": func(*testing.B) window.Counter { return window.NewMemoryStore(nil, window.MemoryOptions{}) },
		"redis": func(b *testing.B) window.Counter {
			srv := redistest.Start(b)
			c, err := window.NewRedisClient(window.RedisConfig{Address: srv.Addr})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			rs := window.NewRedisStore(c, window.RedisOptions{})
			if err := rs.Load(context.Background()); err != nil {
				b.Fatal(err)
			}
			// Likewise for the store: this measures cost, not outages.
			return window.NewGuard(rs, window.GuardOptions{Name: "redis", Timeout: 5 * time.Second})
		},
	}
	for name, store := range stores {
		b.Run(name, func(b *testing.B) {
			// A policy deadline no stall of this shared machine reaches.
			set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{EvalTimeout: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			engine := policies.NewEngine(set, policies.EngineOptions{Windows: store(b)})
			h := NewHandler(engine, HandlerOptions{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
			bodies := make([]string, 1024)
			for i := range bodies {
				bodies[i] = strings.Replace(fmt.Sprintf(realtimeReview, i), `"username":"alice"`, fmt.Sprintf(`"username":"user-%d"`, i), 1)
			}
			b.ReportAllocs()
			// Eight requests in flight, as a loaded server has: a request
			// waiting for Redis leaves the CPU to the others.
			b.SetParallelism(4)
			var next atomic.Int64
			before := cpuTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := int(next.Add(1))
					req := httptest.NewRequest(http.MethodPost, "/validate", strings.NewReader(bodies[i%len(bodies)]))
					req.Header.Set("Content-Type", "application/json")
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"allowed":true`) {
						b.Errorf("unexpected answer: %s", rec.Body.String())
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-before).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// cpuTime is the user and system CPU this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
