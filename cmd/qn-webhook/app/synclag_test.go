package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quantumnode/qn-admission/internal/health"
)

// A reloader that stops trying (stalled) leaves a changed directory
// unserved: the lag grows with the clock and the strict check fails at
// the bound; the next reload attempt, whatever its outcome, clears it.
func TestSyncLagFailsTheStrictCheckWhenReloadsStall(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "p.rego"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("package a\n")
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	attempt := clk.Now()
	state := func() health.ReloadState {
		mu.Lock()
		defer mu.Unlock()
		return health.ReloadState{LastAttempt: attempt}
	}
	reload := func() {
		mu.Lock()
		attempt = clk.Now()
		mu.Unlock()
	}
	const bound = 5 * time.Second
	lag := newSourceLag(dir, state, clk)
	check := lag.Check(bound)
	step := func(d time.Duration) {
		clk.SetTime(clk.Now().Add(d))
		lag.Sample()
	}

	step(time.Second)
	if lag.Lag() != 0 || check(context.Background()) != nil {
		t.Fatalf("lag %s before any change", lag.Lag())
	}
	// Touching a file without changing it is no change.
	write("package a\n")
	step(10 * time.Second)
	if lag.Lag() != 0 {
		t.Errorf("lag %s after a write of the same content", lag.Lag())
	}

	// The content changes and no reload tries it: stalled.
	write("package b\n")
	step(time.Second)
	step(3 * time.Second)
	if l := lag.Lag(); l != 3*time.Second || check(context.Background()) != nil {
		t.Errorf("lag %s, check %v 3s into the stall; want 3s and passing", l, check(context.Background()))
	}
	step(2 * time.Second)
	err := check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "the policies served lag "+dir+" by 5s (bound 5s): its content changed and no reload has tried it") {
		t.Errorf("check %v 5s into the stall; want it failing", err)
	}

	// A reload tries it (it may fail: the policies check judges that).
	reload()
	step(time.Second)
	if lag.Lag() != 0 || check(context.Background()) != nil {
		t.Errorf("lag %s, check %v after a reload tried the new content", lag.Lag(), check(context.Background()))
	}
}
