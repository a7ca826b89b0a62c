package batchwrite

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// BenchmarkDecisionLineToAPipe writes decision-log-like lines through
// slog's JSON handler into a pipe that another process (cat, standing in
// for the container runtime's log reader) drains, 8 writers at once: a
// line per admission request, as the chart's stdout decision log gets
// them. It reports this process's CPU per line (getrusage) and the
// reader's, written through and grouped.
func BenchmarkDecisionLineToAPipe(b *testing.B) {
	for _, bc := range []struct {
		name     string
		interval time.Duration
	}{{"through", 0}, {"grouped_5ms", 5 * time.Millisecond}} {
		b.Run(bc.name, func(b *testing.B) {
			r, pw, err := os.Pipe()
			if err != nil {
				b.Fatal(err)
			}
			devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer devNull.Close()
			cat := exec.Command("cat")
			cat.Stdin, cat.Stdout = r, devNull
			if err := cat.Start(); err != nil {
				b.Fatal(err)
			}
			r.Close()
			w := New(pw, bc.interval, 64<<10)
			logger := slog.New(slog.NewJSONHandler(w, nil))
			b.SetParallelism(4)
			b.ReportAllocs()
			before := cpuTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					logDecision(logger)
				}
			})
			b.StopTimer()
			_ = w.Close()
			b.ReportMetric(float64((cpuTime()-before).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
			pw.Close()
			if err := cat.Wait(); err != nil {
				b.Fatal(err)
			}
			// The reader's side: a container runtime pays it per write.
			reader := cat.ProcessState.UserTime() + cat.ProcessState.SystemTime()
			b.ReportMetric(float64(reader.Nanoseconds())/1e3/float64(b.N), "reader-cpu-µs/op")
		})
	}
}

// logDecision logs a line shaped like qn-webhook's allowed decision.
func logDecision(l *slog.Logger) {
	l.LogAttrs(context.Background(), slog.LevelInfo, "admission decision",
		slog.String("webhook", "validate"), slog.Bool("allowed", true), slog.String("decision", "allowed"), slog.Int("code", 200),
		slog.String("uid", "4e032dc1-6527-4f5e-b195-03872c188709"), slog.String("user", "alice"),
		slog.Any("groups", []string{"system:masters", "system:authenticated"}), slog.String("operation", "CREATE"),
		slog.String("kind", "qn.dev/QuantumNode"), slog.String("namespace", "default"), slog.String("name", "edge-valid"),
		slog.Bool("dryRun", false), slog.String("role", "realtime"), slog.String("revision", "sha256:9fcb9c95bd4d"),
		slog.Int("patchOps", 0), slog.Group("window", slog.String("key", "user"), slog.Int("count", 1), slog.Int("limit", 120)),
		slog.Float64("latencyMs", 0.443), slog.String("remote", "10.0.0.10:51334"))
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
