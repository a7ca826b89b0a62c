package app

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// kyvernoFolders are Kyverno test folders in the style of Kyverno's policy
// library, and QuantumNode policies; test/kyvernoparity holds their rows
// to Kyverno's own engine.
const kyvernoFolders = "testdata/kyverno"

func TestTestRunsKyvernoTestFolders(t *testing.T) {
	requireLabels := filepath.Join(kyvernoFolders, "require-labels")
	policy := readTestFile(t, filepath.Join(requireLabels, "require-labels.yaml"))
	resources := readTestFile(t, filepath.Join(requireLabels, "resource.yaml"))
	folder := func(test string, extra ...string) string {
		edits := map[string]string{"require-labels.yaml": policy, "resource.yaml": resources, "kyverno-test.yaml": test}
		for i := 0; i+1 < len(extra); i += 2 {
			edits[extra[i]] = extra[i+1]
		}
		return copyDir(t, t.TempDir(), edits)
	}
	row := func(rule, resource, result string) string {
		return "- policy: require-labels\n  rule: " + rule + "\n  kind: Pod\n  resources: [" + resource + "]\n  result: " + result + "\n"
	}
	head := "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata:\n  name: t\npolicies: [require-labels.yaml]\nresources: [resource.yaml]\nresults:\n"
	cases := map[string]struct {
		dir      string
		args     []string
		wantCode int
		want     []string
		wantErr  []string
	}{
		"the fixture folders pass, a line per verdict": {
			dir:      kyvernoFolders,
			wantCode: exitOK,
			want: []string{
				"Kyverno tests: 10 files",
				"PASS  kyverno require-labels/check-for-labels v1/Pod/default/badpod01  (testdata/kyverno/require-labels/kyverno-test.yaml:10)",
				"PASS  kyverno require-run-as-nonroot/autogen-cronjob-run-as-non-root batch/v1/CronJob/default/root-cron",
				"PASS  kyverno qn-prod/qn-require-owner/owner-label qn.dev/v1alpha1/QuantumNode/qn-prod/core-2",
				"PASS  kyverno require-run-as-nonroot v1/Pod/default/exempt-pod  (testdata/kyverno/vpol-pods/kyverno-test.yaml:",
				"PASS  kyverno qn-vap-owner-label/qn-vap-owner-label qn.dev/v1alpha1/QuantumNode/qn-prod/core-2",
				"PASS  kyverno disallow-latest-tag batch/v1/CronJob/shop/nightly  (testdata/kyverno/vpol-pods/kyverno-test.yaml:",
				"PASS: 118 Kyverno rows: 118 passed, 0 failed",
			},
		},
		"a row that disagrees fails and says its policy, rule, resource, the result expected and got, and the message": {
			dir:      folder(head + row("check-for-labels", "badpod01", "pass")),
			wantCode: exitFailed,
			want: []string{
				"FAIL  kyverno require-labels/check-for-labels v1/Pod/default/badpod01  (",
				"want pass, got fail: validation error: The label `app.kubernetes.io/name` is required. rule check-for-labels failed at path /metadata/labels/",
				"FAIL: 1 Kyverno row: 0 passed, 1 failed",
			},
		},
		"a row names a Pod rule and judges a Deployment by its autogen rule": {
			dir:      folder(head + row("check-for-labels", "baddeployment01", "fail")),
			wantCode: exitOK,
			want:     []string{"PASS  kyverno require-labels/autogen-check-for-labels apps/v1/Deployment/default/baddeployment01"},
		},
		"a rule that does not apply passes the row as Kyverno's CLI does, and -v says it was excluded": {
			dir:      folder(head + "- policy: require-labels\n  rule: check-for-labels\n  kind: Pod\n  resources: [baddeployment01]\n  result: fail\n" + "- policy: require-labels\n  rule: autogen-check-for-labels\n  kind: Pod\n  resources: [badpod01]\n  result: fail\n"),
			args:     []string{"-v"},
			wantCode: exitOK,
			want:     []string{"answer: excluded: no rule of require-labels applies to v1/Pod/default/badpod01; Kyverno's CLI passes the row whatever it expects (fail)"},
		},
		"the older format without apiVersion runs, resource and status included": {
			dir:      folder("name: old\npolicies: [require-labels.yaml]\nresources: [resource.yaml]\nresults:\n- policy: require-labels\n  rule: check-for-labels\n  resource: goodpod01\n  namespace: shop\n  kind: Pod\n  status: pass\n"),
			wantCode: exitOK,
			want:     []string{"PASS  kyverno require-labels/check-for-labels v1/Pod/shop/goodpod01", "PASS: 1 Kyverno row: 1 passed, 0 failed"},
		},
		"metadata beyond the name is accepted, as Kyverno's CLI takes a whole ObjectMeta": {
			dir:      folder(strings.Replace(head, "  name: t\n", "  name: t\n  labels: {team: web}\n", 1) + row("check-for-labels", "badpod01", "fail")),
			wantCode: exitOK,
			want:     []string{"PASS: 1 Kyverno row: 1 passed, 0 failed"},
		},
		"a row without rule checks every rule of its policy on every resource": {
			dir:      folder(head + "- policy: require-labels\n  kind: Pod\n  resources: [badpod01, badpod02]\n  result: fail\n"),
			wantCode: exitOK,
			want:     []string{"PASS: 2 Kyverno rows: 2 passed, 0 failed"},
		},
		"a policy annotated scored false fails as warn, as Kyverno's reports say": {
			dir: folder(head+row("check-for-labels", "badpod01", "warn"),
				"require-labels.yaml", strings.Replace(policy, "  annotations:\n", "  annotations:\n    policies.kyverno.io/scored: \"false\"\n", 1)),
			wantCode: exitOK,
			want:     []string{"PASS  kyverno require-labels/check-for-labels v1/Pod/default/badpod01"},
		},
		"a resource the test does not have fails the row, naming the test's resources": {
			dir:      folder(head + row("check-for-labels", "nosuchpod", "fail")),
			wantCode: exitFailed,
			want:     []string{"resource nosuchpod is not among the test's resources (v1/Pod/default/badpod01, "},
		},
		"a policy or rule the test does not have fails the row": {
			dir:      folder(head + row("no-such-rule", "badpod01", "fail") + "- policy: other\n  rule: x\n  kind: Pod\n  result: pass\n"),
			wantCode: exitFailed,
			want: []string{
				`policy require-labels has no rule "no-such-rule" (rules: check-for-labels, autogen-check-for-labels, autogen-cronjob-check-for-labels)`,
				`policy "other" is not among the test's policies (require-labels)`,
			},
		},
		"--run keeps the matching rows": {
			dir:      kyvernoFolders,
			args:     []string{"--run", "qn-allowed-arch"},
			wantCode: exitOK,
			want:     []string{"PASS: 6 Kyverno rows: 6 passed, 0 failed"},
		},
		"a mutate row is refused at load, naming the file and line": {
			dir:      folder(head + "- policy: require-labels\n  rule: check-for-labels\n  kind: Pod\n  resources: [badpod01]\n  patchedResources: patched.yaml\n  result: pass\n"),
			wantCode: exitBadInput,
			wantErr:  []string{"kyverno-test.yaml:8: results[0]: patchedResources: not supported: qnctl judges validate rules, not mutations"},
		},
		"rule values are refused: they stand in for context entries qnctl does not load": {
			dir: folder(head+row("check-for-labels", "badpod01", "fail")+"variables: values.yaml\n",
				"values.yaml", "apiVersion: cli.kyverno.io/v1alpha1\nkind: Values\npolicies:\n- name: require-labels\n  rules:\n  - name: check-for-labels\n    values:\n      x: 1\n"),
			wantCode: exitBadInput,
			wantErr:  []string{"values.yaml: policies[require-labels].rules[check-for-labels]: not supported"},
		},
		"an unknown field is refused as Kyverno's CLI refuses it": {
			dir:      folder(head + row("check-for-labels", "badpod01", "fail") + "colour: blue\n"),
			wantCode: exitBadInput,
			wantErr:  []string{`kyverno-test.yaml:1: unknown field "colour"`},
		},
		"a policy that needs a cluster is refused with its file, line and reason": {
			dir: folder(head+row("check-for-labels", "badpod01", "fail"),
				"require-labels.yaml", strings.Replace(policy, "    validate:\n", "    context:\n    - name: cm\n      configMap:\n        name: x\n        namespace: y\n    validate:\n", 1)),
			wantCode: exitBadInput,
			wantErr:  []string{"its policies do not load", "require-labels.yaml:", "configMap"},
		},
		"a Kyverno test beside a policy directory runs with its Rego tests and cases": {
			dir:      copyDir(t, testPolicies, map[string]string{"kyverno/kyverno-test.yaml": head + row("check-for-labels", "badpod01", "fail"), "kyverno/require-labels.yaml": policy, "kyverno/resource.yaml": resources}),
			wantCode: exitOK,
			want:     []string{", Kyverno tests: 1 file", "PASS: 2 Rego tests, 3 fixture cases, 1 Kyverno row: 6 passed, 0 failed"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := run(t, "", append([]string{"test", tc.dir}, tc.args...)...)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
		})
	}
}

func TestTestKyvernoJSONNamesEachRow(t *testing.T) {
	code, out, errOut := run(t, "", "test", filepath.Join(kyvernoFolders, "jmespath-message"), "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var report testReport
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatal(err)
	}
	if report.Summary.KyvernoRows != 6 || report.Summary.Passed != 6 {
		t.Errorf("summary %+v, want 6 Kyverno rows passed", report.Summary)
	}
	var answer string
	for _, r := range report.Results {
		if r.Kind != "kyverno" {
			t.Errorf("result %s has kind %q", r.Name, r.Kind)
		}
		if r.Name == "name-rules/name-format v1/Service/default/Cart_Service" {
			answer = r.Answer
		}
	}
	want := "fail: Service CART_SERVICE (12 characters, starts Cart) must match ^[a-z]+-[0-9]+$."
	if !strings.HasPrefix(answer, want) {
		t.Errorf("answer %q, want it to start %q", answer, want)
	}
}

// The rows of ValidatingPolicies and ValidatingAdmissionPolicies read as
// Kyverno's CLI reports them: one result per policy and resource.
func TestTestRunsKyvernoCELRows(t *testing.T) {
	pods := filepath.Join(kyvernoFolders, "vpol-pods")
	policies := readTestFile(t, filepath.Join(pods, "policies.yaml"))
	resources := readTestFile(t, filepath.Join(pods, "resource.yaml"))
	folder := func(rows string, extra ...string) string {
		edits := map[string]string{"policies.yaml": policies, "resource.yaml": resources,
			"kyverno-test.yaml": "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata:\n  name: t\npolicies: [policies.yaml]\nresources: [resource.yaml]\nresults:\n" + rows}
		for i := 0; i+1 < len(extra); i += 2 {
			edits[extra[i]] = extra[i+1]
		}
		return copyDir(t, t.TempDir(), edits)
	}
	row := func(policy, resource, result string) string {
		return "- isValidatingPolicy: true\n  policy: " + policy + "\n  kind: Pod\n  resources: [" + resource + "]\n  result: " + result + "\n"
	}
	cases := map[string]struct {
		dir      string
		wantCode int
		want     []string
		wantErr  []string
	}{
		"a row that disagrees says the result expected and got, with the message": {
			dir:      folder(row("disallow-latest-tag", "untagged-pod", "pass")),
			wantCode: exitFailed,
			want:     []string{"FAIL  kyverno disallow-latest-tag v1/Pod/default/untagged-pod", "want pass, got fail: every image needs a tag: nginx, sidecar"},
		},
		"the rule a row names does not matter: a CEL policy has one result": {
			dir:      folder("- policy: require-limits\n  rule: anything\n  resources: [untagged-pod]\n  result: fail\n"),
			wantCode: exitOK,
			want:     []string{"PASS  kyverno require-limits v1/Pod/default/untagged-pod"},
		},
		"match conditions that leave the resource out skip it": {
			dir:      folder(row("require-run-as-nonroot", "exempt-pod", "skip")),
			wantCode: exitOK,
		},
		"match constraints that leave the resource out pass the row as excluded": {
			dir:      folder(row("require-team-label", "latest-pod", "fail")),
			wantCode: exitOK,
			want:     []string{"PASS: 1 Kyverno row"},
		},
		"a CEL policy kind qnctl does not judge is refused at load": {
			dir:      folder("- isMutatingPolicy: true\n  policy: p\n  result: pass\n"),
			wantCode: exitBadInput,
			wantErr:  []string{"results[0]: a row of a MutatingAdmissionPolicy, MutatingPolicy"},
		},
		"a ValidatingPolicy that needs a cluster is refused with its file and line": {
			dir: folder(row("require-limits", "untagged-pod", "fail"),
				"policies.yaml", policies+"---\napiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: lookup}\nspec:\n  matchConstraints:\n    resourceRules:\n    - {apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [pods]}\n  validations:\n  - expression: \"resource.Get('v1', 'configmaps', 'default', 'x') != null\"\n"),
			wantCode: exitBadInput,
			wantErr:  []string{"its policies do not load", "policies.yaml:"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := run(t, "", "test", tc.dir, "-v")
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
		})
	}
}

// readTestFile reads a file of testdata.
func readTestFile(t *testing.T, path string) string {
	t.Helper()
	b, err := readFileBounded(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
