package app

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTestRunsRegoTestsAndFixtureCases(t *testing.T) {
	wrongCase := `cases:
- name: a valid node is denied, says this wrong case
  object: {apiVersion: qn.dev/v1alpha1, kind: QuantumNode, metadata: {name: n1}, spec: {hardware: {arch: amd64}, services: [{name: web, port: 80}]}}
  expect:
    allowed: false
    code: 403
    message: nothing like this
    warnings: []
    patch: []
`
	cases := map[string]struct {
		dir      string
		args     []string
		wantCode int
		want     []string
	}{
		"a passing directory prints a line per test and case and a summary": {
			dir:      testPolicies,
			wantCode: exitOK,
			want: []string{
				"PASS  rego    demo.nodes_test.test_empty_services_are_denied  (nodes_test.rego:5)",
				"PASS  fixture strict refuses the third change in its namespace window  (testdata/policies/fixtures/cases.yaml:20)",
				"PASS: 2 Rego tests, 3 fixture cases: 5 passed, 0 failed",
			},
		},
		"a case that gets another decision fails and says every difference": {
			dir:      copyDir(t, testPolicies, map[string]string{"fixtures/wrong.yaml": wrongCase}),
			wantCode: exitFailed,
			want: []string{
				"FAIL  fixture a valid node is denied, says this wrong case",
				"allowed: want false, got true (allowed (200))",
				"code: want 403, got 200",
				`message: want it to contain "nothing like this", got ""`,
				`warnings: want 0, got 1: "service web uses privileged port 80"`,
				`patch: want [], got [{"op":"add","path":"/metadata/labels","value":{"demo/checked":"true"}}]`,
				"FAIL: 2 Rego tests, 4 fixture cases: 5 passed, 1 failed",
			},
		},
		"a failing Rego test fails the run and names its file and line": {
			dir:      copyDir(t, testPolicies, map[string]string{"extra_test.rego": "package demo.extra_test\n\ntest_always_fails if {\n\tfalse\n}\n"}),
			wantCode: exitFailed,
			want:     []string{"FAIL  rego    demo.extra_test.test_always_fails  (extra_test.rego:3)", "test rule evaluated to false or undefined"},
		},
		"--run keeps only the matching tests and cases": {
			dir:      testPolicies,
			args:     []string{"--run", "strict"},
			wantCode: exitOK,
			want:     []string{"PASS: 0 Rego tests, 2 fixture cases: 2 passed, 0 failed"},
		},
		"--run that matches nothing, with --allow-empty": {
			dir:      testPolicies,
			args:     []string{"--run", "no-such-test", "--allow-empty"},
			wantCode: exitOK,
			want:     []string{"NOTHING RAN: 0 Rego tests, 0 fixture cases"},
		},
		"--fixtures points at other cases": {
			dir:      testPolicies,
			args:     []string{"--fixtures", "testdata/policies/fixtures/cases.yaml"},
			wantCode: exitOK,
			want:     []string{"3 fixture cases"},
		},
		"-v prints each case's answer": {
			dir:      testPolicies,
			args:     []string{"-v", "--run", "owner"},
			wantCode: exitOK,
			want:     []string{`answer: DENIED (403 Forbidden) role strict: denied by qn-admission (role "strict"): user "bob" is not an owner of strict nodes`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := run(t, "", append([]string{"test", tc.dir}, tc.args...)...)
			if code != tc.wantCode {
				t.Fatalf("exit code %d, want %d\n%s%s", code, tc.wantCode, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestTestLoadErrorsExitWith2AndSayWhere(t *testing.T) {
	cases := map[string]struct {
		dir  string
		args []string
		want []string
	}{
		"a broken policy directory": {
			dir:  copyDir(t, testPolicies, map[string]string{"roles.yaml": "defaultRole: standard\nroles:\n  standard:\n    operations: [CREATE]\n    packages: [demo.nodes]\n    enforcment: warn\n"}),
			want: []string{"roles.yaml:6: roles.standard.enforcment: unknown field"},
		},
		"a role that lists a package nobody declares": {
			dir:  copyDir(t, testPolicies, map[string]string{"roles.yaml": "defaultRole: standard\nroles:\n  standard:\n    operations: [CREATE]\n    packages: [demo.nope]\n"}),
			want: []string{"roles.yaml:5: roles.standard.packages", `package "demo.nope" is not declared`},
		},
		"a missing directory": {
			dir:  "testdata/nope",
			want: []string{"policy directory testdata/nope: no such file or directory"},
		},
		"invalid YAML in a fixture file": {
			dir:  copyDir(t, testPolicies, map[string]string{"fixtures/bad.yaml": "cases:\n- name: x\n  object: {a: [}\n"}),
			want: []string{"fixtures/bad.yaml:2: did not find expected node content"},
		},
		"an unknown field in a fixture case": {
			dir:  copyDir(t, testPolicies, map[string]string{"fixtures/bad.yaml": "cases:\n- name: x\n  objet: {}\n  expect: {allowed: true}\n"}),
			want: []string{"fixtures/bad.yaml:3: field objet not found"},
		},
		"a case with two inputs and a case without expectations": {
			dir: copyDir(t, testPolicies, map[string]string{"fixtures/bad.yaml": "cases:\n- name: two\n  object: {kind: A}\n  file: x.yaml\n  expect: {allowed: true}\n- name: none\n  object: {kind: A}\n"}),
			want: []string{`fixtures/bad.yaml:2: case "two" needs exactly one of object, review or file`,
				`fixtures/bad.yaml:6: case "none" has no expect`},
		},
		"a case naming a file that does not exist": {
			dir:  copyDir(t, testPolicies, map[string]string{"fixtures/bad.yaml": "cases:\n- name: gone\n  file: gone.json\n  expect: {allowed: true}\n"}),
			want: []string{`fixtures/bad.yaml:2: case "gone": read`, "gone.json: no such file or directory"},
		},
		"a case with an unknown role": {
			dir:  copyDir(t, testPolicies, map[string]string{"fixtures/bad.yaml": "cases:\n- name: fast\n  role: fast\n  object: {kind: A}\n  expect: {allowed: true}\n"}),
			want: []string{`fixtures/bad.yaml:2: case "fast": role "fast" is not in roles.yaml`},
		},
		"--fixtures that do not exist": {
			dir:  testPolicies,
			args: []string{"--fixtures", "testdata/none"},
			want: []string{"fixtures testdata/none: no such file or directory"},
		},
		"an unknown output": {
			dir:  testPolicies,
			args: []string{"-o", "tap"},
			want: []string{`--output "tap" is not one of text, json, junit`},
		},
		"--run that matches nothing: a green run of nothing proves nothing": {
			dir:  testPolicies,
			args: []string{"--run", "no-such-test"},
			want: []string{`nothing was tested: --run "no-such-test" matched none of 2 Rego tests and 3 fixture cases; --allow-empty accepts that`},
		},
		"a policy directory without Rego tests or fixture cases": {
			dir:  rmFiles(t, copyDir(t, testPolicies, nil), "fixtures", "nodes_test.rego"),
			want: []string{"nothing was tested: policies", "hold no Rego test (a test_* rule) and there are no fixture cases (no fixtures folder in the policy directory, and no --fixtures)"},
		},
		"a fixtures folder given as the policy directory": {
			dir:  "testdata/policies/fixtures",
			want: []string{"testdata/policies/fixtures holds fixture cases (1 YAML files): it is a fixtures folder, not a policy directory; run qnctl test POLICY-DIR --fixtures testdata/policies/fixtures"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := run(t, "", append([]string{"test", tc.dir}, tc.args...)...)
			if code != exitBadInput {
				t.Fatalf("exit code %d, want 2\n%s%s", code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
		})
	}
}

func TestTestReportsForCI(t *testing.T) {
	dir := copyDir(t, testPolicies, map[string]string{"fixtures/wrong.yaml": "cases:\n- name: wrong\n  object: {apiVersion: qn.dev/v1alpha1, kind: QuantumNode, metadata: {name: n1}, spec: {hardware: {arch: amd64}, services: [{name: web, port: 8080}]}}\n  expect: {code: 418}\n"})

	code, out, _ := run(t, "", "test", dir, "-o", "json")
	if code != exitFailed {
		t.Fatalf("exit %d", code)
	}
	var report testReport
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if s := report.Summary; s.RegoTests != 2 || s.FixtureCases != 4 || s.Failed != 1 || s.Passed != 5 {
		t.Errorf("summary %+v", s)
	}

	code, out, _ = run(t, "", "test", dir, "-o", "junit")
	if code != exitFailed {
		t.Fatalf("exit %d", code)
	}
	var suites junitSuites
	if err := xml.Unmarshal([]byte(out), &suites); err != nil {
		t.Fatalf("not JUnit XML: %v\n%s", err, out)
	}
	if suites.Tests != 6 || suites.Failures != 1 || len(suites.Suites) != 3 {
		t.Errorf("want 6 tests, 1 failure in 3 suites (rego package, two fixture files), got %d, %d in %d:\n%s", suites.Tests, suites.Failures, len(suites.Suites), out)
	}
	if !strings.Contains(out, `<failure message="code: want 418, got 200`) {
		t.Errorf("the failure does not say what differed:\n%s", out)
	}
}

func TestTestOnTheBundledPoliciesPasses(t *testing.T) {
	code, out, errOut := run(t, "", "test", "../../../rego/bundle", "--fixtures", bundledFixtures)
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = run(t, "", "test")
	if code != exitOK || !strings.Contains(out, "policies bundled") || !strings.Contains(out, " 0 fixture cases") {
		t.Fatalf("qnctl test without a directory runs the bundled Rego tests: exit %d\n%s%s", code, out, errOut)
	}
}

// rmFiles removes names (files or folders) from dir and returns dir.
func rmFiles(t *testing.T, dir string, names ...string) string {
	t.Helper()
	for _, n := range names {
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Without DIR, qnctl test runs the bundled policies, and its help says so.
func TestTestWithoutADirectoryRunsTheBundledPolicies(t *testing.T) {
	code, out, errOut := run(t, "", "test")
	if code != exitOK || !strings.HasPrefix(out, "policies bundled (revision ") {
		t.Errorf("qnctl test exited %d and printed\n%s%s\nwant the bundled policies tested", code, out, errOut)
	}
	_, help, _ := run(t, "", "test", "--help")
	flat := strings.Join(strings.Fields(help), " ")
	if !strings.Contains(flat, "(the bundled policies when DIR is omitted)") || strings.Contains(flat, "without the bundled") {
		t.Errorf("qnctl test --help does not say it tests the bundled policies without DIR:\n%s", help)
	}
}
