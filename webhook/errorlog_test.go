package webhook

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestServerErrorLogIsThrottled(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(1000, 0)
	w := &throttledWriter{logger: slog.New(slog.NewTextHandler(&out, nil)), burst: 3, interval: 10 * time.Second, now: func() time.Time { return now }}
	for range 10 {
		w.Write([]byte("http: TLS handshake error from 10.0.0.1:1234: EOF\n"))
	}
	if got := strings.Count(out.String(), "TLS handshake error"); got != 3 {
		t.Fatalf("%d lines passed in one interval, want the burst of 3:\n%s", got, out.String())
	}
	now = now.Add(10 * time.Second)
	w.Write([]byte("http: TLS handshake error from 10.0.0.1:1235: EOF\n"))
	if !strings.Contains(out.String(), "admission server errors left out of the log") || !strings.Contains(out.String(), "count=7") {
		t.Fatalf("the next interval must start with the count of the 7 lines left out:\n%s", out.String())
	}
	if got := strings.Count(out.String(), "TLS handshake error"); got != 4 {
		t.Fatalf("the next interval passes lines again: %d lines in all, want 4", got)
	}
}
