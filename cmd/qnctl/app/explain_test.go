package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExplainGolden(t *testing.T) {
	valid := "testdata/inputs/node-valid.yaml"
	invalid := "testdata/inputs/node-invalid.yaml"
	cases := map[string]struct {
		golden   string
		args     []string
		wantCode int
	}{
		"a denial names the deny rule and the violation rules behind each message": {
			"explain/denied.golden", []string{invalid, "--user", "alice"}, exitFailed},
		"an admitted request shows the patch rule, the warning rule and the default role": {
			"explain/admitted.golden", []string{valid, "--user", "alice"}, exitOK},
		"a full namespace window is shown as policies see it, before the 429": {
			"explain/window-full.golden", []string{valid, "--role", "strict", "--user", "alice", "--window-count", "2", "--webhook", "validate"}, exitFailed},
		"a role named by annotation, with its own package and parameters": {
			"explain/role-annotation.golden", []string{valid, "--role", "strict", "--user", "bob", "--webhook", "validate"}, exitFailed},
		"an operation the role may not perform stops before any policy": {
			"explain/operation-denied.golden", []string{valid, "--role", "strict", "--old", valid, "--old-role", "strict", "--webhook", "validate"}, exitFailed},
		"an annotation that names no role": {
			"explain/unknown-role.golden", []string{"testdata/inputs/node-unknown-role.yaml", "--webhook", "validate"}, exitFailed},
		"an exempt group is admitted without role, policies or window": {
			"explain/exempt.golden", []string{invalid, "--group", "break-glass", "--webhook", "validate"}, exitOK},
		"a malformed request is refused before the engine": {
			"explain/malformed.golden", []string{"testdata/inputs/review-kind-mismatch.json", "--webhook", "validate"}, exitFailed},
		"the trace of failures shows why the fast path did not hold": {
			"explain/trace-fails.golden", []string{invalid, "--webhook", "validate", "--trace=fails"}, exitFailed},
		"the explanation in JSON": {
			"explain/denied.json.golden", []string{invalid, "--webhook", "validate", "-o", "json"}, exitFailed},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"eval", "--policy-dir", testPolicies, "--time", testTime, "--explain"}, tc.args...)
			code, out, errOut := run(t, "", args...)
			if code != tc.wantCode {
				t.Fatalf("exit code %d, want %d\n%s%s", code, tc.wantCode, out, errOut)
			}
			golden(t, tc.golden, out)
		})
	}
}

// The explanation must account for exactly the entries the decision
// reports: every reason of the answer is attributed to a rule, and no rule
// is credited with an entry the answer lacks.
func TestExplanationAccountsForEveryReasonOfTheDecision(t *testing.T) {
	for name, args := range map[string][]string{
		"bundled policies, two QuantumNode violations": {"--policy-dir", "", "../../../test/testdata/review-duplicate-port.json"},
		"test policies, a denial under strict":         {"--policy-dir", testPolicies, "--role", "strict", "--user", "bob", "testdata/inputs/node-invalid.yaml"},
	} {
		t.Run(name, func(t *testing.T) {
			_, out, errOut := run(t, "", append([]string{"eval", "--explain", "-o", "json", "--webhook", "validate"}, args...)...)
			var doc struct {
				Validate struct {
					Reasons  []string `json:"reasons"`
					Warnings []string `json:"warnings"`
					Explain  struct {
						Packages []packageView `json:"packages"`
					} `json:"explanation"`
				} `json:"validate"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("%v\n%s%s", err, out, errOut)
			}
			attributed := map[string][]string{}
			for _, p := range doc.Validate.Explain.Packages {
				for _, e := range p.Entries {
					attributed[e.Rule] = append(attributed[e.Rule], entryText(e.Value))
					if !strings.Contains(e.Location, ".rego:") {
						t.Errorf("entry %v has no file:line: %q", e.Value, e.Location)
					}
				}
			}
			if !sameStrings(attributed["deny"], doc.Validate.Reasons) {
				t.Errorf("deny entries %q, decision reasons %q", attributed["deny"], doc.Validate.Reasons)
			}
			if !sameStrings(attributed["warn"], doc.Validate.Warnings) {
				t.Errorf("warn entries %q, decision warnings %q", attributed["warn"], doc.Validate.Warnings)
			}
		})
	}
}

func sameStrings(a, b []string) bool {
	set := map[string]int{}
	for _, s := range a {
		set[s]++
	}
	for _, s := range b {
		set[s]--
	}
	for _, n := range set {
		if n != 0 {
			return false
		}
	}
	return true
}

func TestTraceFullIsAReadableRegoTrace(t *testing.T) {
	_, out, _ := run(t, "", "eval", "--policy-dir", testPolicies, "--time", testTime, "--webhook", "validate", "--trace", "testdata/inputs/node-invalid.yaml")
	for _, want := range []string{"trace (full):", "Enter data.demo.nodes.deny", "nodes.rego:", "Exit data.demo.nodes.violation"} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
}

// TestExplainShowsAClusterPolicysRules: --explain lists each rule of a
// role's Kyverno ClusterPolicy with its verdict, file and line, and -o
// json carries them.
func TestExplainShowsAClusterPolicysRules(t *testing.T) {
	roles := strings.Replace(mustRead(t, testPolicies+"/roles.yaml"),
		"    packages: [demo.nodes, demo.label]\n", "    packages: [demo.nodes, demo.label]\n    policies: [zone]\n", 1)
	dir := copyDir(t, testPolicies, map[string]string{
		"roles.yaml": roles,
		"zone.yaml": "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: zone}\nspec:\n  validationFailureAction: Enforce\n  rules:\n" +
			"  - name: zone-label\n    match: {resources: {kinds: [QuantumNode]}}\n    validate:\n      message: nodes need a zone\n      pattern: {metadata: {labels: {zone: \"?*\"}}}\n" +
			"  - name: pods-only\n    match: {resources: {kinds: [Pod]}}\n    validate: {pattern: {spec: {x: 1}}}\n",
	})
	node := filepath.Join(t.TempDir(), "node.json")
	if err := os.WriteFile(node, []byte(demoNode("n9", "arm64", 8080)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run(t, "", "eval", "--policy-dir", dir, "--explain", "--webhook", "validate", "--time", testTime, node)
	if code != exitFailed {
		t.Fatalf("exit %d: %s\n%s", code, stderr, out)
	}
	for _, want := range []string{
		"  ClusterPolicy zone\n",
		"rule zone-label fail (zone.yaml:7)",
		"validation error: nodes need a zone. rule zone-label failed at path /metadata/labels/",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explanation lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "pods-only") {
		t.Errorf("a rule that does not match the request is listed:\n%s", out)
	}
	_, js, _ := run(t, "", "eval", "--policy-dir", dir, "--explain", "--webhook", "validate", "--time", testTime, "-o", "json", node)
	if !strings.Contains(js, `"kind": "ClusterPolicy"`) || !strings.Contains(js, `"action": "deny"`) {
		t.Errorf("-o json lacks the policy's rules:\n%s", js)
	}
}
