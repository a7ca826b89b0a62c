package harness

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// pollInterval is how often a condition is asked again.
const pollInterval = 50 * time.Millisecond

// Eventually asks cond every 50ms until it returns nil, timeout passes or
// ctx ends; the last error explains a failure. Tests wait for the effect
// they look for, never a fixed sleep.
func Eventually(ctx context.Context, timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = cond(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s: %w", timeout, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(pollInterval):
		}
	}
}

// WaitFor is Eventually for a test: it fails t, saying what it waited for,
// when cond has not returned nil within timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Eventually(context.Background(), timeout, cond); err != nil {
		t.Fatalf("waiting until %s: %v", what, err)
	}
}
