package filewatch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	clocktesting "k8s.io/utils/clock/testing"
)

const deadline = 10 * time.Second

// started runs Run with o until the test ends and returns the looks it
// reports, the first one (at start) already taken.
func started(t *testing.T, o Options, look func() error) <-chan struct{} {
	t.Helper()
	looks := make(chan struct{}, 100)
	o.Look = func(context.Context) error {
		looks <- struct{}{}
		return look()
	}
	ready := make(chan struct{})
	o.OnStart = func() { close(ready) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v after cancel, want nil", err)
		}
	})
	select {
	case <-ready:
	case <-time.After(deadline):
		t.Fatal("Run did not start")
	}
	waitLook(t, looks, "the look at start")
	return looks
}

func waitLook(t *testing.T, looks <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-looks:
	case <-time.After(deadline):
		t.Fatalf("no look: %s", what)
	}
}

func noLook(t *testing.T, looks <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-looks:
		t.Fatalf("an unexpected look: %s", what)
	case <-time.After(200 * time.Millisecond):
	}
}

// A failed look is retried with backoff from Debounce, doubling up to the
// poll interval, and the backoff ends once a look succeeds.
func TestFailedLooksAreRetriedWithBackoff(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	failures := make(chan error, 10)
	for range 3 {
		failures <- errors.New("half written")
	}
	looks := started(t, Options{
		What:         "test files",
		Targets:      func() Targets { return Targets{} },
		Debounce:     time.Second,
		PollInterval: 100 * time.Second,
		Clock:        clk,
		NewNotifier:  func() (*fsnotify.Watcher, error) { return nil, errors.New("no inotify") },
	}, func() error {
		select {
		case err := <-failures:
			return err
		default:
			return nil
		}
	})
	// The look at start failed: retries after 1s and 2s fail too, the one
	// after 4s succeeds, and then nothing until the poll.
	for _, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		waitTimerArmed(t, clk)
		clk.Step(wait - time.Millisecond)
		noLook(t, looks, "before the backoff of "+wait.String()+" elapsed")
		clk.Step(time.Millisecond)
		waitLook(t, looks, "the retry after "+wait.String())
	}
	clk.Step(50 * time.Second)
	noLook(t, looks, "after a look succeeded")
}

// waitTimerArmed waits until a retry timer waits beside the poll ticker.
func waitTimerArmed(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	end := time.Now().Add(deadline)
	for clk.Waiters() < 2 {
		if time.Now().After(end) {
			t.Fatal("no retry timer armed")
		}
		time.Sleep(time.Millisecond)
	}
}

// Events in a watched directory lead to one look after the burst; events for
// names the target does not list, and attribute changes, lead to none.
func TestEventsLeadToOneLookAfterTheBurst(t *testing.T) {
	dir := t.TempDir()
	looks := started(t, Options{
		What:         "test files",
		Targets:      func() Targets { return Targets{dir: {"watched": true}} },
		Debounce:     50 * time.Millisecond,
		PollInterval: time.Hour,
	}, func() error { return nil })

	if err := os.WriteFile(filepath.Join(dir, "other"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	noLook(t, looks, "a name the target does not list")
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(dir, "watched"), []byte{byte(i)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitLook(t, looks, "after writes to a watched name")
	noLook(t, looks, "a second look for the same burst")
	if err := os.Chmod(filepath.Join(dir, "watched"), 0o600); err != nil {
		t.Fatal(err)
	}
	noLook(t, looks, "a chmod")
}

func TestRunRefusesAMissingLook(t *testing.T) {
	if err := Run(context.Background(), Options{Targets: func() Targets { return nil }}); err == nil {
		t.Error("Run without Look: no error")
	}
}
