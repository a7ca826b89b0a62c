package webhook

import (
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// The admission server's own error lines (TLS handshake errors, mostly) are
// written at most serverLogBurst per serverLogInterval: a caller opening
// thousands of connections must not turn the log into its amplifier. The
// lines left out are counted in a summary line when the interval ends.
const (
	serverLogBurst    = 20
	serverLogInterval = 10 * time.Second
)

// throttledWriter passes at most burst lines per interval to logger and
// counts the rest.
type throttledWriter struct {
	logger   *slog.Logger
	burst    int
	interval time.Duration
	now      func() time.Time

	mu         sync.Mutex
	start      time.Time
	written    int
	suppressed int
}

// newThrottledErrorLog is an http.Server ErrorLog that writes through
// logger at warning level, throttled.
func newThrottledErrorLog(logger *slog.Logger, burst int, interval time.Duration) *log.Logger {
	return log.New(&throttledWriter{logger: logger, burst: burst, interval: interval, now: time.Now}, "", 0)
}

func (w *throttledWriter) Write(p []byte) (int, error) {
	now := w.now()
	w.mu.Lock()
	if now.Sub(w.start) >= w.interval {
		if w.suppressed > 0 {
			w.logger.Warn("admission server errors left out of the log", "count", w.suppressed, "interval", w.interval.String())
		}
		w.start, w.written, w.suppressed = now, 0, 0
	}
	pass := w.written < w.burst
	if pass {
		w.written++
	} else {
		w.suppressed++
	}
	w.mu.Unlock()
	if pass {
		w.logger.Warn(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}
