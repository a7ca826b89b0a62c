package app

import (
	"encoding/json"
	"strings"
	"testing"
)

// testPatterns is a policy directory whose roles are judged by pattern
// policies beside Rego (standard) and by patterns alone (patterns-only).
const testPatterns = "testdata/patterns"

func TestEvalExplainsWhichPatternFired(t *testing.T) {
	other := "testdata/inputs/node-other-team.yaml"
	for name, tc := range map[string]struct {
		golden string
		args   []string
	}{
		"a pattern's denial beside Rego, and an Audit pattern's warning": {"explain/pattern-denied.golden", []string{other, "--user", "alice"}},
		"a role judged by patterns alone":                                {"explain/pattern-only.golden", []string{other, "--role", "patterns-only"}},
		"patterns that pass, on a node of the right team":                {"explain/pattern-passed.golden", []string{"testdata/inputs/node-ops-team.yaml"}},
	} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"eval", "--policy-dir", testPatterns, "--time", testTime, "--explain", "--webhook", "validate"}, tc.args...)
			_, out, errOut := run(t, "", args...)
			if errOut != "" {
				t.Fatalf("stderr: %s", errOut)
			}
			golden(t, tc.golden, out)
		})
	}
}

func TestEvalJSONNamesThePatternPathAndLine(t *testing.T) {
	code, out, errOut := run(t, "", "eval", "--policy-dir", testPatterns, "--time", testTime, "--explain", "-o", "json",
		"--webhook", "validate", "testdata/inputs/node-other-team.yaml")
	if code != exitFailed || errOut != "" {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	var got struct {
		Validate struct {
			Explanation struct {
				Patterns []patternView `json:"patterns"`
			} `json:"explanation"`
		} `json:"validate"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	ps := got.Validate.Explanation.Patterns
	if len(ps) != 2 || ps[0].Name != "team-label" || ps[0].Outcome != "failed" || ps[0].Action != "deny" ||
		len(ps[0].Failures) != 1 || ps[0].Failures[0].Path != "/metadata/labels/team/" || ps[0].Failures[0].Location != "team-label.pattern.yaml:9" {
		t.Fatalf("team-label: %+v", ps)
	}
	if ps[1].Name != "services-audit" || ps[1].Action != "warn" || ps[1].Failures[0].Location != "services-audit.pattern.yaml:8" {
		t.Fatalf("services-audit: %+v", ps[1])
	}
}

func TestTestRunsFixtureCasesOnPatternPolicies(t *testing.T) {
	code, out, _ := run(t, "", "test", testPatterns)
	if code != exitOK || !strings.Contains(out, "PASS  fixture the team pattern denies another team and says where") ||
		!strings.Contains(out, "PASS: 0 Rego tests, 5 fixture cases: 5 passed, 0 failed") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	wrong := `cases:
- name: a pattern denial expected where the pattern admits
  object: {apiVersion: qn.dev/v1alpha1, kind: QuantumNode, metadata: {name: n1, labels: {team: ops}}, spec: {hardware: {arch: amd64}, services: [{name: metrics, port: 9100}]}}
  expect: {allowed: false, message: pattern team-label failed}
`
	code, out, _ = run(t, "", "test", copyDir(t, testPatterns, map[string]string{"fixtures/wrong.yaml": wrong}))
	if code != exitFailed || !strings.Contains(out, "FAIL  fixture a pattern denial expected where the pattern admits") ||
		!strings.Contains(out, `message: want it to contain "pattern team-label failed", got ""`) {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	broken := "kind: PatternPolicy\nvalidate:\n  message: m\n  pattern:\n    metadata:\n      labels:\n        +(team): ops\n"
	code, out, errOut := run(t, "", "test", copyDir(t, testPatterns, map[string]string{"team-label.pattern.yaml": broken}))
	if code == exitOK || !strings.Contains(out+errOut, "team-label.pattern.yaml:7: validate.pattern.metadata.labels.+(team): +() (add if not present) is a mutate anchor") {
		t.Fatalf("a broken pattern file fails the run with file and line; exit %d:\n%s%s", code, out, errOut)
	}
}
