package app

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
)

// eventuallyProbe polls path until it answers code with a body containing
// want, or fails after 15s with the last answer.
func (s *started) eventuallyProbe(t *testing.T, path string, code int, want string) string {
	t.Helper()
	var body string
	harness.WaitFor(t, 15*time.Second, fmt.Sprintf("GET %s answers %d containing %q", path, code, want), func() error {
		var got int
		if got, body = s.probe(t, path); got != code || !strings.Contains(body, want) {
			return fmt.Errorf("GET %s = %d %q", path, got, body)
		}
		return nil
	})
	return body
}

// A broken policy push keeps the last good set serving and the replica
// live and ready, and turns strict health unhealthy once the grace has
// passed; the fix turns it healthy again. Real files, real server.
func TestStrictHealthFollowsABrokenPolicyPushAndItsFix(t *testing.T) {
	dir := t.TempDir()
	policyDir := filepath.Join(dir, "policies")
	if err := os.CopyFS(policyDir, os.DirFS(filepath.Join("..", "..", "..", "rego", "bundle"))); err != nil {
		t.Fatal(err)
	}
	s := start(t, dir, "--policy-dir="+policyDir, "--policy-poll-interval=100ms", "--strict-reload-grace=1s")
	s.eventuallyProbe(t, "/healthz?strict=true", 200, "ok")
	s.eventuallyProbe(t, "/healthz?strict=true&verbose", 200, "[+]sync ok: policies 0s behind "+policyDir)
	if _, metrics := s.probe(t, "/metrics"); !strings.Contains(metrics, "qn_admission_policy_sync_lag_seconds 0") {
		t.Errorf("/metrics lacks qn_admission_policy_sync_lag_seconds 0")
	}

	broken := filepath.Join(policyDir, "broken.rego")
	if err := os.WriteFile(broken, []byte("package qn.broken\ndeny contains msg if {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	body := s.eventuallyProbe(t, "/healthz?strict=true", http.StatusServiceUnavailable, "[-]policies failed (strict): the policy source has failed to load for")
	if !strings.Contains(body, "broken.rego") || !strings.Contains(body, "still serving sha256:") {
		t.Errorf("strict health names neither the broken file nor the revision still served:\n%s", body)
	}
	// The broken push was tried: that is the policies check's to judge,
	// with its grace, not a sync lag.
	if _, verbose := s.probe(t, "/healthz?strict=true&verbose"); !strings.Contains(verbose, "[+]sync ok: policies 0s behind") {
		t.Errorf("a tried (and refused) push counts as sync lag:\n%s", verbose)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := s.probe(t, path); code != 200 {
			t.Errorf("a broken push must not fail plain %s (a restart or an unready replica fixes nothing): %d %q", path, code, body)
		}
	}
	if code, body := s.probe(t, "/readyz?strict=true"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz?strict=true = %d %q, want 503 as /healthz?strict=true", code, body)
	}
	if _, metrics := s.probe(t, "/metrics"); !strings.Contains(metrics, `qn_health_check_failing{check="policies"} 1`) {
		t.Errorf("/metrics lacks qn_health_check_failing{check=\"policies\"} 1")
	}

	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	s.eventuallyProbe(t, "/healthz?strict=true", 200, "ok")
	if _, metrics := s.probe(t, "/metrics"); !strings.Contains(metrics, `qn_health_check_failing{check="policies"} 0`) {
		t.Errorf("after the fix /metrics lacks qn_health_check_failing{check=\"policies\"} 0")
	}
}

// A serving certificate closer to its expiry than --strict-cert-min-validity
// fails strict health, and only strict health, naming the date.
func TestStrictHealthFailsOnACertificateNearExpiry(t *testing.T) {
	s := start(t, t.TempDir(), "--strict-cert-min-validity=876000h") // 100 years: any certificate is near expiry
	code, body := s.probe(t, "/healthz?strict=true&verbose")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "[-]certificate failed (strict): the serving certificate expires at") ||
		!strings.Contains(body, "less than --strict-cert-min-validity") {
		t.Errorf("/healthz?strict=true = %d %q, want 503 naming the expiry", code, body)
	}
	if code, _ := s.probe(t, "/readyz"); code != 200 {
		t.Errorf("plain /readyz = %d: a certificate near expiry still serves, the replica stays ready", code)
	}
	s2 := start(t, t.TempDir())
	if code, body := s2.probe(t, "/healthz?strict=true&verbose"); code != 200 || !strings.Contains(body, "[+]certificate ok: serving, expires") {
		t.Errorf("with the default minimum validity a fresh self-signed pair is healthy: %d %q", code, body)
	}
}

// Answers from a role's onError count against the error ratio: a policy
// that fails at evaluation, with onError allow, admits every request and
// turns strict health unhealthy; plain probes stay green.
func TestStrictHealthCountsOnErrorAnswers(t *testing.T) {
	dir := t.TempDir()
	policyDir := filepath.Join(dir, "policies")
	files := map[string]string{
		"roles.yaml": "defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    packages: [p]\n    onError: allow\n",
		// sprintf needs an array: an error at evaluation, not at load.
		"p.rego": "package p\ndeny contains msg if { msg := sprintf(\"%d\", input.context.labels) }\n",
	}
	if err := os.MkdirAll(policyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(policyDir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := start(t, dir, "--policy-dir="+policyDir)
	if code, body := s.probe(t, "/healthz?strict=true&verbose"); code != 200 || !strings.Contains(body, "[+]errors ok: 0 answers, 0 failed") {
		t.Fatalf("before any request strict health passes: %d %q", code, body)
	}
	for i := range 25 {
		if got := s.admit(t, "/validate", review(fmt.Sprintf("uid-%d", i), validSpec)); !got.Allowed {
			t.Fatalf("onError allow admits: %+v", got)
		}
	}
	code, body := s.probe(t, "/healthz?strict=true")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "[-]errors failed (strict): 25 of the last 10s's 25 answers (100.00 %)") {
		t.Errorf("/healthz?strict=true = %d %q, want 503 with the ratio", code, body)
	}
	if code, _ := s.probe(t, "/readyz"); code != 200 {
		t.Errorf("plain /readyz = %d, want 200", code)
	}
	// Admitted, but not decided by the policies: counted as errors.
	if _, metrics := s.probe(t, "/metrics"); !strings.Contains(metrics, `qn_admission_requests_total{code="200",decision="error",role="r",webhook="validate"} 25`) {
		t.Errorf("/metrics does not count the onError answers as decision=\"error\"")
	}
}

// Profiling is off unless asked for.
func TestPprofOnlyWithTheFlag(t *testing.T) {
	off := start(t, t.TempDir())
	if code, _ := off.probe(t, "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("without --pprof, /debug/pprof/ = %d, want 404", code)
	}
	on := start(t, t.TempDir(), "--pprof")
	if code, body := on.probe(t, "/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("with --pprof, /debug/pprof/ = %d, want 200 with the profile index", code)
	}
	if code, body := on.probe(t, "/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("with --pprof, the goroutine profile = %d %.80q", code, body)
	}
}
