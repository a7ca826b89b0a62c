package hostile

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// metric reads one unlabelled sample from /metrics, -1 when absent.
func (s *server) metric(name string) float64 {
	s.t.Helper()
	code, page := s.probe("/metrics")
	if code != 200 {
		s.t.Fatalf("/metrics: HTTP %d", code)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(page)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func (s *server) waitFor(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out waiting until %s\n%s", what, tail(s.proc.Logs(), 2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestAtTheDescriptorLimitProbesAndReloadsKeepWorking is finding 5: with
// the descriptors exhausted by stalled connections, reviews took 10-13s,
// probes stopped and the certificate re-read failed. The admission
// listener's connection cap keeps descriptors for them.
func TestAtTheDescriptorLimitProbesAndReloadsKeepWorking(t *testing.T) {
	s := start(t, "--max-connections", "100", "--cert-poll-interval", "100ms")
	// 256 descriptors, as a tight container might give: far fewer than the
	// stalled connections below.
	limit := unix.Rlimit{Cur: 256, Max: 256}
	if err := unix.Prlimit(s.proc.PID(), unix.RLIMIT_NOFILE, &limit, nil); err != nil {
		t.Skipf("cannot lower qn-webhook's descriptor limit here: %v", err)
	}
	errorsBefore := s.metric("qn_certificate_reload_errors_total")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 400 {
		c, err := net.DialTimeout("tcp", s.proc.Address, 5*time.Second)
		if err != nil {
			t.Fatalf("open a stalled connection: %v", err)
		}
		_, _ = c.Write([]byte{0x16, 0x03, 0x01})
		conns = append(conns, c)
	}
	time.Sleep(time.Second) // ten certificate re-reads
	// Stalled connections are closed after 10s (the header timeout), which
	// frees descriptors: everything below must happen well before that.
	began := time.Now()
	for range 20 {
		code, body := s.probe("/readyz?verbose")
		if code != 200 {
			t.Fatalf("readiness with 400 stalled connections and 256 descriptors: HTTP %d\n%s", code, body)
		}
	}
	if after := s.metric("qn_certificate_reload_errors_total"); after != errorsBefore {
		t.Fatalf("certificate re-reads failed with the admission connections at their cap: %v → %v errors\n%s", errorsBefore, after, tail(s.proc.Logs(), 2000))
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Fatalf("20 readiness probes and a metrics scrape took %s with the admission connections at their cap", took)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	s.normalStillWorks()
}

// TestABrokenCertificateKeepsTheReplicaReady is finding 6: one bad
// certificate file made every replica unready while the old pair still
// served. It is now an alert (metric, readiness detail), not an outage.
func TestABrokenCertificateKeepsTheReplicaReady(t *testing.T) {
	certDir := t.TempDir()
	s := startIn(t, certDir, "--cert-poll-interval", "100ms")
	good, err := os.ReadFile(filepath.Join(certDir, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(certDir, "tls.crt"), []byte("-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.waitFor("the broken certificate is counted", func() bool { return s.metric("qn_certificate_reload_errors_total") > 0 })
	code, body := s.probe("/readyz?verbose")
	if code != 200 || !strings.Contains(body, "[+]certificate ok: WARNING: still serving the previous certificate") {
		t.Fatalf("want ready with a warning in the detail, got HTTP %d\n%s", code, body)
	}
	if s.metric("qn_certificate_expiry_timestamp_seconds") < float64(time.Now().Unix()) {
		t.Fatal("qn_certificate_expiry_timestamp_seconds is the served certificate's expiry, in the future")
	}
	s.normalStillWorks()
	if err := os.WriteFile(filepath.Join(certDir, "tls.crt"), good, 0o600); err != nil {
		t.Fatal(err)
	}
	s.waitFor("the detail clears", func() bool {
		_, body := s.probe("/readyz?verbose")
		return strings.Contains(body, "[+]certificate ok: serving, expires")
	})
}

// TestBrokenOrDeletedPoliciesKeepTheLastGoodSet: a broken push and a
// deleted policy directory are visible in /readyz?verbose and a metric,
// the replica stays ready and the last good set keeps judging.
func TestBrokenOrDeletedPoliciesKeepTheLastGoodSet(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	copyBundle(t, dir)
	s := start(t, "--policy-dir", dir, "--policy-poll-interval", "100ms")
	for name, tc := range map[string]struct {
		breakIt    func()
		wantDetail string
	}{
		"a Rego syntax error": {
			breakIt:    func() { writeFile(t, filepath.Join(dir, "broken.rego"), "package broken\ndeny contains x if {\n") },
			wantDetail: "broken.rego:",
		},
		"the directory deleted": {
			breakIt:    func() { os.RemoveAll(dir) },
			wantDetail: "cannot be read",
		},
	} {
		t.Run(name, func(t *testing.T) {
			s.t = t
			tc.breakIt()
			s.waitFor("the failure shows in readiness", func() bool {
				_, body := s.probe("/readyz?verbose")
				return strings.Contains(body, tc.wantDetail)
			})
			if code, body := s.probe("/readyz?verbose"); code != 200 || !strings.Contains(body, "failed and was not applied") {
				t.Fatalf("want ready, saying the change was not applied: HTTP %d\n%s", code, body)
			}
			if v := s.metric("qn_admission_policy_reload_failing"); v != 1 {
				t.Fatalf("qn_admission_policy_reload_failing = %v, want 1", v)
			}
			s.normalStillWorks()
			os.RemoveAll(dir)
			copyBundle(t, dir)
			s.waitFor("the restored directory clears the failure", func() bool { return s.metric("qn_admission_policy_reload_failing") == 0 })
		})
	}
}

func copyBundle(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("../../rego/bundle")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("../../rego/bundle", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, e.Name()), string(b))
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPathologicalRegoIsCutByItsDeadline: a policy that loops for minutes
// on some objects is stopped by the evaluation deadline with a 500 that
// names the role, and other requests keep being judged.
func TestPathologicalRegoIsCutByItsDeadline(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	copyBundle(t, dir)
	slow := `
# Nine million steps for an object labelled slow=yes.
deny contains "never" if {
	object.get(input.request.object, ["metadata", "labels", "slow"], "") == "yes"
	some a in numbers.range(1, 3000)
	some b in numbers.range(1, 3000)
	a * b == -1
}
`
	src, err := os.ReadFile(filepath.Join(dir, "quantumnode.rego"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "quantumnode.rego"), string(src)+slow)
	s := start(t, "--policy-dir", dir, "--policy-eval-timeout", "500ms")
	obj := node("edge-1", nil, services(1))
	obj["metadata"].(map[string]any)["labels"] = map[string]string{"slow": "yes"}
	began := time.Now()
	r := s.post("/validate", review("slow", "alice", "CREATE", obj))
	took := time.Since(began)
	if r.status != 200 || r.review.Response.Allowed || r.code() != 500 || !strings.Contains(r.message(), "default") {
		t.Fatalf("want a 500 denial naming the role, got HTTP %d %.300s", r.status, r.raw)
	}
	if took > 3*time.Second {
		t.Fatalf("the evaluation deadline is 500ms, the answer took %s", took)
	}
	s.normalStillWorks()
	s.memory()
	t.Logf("a nine-million-step policy answered in %s: %s", took, r.message())
}
