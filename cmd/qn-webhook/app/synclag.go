package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/quantumnode/qn-admission/internal/dirwatch"
	"github.com/quantumnode/qn-admission/internal/health"
	"github.com/quantumnode/qn-admission/policies"
)

// sourceLag measures how far the policies qn-webhook serves lag their
// directory (--strict-max-sync-lag): it samples the directory's content
// (policies.IsPolicyFile's files, and a git-sync worktree's commit) every interval,
// and the content a reload last tried (whatever its outcome: a reload that
// fails is the policies check's, with its grace). The lag is how long the
// directory has held content no reload has tried yet: a watcher that
// missed the change, or a reloader that stopped. A ConfigMap's or
// git-sync's swap is normally tried within milliseconds.
type sourceLag struct {
	dir         string
	state       func() health.ReloadState
	fingerprint func(dir string) (string, error)
	clock       clock.PassiveClock

	mu sync.Mutex
	// current is the directory's content at the last sample, and
	// changedAt when a sample first saw it.
	current   string
	changedAt time.Time
	// tried is the content the newest reload attempt saw, sampled once
	// the attempt was seen; attempt is that attempt's start.
	tried   string
	attempt time.Time
	err     error
}

func newSourceLag(dir string, state func() health.ReloadState, clk clock.PassiveClock) *sourceLag {
	// One Fingerprinter, so a sample lists again only directories that
	// changed: a checkout of 100,000 other files costs no CPU each second.
	fingerprints := dirwatch.NewFingerprinter(policies.IsPolicyFile)
	return &sourceLag{dir: dir, state: state, clock: clk, fingerprint: func(dir string) (string, error) {
		fp, err := fingerprints.Fingerprint(dir)
		return fp + " " + dirwatch.WorktreeCommit(dir), err
	}}
}

// Sample reads the directory's content and the reloader's newest attempt.
func (s *sourceLag) Sample() {
	fp, err := s.fingerprint(s.dir)
	attempt := s.state().LastAttempt
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
	if err != nil {
		return // a directory being swapped; the next sample sees it
	}
	if fp != s.current {
		s.current, s.changedAt = fp, now
	}
	if s.tried == "" || attempt.After(s.attempt) {
		// The first sample, or a reload began since the last one: what
		// the directory holds now is what it tried (or newer, and then
		// the change that made it newer triggers another reload).
		s.tried, s.attempt = fp, attempt
	}
}

// Lag is how long the directory has held content no reload has tried.
func (s *sourceLag) Lag() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == s.tried {
		return 0
	}
	return s.clock.Since(s.changedAt)
}

// Check fails once the lag reaches bound.
func (s *sourceLag) Check(bound time.Duration) func(context.Context) error {
	return func(context.Context) error {
		if lag := s.Lag(); lag >= bound {
			return fmt.Errorf("the policies served lag %s by %s (bound %s): its content changed and no reload has tried it (last reload began %s)",
				s.dir, lag.Round(time.Millisecond), bound, s.lastAttempt())
		}
		return nil
	}
}

func (s *sourceLag) lastAttempt() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attempt.IsZero() {
		return "never"
	}
	return s.attempt.UTC().Format(time.RFC3339)
}

// Detail is the lag for ?verbose.
func (s *sourceLag) Detail() string {
	return fmt.Sprintf("policies %s behind %s", s.Lag().Round(time.Millisecond), s.dir)
}

// Run samples every interval until ctx ends.
func (s *sourceLag) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.Sample()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sourceLagMetric is qn_admission_policy_sync_lag_seconds.
func sourceLagMetric(s *sourceLag) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "qn_admission_policy_sync_lag_seconds",
		Help: "How long --policy-dir has held content no policy reload has tried yet (0 while every change has been tried).",
	}, func() float64 { return s.Lag().Seconds() })
}
