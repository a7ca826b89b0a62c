package app

import (
	"encoding/json"
	"strings"
	"testing"
)

// qnctl impact --decision-log reports what qn-webhook's shadow set found:
// each "shadow disagreement" line a flip from the served answer to the
// shadow's, grouped by role and package, other lines counted and left.
func TestImpactReadsTheShadowsDisagreementsFromADecisionLog(t *testing.T) {
	const log = "testdata/decisionlog/shadow.jsonl"
	code, out, errOut := run(t, "", "impact", "--decision-log", log)
	if code != exitFailed || !strings.Contains(errOut, "1 would newly be denied by the shadow set; --allow-new-denials accepts that") {
		t.Fatalf("exit %d, want 1 for a new denial\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"proposed shadow (--shadow-policy-dir) (revision git:9a07) against base served (revision git:4f1c)",
		"2 requests judged; 1 not judged: decision lines other than shadow disagreements",
		"role default, package qn.ssh: 1 newly denied",
		`NEWLY DENIED  CREATE edge/ssh-1 by "alice"`,
		"role realtime, package qn.roles.realtime: 1 newly allowed",
		"[" + log + ":3]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = run(t, "", "impact", "--decision-log", log, "-o", "json", "--allow-new-denials", "-n", "edge")
	var report impactReport
	if err := json.Unmarshal([]byte(out), &report); code != exitOK || err != nil {
		t.Fatalf("exit %d, %v:\n%s", code, err, out)
	}
	if report.Totals[changeNewlyDenied] != 1 || report.Totals[changeNewlyAllowed] != 1 || len(report.Groups) != 2 {
		t.Errorf("totals %v, %d groups", report.Totals, len(report.Groups))
	}
	if code, _, errOut := run(t, "", "impact", "--decision-log", log, "--base", "main"); code != exitBadInput || !strings.Contains(errOut, "without --base, --proposed or other inputs") {
		t.Errorf("--decision-log with --base: exit %d %s", code, errOut)
	}
	if code, _, errOut := run(t, "", "impact", "--decision-log", log, "-n", "nowhere"); code != exitBadInput || !strings.Contains(errOut, "nothing was judged") {
		t.Errorf("no line in the namespace: exit %d %s", code, errOut)
	}
}
