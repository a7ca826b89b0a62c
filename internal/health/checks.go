package health

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// StrictOptions are the thresholds of the strict checks, shared by both
// binaries' flags.
type StrictOptions struct {
	// ReloadGrace is how long a failed policy reload may last (the last
	// good set serving) before strict health fails: long enough for a
	// git-sync or ConfigMap update to finish, short enough to page.
	ReloadGrace time.Duration
	// MaxPolicyAge fails strict health when the served set was loaded
	// longer ago than this (0: off). Meant for sources that publish on a
	// schedule, where an old set means the publisher stopped.
	MaxPolicyAge time.Duration
	// MaxErrorRatio is the largest share of failed answers over the last
	// AnswerWindow.
	MaxErrorRatio float64
	// MaxSyncLag fails strict health once what a binary serves lags its
	// source this much: qn-webhook's policies behind their directory,
	// qn-controller's informers behind the API server (0: off).
	MaxSyncLag time.Duration
}

// DefaultStrictOptions are the flags' defaults.
func DefaultStrictOptions() StrictOptions {
	return StrictOptions{ReloadGrace: 2 * time.Minute, MaxErrorRatio: 0.005, MaxSyncLag: 5 * time.Second}
}

// AddFlags binds the thresholds to fs, with the same names in both
// binaries.
func (o *StrictOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.ReloadGrace, "strict-reload-grace", o.ReloadGrace, "How long policy reloads may fail (the last good set serving) before /healthz?strict=true fails.")
	fs.DurationVar(&o.MaxPolicyAge, "strict-max-policy-age", o.MaxPolicyAge, "With --policy-dir, fail /healthz?strict=true when the served set was loaded longer ago than this (0: off); for publishers on a schedule.")
	fs.Float64Var(&o.MaxErrorRatio, "strict-max-error-ratio", o.MaxErrorRatio, "Largest share of the last 10s's answers (admission answers from onError or our own failure; failed reconciles) before /healthz?strict=true fails.")
	fs.DurationVar(&o.MaxSyncLag, "strict-max-sync-lag", o.MaxSyncLag, "Fail /healthz?strict=true once what is served lags its source this much: qn-webhook's policies behind a changed --policy-dir not yet reloaded, qn-controller's informers behind the API server (a heartbeat Lease read back through a watch); 0 turns it off.")
}

// Validate names the first threshold that cannot work.
func (o StrictOptions) Validate() error {
	switch {
	case o.ReloadGrace < 0:
		return fmt.Errorf("--strict-reload-grace must not be negative, got %s", o.ReloadGrace)
	case o.MaxPolicyAge < 0:
		return fmt.Errorf("--strict-max-policy-age must not be negative, got %s", o.MaxPolicyAge)
	case o.MaxErrorRatio < 0 || o.MaxErrorRatio > 1:
		return fmt.Errorf("--strict-max-error-ratio must be between 0 and 1, got %g", o.MaxErrorRatio)
	case o.MaxSyncLag != 0 && o.MaxSyncLag < time.Second:
		return fmt.Errorf("--strict-max-sync-lag must be 0 (off) or at least 1s, got %s", o.MaxSyncLag)
	}
	return nil
}

// ReloadState is what a followed policy source reports about itself.
type ReloadState struct {
	// Revision is the set being served and LoadedAt when it was loaded.
	Revision string
	LoadedAt time.Time
	// LastAttempt is when the newest reload, whatever its outcome, began.
	LastAttempt time.Time
	// FailingSince is when the reloads started failing (zero while the
	// newest content is served) and Err the latest failure.
	FailingSince time.Time
	Err          error
}

// PoliciesCheck fails once reloads have failed for longer than
// o.ReloadGrace (a broken push is served as the last good set; after the
// grace that is an outage of the policy pipeline), and when the served set
// is older than o.MaxPolicyAge.
func PoliciesCheck(state func() ReloadState, o StrictOptions, now func() time.Time) func(context.Context) error {
	if now == nil {
		now = time.Now
	}
	return func(context.Context) error {
		s := state()
		t := now()
		if !s.FailingSince.IsZero() && t.Sub(s.FailingSince) > o.ReloadGrace {
			return fmt.Errorf("the policy source has failed to load for %s (grace %s), still serving %s: %v",
				t.Sub(s.FailingSince).Round(time.Second), o.ReloadGrace, s.Revision, s.Err)
		}
		if o.MaxPolicyAge > 0 && !s.LoadedAt.IsZero() && t.Sub(s.LoadedAt) > o.MaxPolicyAge {
			return fmt.Errorf("the served policy set %s was loaded %s ago, longer than --strict-max-policy-age %s: is the policy publisher (git-sync, CI) still running?",
				s.Revision, t.Sub(s.LoadedAt).Round(time.Second), o.MaxPolicyAge)
		}
		return nil
	}
}

// CertificateCheck fails when the serving certificate cannot be served as
// it should (healthy returns why) or expires within minValidity.
func CertificateCheck(healthy func() error, notAfter func() time.Time, minValidity time.Duration, now func() time.Time) func(context.Context) error {
	if now == nil {
		now = time.Now
	}
	return func(context.Context) error {
		if err := healthy(); err != nil {
			return err
		}
		left := notAfter().Sub(now())
		if left < minValidity {
			return fmt.Errorf("the serving certificate expires at %s, in %s, less than --strict-cert-min-validity %s: is cert-manager renewing it?",
				notAfter().UTC().Format(time.RFC3339), left.Round(time.Second), minValidity)
		}
		return nil
	}
}
