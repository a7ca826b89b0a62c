package window

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
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
				_, ok, err := s.Take(ctx, "user:alice", realtime, tc.uid(i))
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
			_, ok, err := s.Take(ctx, keys[i&(keysPerGoroutine-1)], limit, u[i&(len(u)-1)])
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
