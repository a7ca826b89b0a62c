package app

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestLintReportsEveryProblemWithFileLineAndHint(t *testing.T) {
	runLintCases(t, map[string]lintCase{
		"a clean directory": {
			wantCode: exitOK,
			want:     []string{"ok (2 roles, 4 Rego files, 2 Rego tests, 0 pattern policies (0 listed by a role); input type-checked against QuantumNode qn.dev/v1alpha1)"},
		},
		"a package with deny rules that no role lists is a warning at its rule": {
			edits:    map[string]string{"unlisted.rego": "package demo.unlisted\n\nimport rego.v1\n\ndeny contains \"never\" if input.request.object.spec.nodeName\n"},
			wantCode: exitOK,
			want: []string{`unlisted.rego:5: warning: package "demo.unlisted" has a deny rule but no role in roles.yaml lists it, so it never runs`,
				"hint: add demo.unlisted to the packages of the roles it should judge", "ok with 1 warning"},
		},
		"--strict fails on that warning, and says so": {
			edits:    map[string]string{"unlisted.rego": "package demo.unlisted\n\ndeny contains \"never\" if input.request.object.spec.nodeName\n"},
			args:     []string{"--strict"},
			wantCode: exitFailed,
			want:     []string{`package "demo.unlisted" has a deny rule but no role`, ": FAILED with --strict: 1 warning ("},
		},
		"a package unlisted on purpose (a comment line says so) is no warning": {
			edits:    map[string]string{"unlisted.rego": "# An example to copy from.\n# qnctl lint-ignore: unlisted\npackage demo.unlisted\n\ndeny contains \"never\" if input.request.object.spec.nodeName\n"},
			args:     []string{"--strict"},
			wantCode: exitOK,
			clean:    true,
		},
		"a pattern policy unlisted on purpose is no warning, and is counted as such": {
			edits:    map[string]string{"example.pattern.yaml": "# qnctl lint-ignore: unlisted\nkind: PatternPolicy\nvalidate:\n  message: nodes need an owner\n  pattern:\n    metadata:\n      labels:\n        owner: \"?*\"\n"},
			args:     []string{"--strict"},
			wantCode: exitOK,
			clean:    true,
			want:     []string{"1 pattern policy (0 listed by a role, 1 unlisted on purpose)"},
		},
		"the directive must be a comment: a description that quotes it is not one": {
			edits:    map[string]string{"example.pattern.yaml": "kind: PatternPolicy\ndescription: \"qnctl lint-ignore: unlisted\"\nvalidate:\n  message: nodes need an owner\n  pattern:\n    metadata:\n      labels:\n        owner: \"?*\"\n"},
			args:     []string{"--strict"},
			wantCode: exitFailed,
			want:     []string{`pattern policy "example" is listed by no role`},
		},
		"a pattern policy no role lists is a warning, and every pattern file is counted": {
			edits: map[string]string{
				"tiered.pattern.yaml":   "kind: PatternPolicy\nvalidate:\n  message: nodes need a tier\n  pattern:\n    metadata:\n      labels:\n        tier: \"?*\"\n",
				"unlisted.pattern.yaml": "kind: PatternPolicy\nvalidate:\n  message: nodes need an owner\n  pattern:\n    metadata:\n      labels:\n        owner: \"?*\"\n",
				"roles.yaml":            "defaultRole: standard\nroles:\n  standard:\n    operations: [CREATE]\n    packages: [demo.nodes]\n    patterns: [tiered]\n",
			},
			wantCode: exitOK,
			want: []string{`unlisted.pattern.yaml:1: warning: pattern policy "unlisted" is listed by no role in roles.yaml, so it never runs`,
				"2 pattern policies (1 listed by a role)"},
		},
		"a Kyverno ClusterPolicy no role lists is a warning at its document; one a role lists loads": {
			edits: map[string]string{
				"kyverno.yaml": "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: needs-team}\nspec:\n  rules:\n  - name: team\n    match: {resources: {kinds: [QuantumNode]}}\n    validate: {pattern: {metadata: {labels: {team: \"?*\"}}}}\n" +
					"---\napiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: needs-tier}\nspec:\n  rules:\n  - name: tier\n    match: {resources: {kinds: [QuantumNode]}}\n    validate: {pattern: {metadata: {labels: {tier: \"?*\"}}}}\n",
				"roles.yaml": "defaultRole: standard\nroles:\n  standard:\n    operations: [CREATE]\n    packages: [demo.nodes]\n    policies: [needs-tier]\n",
			},
			wantCode: exitOK,
			want:     []string{`kyverno.yaml:1: warning: ClusterPolicy "needs-team" is listed by no role in roles.yaml, so it never runs`, "ok with 3 warnings"},
		},
		"a Kyverno ClusterPolicy with a mutate rule is an error at its rule, never ignored": {
			edits: map[string]string{
				"kyverno.yaml": "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: add-team}\nspec:\n  rules:\n  - name: team\n    match: {resources: {kinds: [QuantumNode]}}\n    mutate: {patchStrategicMerge: {metadata: {labels: {team: x}}}}\n",
			},
			wantCode: exitFailed,
			want:     []string{`kyverno.yaml:6: error: spec.rules[0].mutate: rule "team": mutate rules are not supported`},
		},
		"http.send in a deny rule is a performance warning under --allow-network-builtins": {
			edits: map[string]string{
				"net.rego":   "package demo.net\n\ndeny contains msg if {\n\tr := http.send({\"method\": \"get\", \"url\": \"http://x\"})\n\tmsg := r.body\n}\n",
				"roles.yaml": "defaultRole: standard\nroles:\n  standard:\n    operations: [CREATE]\n    packages: [demo.nodes, demo.net]\n",
			},
			args:     []string{"--allow-network-builtins"},
			wantCode: exitOK,
			want: []string{`net.rego:4: warning: rule deny of package "demo.net" calls http.send: a network round trip inside every admission request it judges`,
				"hint: read the data from data.json"},
		},
		"a Rego v0 rule and a syntax error in two files are both reported": {
			edits: map[string]string{
				"old.rego":    "package demo.old\n\ndeny[msg] {\n\tmsg := \"x\"\n}\n",
				"broken.rego": "package demo.broken\n\nwarn contains msg if {\n",
			},
			wantCode: exitFailed,
			want: []string{
				"old.rego:3:1: error: rego_parse_error: `if` keyword is required before rule body",
				"hint: policies are Rego v1: write `deny contains msg if { ... }`",
				"broken.rego:4:",
				"3 errors, 0 warnings",
			},
		},
		"a network built-in is refused with the flag that allows it": {
			edits:    map[string]string{"net.rego": "package demo.net\n\ndeny contains msg if {\n\tr := http.send({\"method\": \"get\", \"url\": \"http://x\"})\n\tmsg := r.body\n}\n"},
			wantCode: exitFailed,
			want:     []string{"net.rego:4:7: error: rego_type_error: undefined function http.send", "pass --allow-network-builtins"},
		},
		"an unsafe variable": {
			edits:    map[string]string{"unsafe.rego": "package demo.unsafe\n\ndeny contains msg if {\n\tmsg := y\n}\n"},
			wantCode: exitFailed,
			want:     []string{"unsafe.rego:4:", "rego_unsafe_var_error", "hint: bind the variable before using it"},
		},
		"a role table mistake names its line": {
			edits:    map[string]string{"roles.yaml": "defaultRole: standard\nroles:\n  standard:\n    operations: [CREATE, PATCH]\n    packages: [demo.nodes]\n"},
			wantCode: exitFailed,
			want:     []string{`roles.yaml:4: error: roles.standard.operations: "PATCH" is not an operation (use CREATE, UPDATE, DELETE, CONNECT)`},
		},
		"every role table mistake and a Rego error in one run": {
			edits: map[string]string{
				"roles.yaml":  "defaultRole: standard\nroles:\n  standard:\n    operations: [CREATE, PATCH]\n    packages: [demo.nodes]\n    enforcement: audit\n    window: {limit: 0, period: soon}\n",
				"broken.rego": "package demo.broken\n\nwarn contains msg if {\n\tmsg := y\n}\n",
			},
			wantCode: exitFailed,
			want: []string{
				`roles.yaml:4: error: roles.standard.operations: "PATCH" is not an operation`,
				`roles.yaml:6: error: roles.standard.enforcement: "audit" is not an enforcement`,
				`roles.yaml:7: error: roles.standard.window.limit: 0 admits nothing`,
				`roles.yaml:7: error: roles.standard.window.period: "soon" is not a positive duration`,
				"broken.rego:4:2: error: rego_unsafe_var_error: var y is unsafe",
				"5 errors, 0 warnings",
			},
		},
		"a package the role table lists but no file declares": {
			edits:    map[string]string{"roles.yaml": "defaultRole: standard\nroles:\n  standard:\n    operations: [CREATE]\n    packages: [demo.nodes, demo.typo]\n"},
			wantCode: exitFailed,
			want:     []string{`roles.yaml:5: error: roles.standard.packages: package "demo.typo" is not declared by any .rego file`, "known packages: demo.label, demo.nodes"},
		},
		"a listed package with no deny, warn or patch is a warning": {
			edits: map[string]string{
				"roles.yaml":   "defaultRole: standard\nroles:\n  standard:\n    operations: [CREATE]\n    packages: [demo.nodes, demo.helpers]\n",
				"helpers.rego": "package demo.helpers\n\nok := true\n",
			},
			wantCode: exitOK,
			want:     []string{`roles.yaml:5: warning: roles.standard.packages: package "demo.helpers" has no deny, warn or patch rule`, "ok with 3 warnings"},
		},
		"a missing role table": {
			edits:    map[string]string{"roles.yaml": ""},
			wantCode: exitFailed,
			want:     []string{"roles.yaml: error: missing: a policy directory needs a role table"},
		},
		"broken data and a reserved key": {
			edits:    map[string]string{"data.yaml": "zones: [a\n", "data.json": "{\"roles\": {}}"},
			wantCode: exitFailed,
			want:     []string{"data.json:1: error: top-level key \"roles\" is reserved for role parameters", "data.yaml:"},
		},
		"a failing Rego test is a problem at its line": {
			edits:    map[string]string{"x_test.rego": "package demo.x_test\n\ntest_nope if false\n"},
			wantCode: exitFailed,
			want:     []string{"x_test.rego:3: error: demo.x_test.test_nope: test rule evaluated to false or undefined", "qn-webhook refuses a set whose Rego tests fail"},
		},
		"a misnamed file is a warning": {
			edits:    map[string]string{"data.yml": "a: 1\n"},
			wantCode: exitOK,
			want:     []string{"data.yml: warning: this file is not read", "hint: rename it to data.yaml"},
		},
		"a broken fixture file": {
			edits:    map[string]string{"fixtures/bad.yaml": "cases:\n- name: x\n  objet: {}\n  expect: {allowed: true}\n"},
			wantCode: exitFailed,
			want:     []string{"fixtures/bad.yaml:3: error: field objet not found"},
		},
	})
}

// lintCase is a lint run on the test policies with edits, and what it
// prints.
type lintCase struct {
	edits    map[string]string
	args     []string
	wantCode int
	want     []string
	// clean: the run reports no problem at all.
	clean bool
}

func runLintCases(t *testing.T, cases map[string]lintCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := copyDir(t, testPolicies, tc.edits)
			code, out, errOut := run(t, "", append([]string{"lint", dir}, tc.args...)...)
			if code != tc.wantCode {
				t.Fatalf("exit code %d, want %d\n%s%s", code, tc.wantCode, out, errOut)
			}
			if tc.clean && (strings.Contains(out, ": warning:") || !strings.Contains(out, ": ok (")) {
				t.Errorf("want a clean run:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestLintJSONAndUnreadableDirectory(t *testing.T) {
	dir := copyDir(t, testPolicies, map[string]string{"unsafe.rego": "package demo.unsafe\n\ndeny contains msg if {\n\tmsg := y\n}\n"})
	code, out, _ := run(t, "", "lint", dir, "-o", "json")
	if code != exitFailed {
		t.Fatalf("exit %d", code)
	}
	var r lintReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) == 0 || r.Problems[0].File != "unsafe.rego" || r.Problems[0].Line != 4 || r.Problems[0].Hint == "" {
		t.Errorf("problems %+v", r.Problems)
	}

	code, _, errOut := run(t, "", "lint", "testdata/nope")
	if code != exitBadInput || !strings.Contains(errOut, "policy directory testdata/nope: no such file or directory") {
		t.Errorf("exit %d: %s", code, errOut)
	}
	if code, out, _ := run(t, "", "lint"); code != exitOK || !strings.Contains(out, "bundled: ok") {
		t.Errorf("lint of the bundled policies: exit %d\n%s", code, out)
	}
}
