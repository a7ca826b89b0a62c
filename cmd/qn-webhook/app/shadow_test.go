package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A shadow directory that does not exist yet (a git-sync sidecar still
// cloning) neither stops the server nor its readiness; once it lands it is
// loaded, judges every request off the response path, and its
// disagreements are a metric and a decision line while the served answers
// stay the served set's.
func TestAShadowSetThatLandsLateJudgesRequestsWithoutChangingAnswers(t *testing.T) {
	dir := t.TempDir()
	shadowDir := filepath.Join(dir, "shadow")
	decisions := filepath.Join(dir, "decisions.jsonl")
	s := start(t, dir, "--shadow-policy-dir="+shadowDir, "--policy-poll-interval=100ms", "--decision-log="+decisions)
	s.eventuallyProbe(t, "/readyz?verbose", 200, "waiting for "+shadowDir+" to exist")

	if got := s.admit(t, "/validate", review("before", validSpec)); !got.Allowed {
		t.Fatalf("refused before the shadow set landed: %+v", got.Result)
	}
	// The candidate refuses every node; written aside and renamed into
	// place, as git-sync swaps a checkout in.
	staging := filepath.Join(dir, "staging")
	if err := os.MkdirAll(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"roles.yaml": "defaultRole: default\nroles:\n  default:\n    operations: [CREATE, UPDATE, DELETE]\n    packages: [candidate]\n",
		"p.rego":     "package candidate\ndeny contains \"the candidate refuses every node\" if true\n",
	} {
		if err := os.WriteFile(filepath.Join(staging, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(staging, shadowDir); err != nil {
		t.Fatal(err)
	}
	s.eventuallyProbe(t, "/readyz?verbose", 200, "[+]shadow ok: candidate sha256:")
	// The candidate's source is not called "serving": the served set is.
	s.eventuallyProbe(t, "/readyz?verbose", 200, "; candidate loaded from "+shadowDir+" at ")
	if _, ready := s.probe(t, "/readyz?verbose"); strings.Contains(shadowLine(ready), "serving") {
		t.Errorf("the shadow line says serving, read as the served set: %s", shadowLine(ready))
	}

	for _, uid := range []string{"a", "b", "c"} {
		if got := s.admit(t, "/validate", review(uid, validSpec)); !got.Allowed {
			t.Fatalf("request %s refused: the shadow changed a served answer: %+v", uid, got.Result)
		}
	}
	if got := s.admit(t, "/validate", review("d", noArchSpec)); got.Allowed {
		t.Fatalf("a node without an architecture was admitted")
	}
	// Three newly refused; the node both refuse, for other reasons, is a
	// disagreement of its reasons; the request served before the set
	// landed was not shadowed.
	s.eventuallyProbe(t, "/readyz?verbose", 200, "4 judged, 4 disagreements, 1 dropped")
	_, metrics := s.probe(t, "/metrics")
	for _, want := range []string{
		`qn_admission_shadow_disagreements_total{from="allowed",role="default",to="denied"} 3`,
		`qn_admission_shadow_disagreements_total{from="denied",role="default",to="denied"} 1`,
		`qn_admission_shadow_dropped_total{reason="unloaded"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	log, _ := awaitDecisions(t, decisions, func(log string) bool {
		return strings.Count(log, `"msg":"shadow disagreement"`) >= 4
	})
	if n := strings.Count(string(log), `"msg":"shadow disagreement"`); n != 4 {
		t.Errorf("%d shadow disagreement lines in the decision log, want 4:\n%s", n, log)
	}
	if !strings.Contains(string(log), "the candidate refuses every node") {
		t.Errorf("the decision lines lack the candidate's reason:\n%s", log)
	}
}

// shadowLine is the shadow check's line of /readyz?verbose.
func shadowLine(ready string) string {
	for _, l := range strings.Split(ready, "\n") {
		if strings.Contains(l, "]shadow ") {
			return l
		}
	}
	return ""
}
