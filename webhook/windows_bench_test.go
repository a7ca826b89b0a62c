package webhook

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
	"github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/redistest"
)

// BenchmarkValidateWindowStore is the whole validate path of a realtime
// CREATE (BenchmarkValidateRealtime) with each window store, on the real
// clock, 8 or 32 requests in flight, each by one of 1,024 users so none
// reaches its limit. It reports CPU per request (user + system, GC
// included): this process's (getrusage), redis-server's (/proc/<pid>/stat)
// and their sum, the cost of a shared window as a user pays it.
func BenchmarkValidateWindowStore(b *testing.B) {
	type store struct {
		counter window.Counter
		// redisPID is redis-server's process, whose CPU counts too.
		redisPID int
	}
	stores := map[string]func(b *testing.B) store{
		"memory": func(*testing.B) store { return store{counter: window.NewMemoryStore(nil, window.MemoryOptions{})} },
		"redis": func(b *testing.B) store {
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
			return store{counter: window.NewGuard(rs, window.GuardOptions{Name: "redis", Timeout: 5 * time.Second}), redisPID: srv.PID()}
		},
	}
	for name, newStore := range stores {
		for _, inFlight := range []int{8, 32} {
			b.Run(fmt.Sprintf("%s/%d_in_flight", name, inFlight), func(b *testing.B) {
				// A policy deadline no stall of this shared machine reaches.
				set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{EvalTimeout: 10 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				st := newStore(b)
				engine := policies.NewEngine(set, policies.EngineOptions{Windows: st.counter})
				h := NewHandler(engine, HandlerOptions{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
				bodies := make([]string, 1024)
				for i := range bodies {
					bodies[i] = strings.Replace(fmt.Sprintf(realtimeReview, i), `"username":"alice"`, fmt.Sprintf(`"username":"user-%d"`, i), 1)
				}
				b.ReportAllocs()
				// Requests in flight, as a loaded server has: a request
				// waiting for Redis leaves the CPU to the others.
				b.SetParallelism(max(inFlight/runtime.GOMAXPROCS(0), 1))
				var next atomic.Int64
				before, redisBefore := cpuTime(), processCPU(b, st.redisPID)
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
				self := float64((cpuTime() - before).Microseconds()) / float64(b.N)
				redis := float64((processCPU(b, st.redisPID) - redisBefore).Microseconds()) / float64(b.N)
				b.ReportMetric(self, "cpu-µs/op")
				b.ReportMetric(redis, "redis-cpu-µs/op")
				b.ReportMetric(self+redis, "total-cpu-µs/op")
			})
		}
	}
}

// processCPU is the CPU time process pid has used (0 for pid 0).
func processCPU(b *testing.B, pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	s, err := harness.ReadProc(pid)
	if err != nil {
		b.Fatal(err)
	}
	return s.CPU
}

// cpuTime is the user and system CPU this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
