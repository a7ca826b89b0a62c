package app

import (
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestEvalAnswersAsTheWebhookWouldWithExitCodes(t *testing.T) {
	valid := "testdata/inputs/node-valid.yaml"
	invalid := "testdata/inputs/node-invalid.yaml"
	base := []string{"--policy-dir", testPolicies, "--time", testTime}
	cases := map[string]struct {
		args     []string
		stdin    string
		wantCode int
		want     []string
		wantNot  []string
	}{
		"a List is judged item by item and one denied item fails it": {
			args:     []string{"testdata/inputs/list.yaml", "--webhook", "validate"},
			wantCode: exitFailed,
			want: []string{
				"== testdata/inputs/list.yaml: items[0] QuantumNode demo/n1\nvalidating webhook: allowed (200)",
				"== testdata/inputs/list.yaml: items[1] QuantumNode demo/n2\nvalidating webhook: DENIED (403 Forbidden)",
				"spec.hardware.arch must be amd64 or arm64",
				"2 objects: 1 admitted, 1 denied",
			},
		},
		"a YAML stream is judged document by document": {
			args:     []string{"testdata/inputs/stream.yaml", "--webhook", "validate"},
			wantCode: exitOK,
			want:     []string{"== testdata/inputs/stream.yaml (document 2)", "2 objects: 2 admitted, 0 denied"},
		},
		"a List read from stdin": {
			args:     []string{"-", "--webhook", "validate"},
			stdin:    `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"x","namespace":"demo"},"spec":{"hardware":{"arch":"riscv"}}}]}`,
			wantCode: exitFailed,
			want:     []string{"validating webhook: DENIED (403 Forbidden)"},
		},
		"a Pod is answered but named as not checked, and fails: the API server never sends it": {
			args:     []string{"-", "--webhook", "validate"},
			stdin:    `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"demo"},"spec":{}}`,
			wantCode: exitBadInput,
			want: []string{"validating webhook: DENIED (403 Forbidden)",
				"not checked: stdin (Pod): qn-webhook is registered for qn.dev QuantumNodes",
				"nothing was checked: no request is one qn-webhook is registered for; --allow-empty"},
		},
		"a Pod the release registers the webhook for (--additional-resources) is checked, by the validating webhook only": {
			args:     []string{"-", "--additional-resources", "pods.v1"},
			stdin:    `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"demo"},"spec":{}}`,
			wantCode: exitFailed,
			want:     []string{"validating webhook: DENIED (403 Forbidden)"},
			wantNot:  []string{"mutating webhook", "not checked", "nothing was checked"},
		},
		"--explain says a Pod is not counted in the role's window, which counts QuantumNodes": {
			args:     []string{"-", "--webhook", "validate", "--additional-resources", "pods.v1", "--explain", "--policy-dir", "../../../rego/bundle"},
			stdin:    `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"demo"},"spec":{}}`,
			wantCode: exitOK,
			want:     []string{"not counted: the role's window counts changes of qn.dev/QuantumNode only (roles.yaml:"},
		},
		"a Pod when only Deployments are added is not checked, and the message names what is": {
			args:     []string{"-", "--webhook", "validate", "--additional-resources", "deployments.v1.apps:CREATE"},
			stdin:    `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"demo"},"spec":{}}`,
			wantCode: exitBadInput,
			want: []string{"not checked: stdin (Pod): qn-webhook is registered for qn.dev QuantumNodes, and for HorizontalQNScalers' CREATE and UPDATE by its validating webhook only; " +
				"and, by --additional-resources (webhook.additionalResources), for CREATE of apps/v1 deployments by its validating webhook only"},
		},
		"a Pod's DELETE when Pods are added for CREATE and UPDATE is not checked": {
			args:     []string{"-", "--webhook", "validate", "--operation", "DELETE", "--additional-resources", "pods.v1"},
			stdin:    `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"demo"},"spec":{}}`,
			wantCode: exitBadInput,
			want:     []string{"not checked: stdin (Pod)"},
		},
		"a subresource in --additional-resources is a usage error": {
			args:     []string{valid, "--additional-resources", "pods/exec.v1"},
			wantCode: exitBadInput,
			want:     []string{`--additional-resources: additional resource "pods/exec.v1": name one resource (pods.v1), never a wildcard or a subresource`},
		},
		"a Pod with --allow-empty exits by its answer": {
			args:     []string{"-", "--webhook", "validate", "--allow-empty"},
			stdin:    `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"demo"},"spec":{}}`,
			wantCode: exitFailed,
			want:     []string{"not checked: stdin (Pod)"},
		},
		"a List of a node and a Deployment names the Deployment as not checked and exits by the node": {
			args:     []string{"-", "--webhook", "validate"},
			stdin:    `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"x","namespace":"demo"},"spec":{"hardware":{"arch":"riscv"}}},{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"demo"}}]}`,
			wantCode: exitFailed,
			want: []string{"== stdin: items[0] QuantumNode demo/x\nvalidating webhook: DENIED", "== stdin: items[1] Deployment demo/web",
				"not checked: stdin: items[1] Deployment demo/web (apps/Deployment)"},
			wantNot: []string{"nothing was checked"},
		},
		"a valid object is admitted, patched and warned about": {
			args:     []string{valid},
			wantCode: exitOK,
			want: []string{
				"mutating webhook: allowed (200)",
				`patch       [{"op":"add","path":"/metadata/labels","value":{"demo/checked":"true"}}]`,
				"validating webhook: allowed (200)",
				"warning     service http uses privileged port 80",
			},
		},
		"an invalid object is denied with every reason": {
			args:     []string{invalid},
			wantCode: exitFailed,
			want: []string{
				"validating webhook: DENIED (403 Forbidden)",
				`message     denied by qn-admission (role "standard"): spec.hardware.arch must be amd64 or arm64; spec.services must not be empty`,
			},
		},
		"the object can come from stdin": {
			args:     []string{"-"},
			stdin:    "apiVersion: qn.dev/v1alpha1\nkind: QuantumNode\nmetadata: {name: node1}\nspec: {hardware: {arch: x}}\n",
			wantCode: exitFailed,
			want:     []string{"DENIED (403 Forbidden)"},
		},
		"--role sets the annotation and the role's policies judge": {
			args:     []string{valid, "--role", "strict", "--user", "bob"},
			wantCode: exitFailed,
			want:     []string{`role        strict`, `user "bob" is not an owner of strict nodes`},
		},
		"--window-count fills the role's window and the next change gets 429": {
			args:     []string{valid, "--role", "strict", "--user", "alice", "--window-count", "2"},
			wantCode: exitFailed,
			want: []string{"DENIED (429 TooManyRequests)", `rate window full: role "strict" allows 2 changes per 30s per namespace; namespace "demo" has made 2 in the last 30s; a slot frees in 30s`,
				"window      namespace window: 2 of 2 changes per 30s used; this refused change took no slot, 0 remaining"},
			wantNot: []string{"used after this request"},
		},
		"a dry run is judged against the window and takes no slot": {
			args:     []string{valid, "--role", "strict", "--user", "alice", "--window-count", "1", "--dry-run"},
			wantCode: exitOK,
			want:     []string{"window      namespace window: 1 of 2 changes per 30s used; this dry run took no slot, 1 remaining"},
		},
		"a window with room shows what is left after the request": {
			args:     []string{valid, "--role", "strict", "--user", "alice", "--window-count", "1"},
			wantCode: exitOK,
			want:     []string{"window      namespace window: 2 of 2 changes per 30s used after this request, 0 remaining"},
		},
		"an operation the role may not perform is denied": {
			args:     []string{valid, "--role", "strict", "--old", valid, "--old-role", "strict"},
			wantCode: exitFailed,
			want:     []string{`the stored QuantumNode is under role "strict", which may not update it (it may CREATE)`},
		},
		"a change of role on UPDATE is judged by the stored role first": {
			args:     []string{valid, "--role", "strict", "--old", valid},
			wantCode: exitFailed,
			want:     []string{`the stored QuantumNode is under role "standard", which does not let it move to role "strict" (roles.standard.moveTo lists none)`},
		},
		"DELETE judges the object as the old object": {
			args:     []string{invalid, "--operation", "delete"},
			wantCode: exitOK,
			want:     []string{"validating webhook: allowed (200)"},
		},
		"an exempt group is admitted unjudged": {
			args:     []string{invalid, "--group", "break-glass"},
			wantCode: exitOK,
			want:     []string{"exempt      group break-glass (admitted without policies)"},
		},
		"--webhook validate asks only the validating webhook": {
			args:     []string{valid, "--webhook", "validate"},
			wantCode: exitOK,
			want:     []string{"validating webhook: allowed"},
			wantNot:  []string{"mutating webhook"},
		},
		"--webhook mutate asks only the mutating webhook": {
			args:     []string{invalid, "--webhook", "mutate"},
			wantCode: exitOK,
			want:     []string{"mutating webhook: allowed"},
			wantNot:  []string{"validating webhook"},
		},
		"--show-patched prints the object the validating webhook judged": {
			args:     []string{valid, "--show-patched"},
			wantCode: exitOK,
			want:     []string{"patched object:", "      demo/checked: \"true\""},
		},
		"a malformed review is answered with 400 like the webhook does": {
			args:     []string{"testdata/inputs/review-kind-mismatch.json"},
			wantCode: exitFailed,
			want:     []string{"DENIED (400 BadRequest)", `request.object is apiVersion "v1" kind "ConfigMap"`},
		},
		"the bundled policies judge when no directory is given": {
			args:     []string{"../../../test/testdata/review-duplicate-port.json", "--policy-dir", ""},
			wantCode: exitFailed,
			want:     []string{`port 8883 is declared 2 times`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := run(t, tc.stdin, append(append([]string{"eval"}, base...), tc.args...)...)
			if code != tc.wantCode {
				t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, out, errOut)
			}
			all := out + errOut
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("output lacks %q:\n%s", w, all)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(all, w) {
					t.Errorf("output has %q:\n%s", w, all)
				}
			}
		})
	}
}

func TestEvalBadInputIsAClearErrorWithExit2(t *testing.T) {
	broken := copyDir(t, testPolicies, map[string]string{"nodes.rego": "package demo.nodes\n\ndeny contains msg if {\n"})
	cases := map[string]struct {
		args []string
		want string
	}{
		"an unreadable file":                         {[]string{"testdata/inputs/no-such-file.yaml"}, "read testdata/inputs/no-such-file.yaml: no such file or directory"},
		"invalid YAML names file and line":           {[]string{"testdata/inputs/invalid.yaml"}, "testdata/inputs/invalid.yaml:4: not valid YAML"},
		"invalid JSON names file and line":           {[]string{writeFile(t, "bad.json", "{\n  \"a\": ,\n}")}, "bad.json is not valid JSON: line 2: invalid character"},
		"a review without a request":                 {[]string{"testdata/inputs/review-no-request.json"}, "review-no-request.json: AdmissionReview has no request"},
		"an object without apiVersion":               {[]string{writeFile(t, "o.yaml", "metadata: {name: x}\n")}, "o.yaml has no apiVersion and kind"},
		"a stream whose first document is no object": {[]string{writeFile(t, "two.yaml", "kind: A\n---\nkind: B\n")}, "two.yaml (document 1) has no apiVersion and kind"},
		"an empty List":                              {[]string{writeFile(t, "empty-list.yaml", "apiVersion: v1\nkind: List\nitems: []\n")}, "empty-list.yaml is a List with no items; nothing to judge"},
		"--old with several objects":                 {[]string{"testdata/inputs/list.yaml", "--old", "testdata/inputs/node-valid.yaml"}, "--old judges one UPDATE; testdata/inputs/list.yaml holds 2 objects"},
		"an empty file":                              {[]string{writeFile(t, "empty.yaml", "\n")}, "empty.yaml is empty"},
		"an unknown role":                            {[]string{"testdata/inputs/node-valid.yaml", "--role", "fast"}, `role "fast" is not in roles.yaml (testdata/policies); known roles: standard, strict`},
		"a broken policy directory":                  {[]string{"testdata/inputs/node-valid.yaml", "--policy-dir", broken}, "nodes.rego:4: rego_parse_error"},
		"a missing policy directory":                 {[]string{"testdata/inputs/node-valid.yaml", "--policy-dir", "testdata/nope"}, "policy directory testdata/nope: no such file or directory"},
		"an unknown operation":                       {[]string{"testdata/inputs/node-valid.yaml", "--operation", "PATCH"}, `operation "PATCH" is not one of CREATE, UPDATE, DELETE, CONNECT`},
		"a time that is not RFC 3339":                {[]string{"testdata/inputs/node-valid.yaml", "--time", "yesterday"}, `--time "yesterday" is not an RFC 3339 time`},
		"a negative window count":                    {[]string{"testdata/inputs/node-valid.yaml", "--window-count", "-1"}, "--window-count -1 is negative"},
		"an unknown output":                          {[]string{"testdata/inputs/node-valid.yaml", "-o", "xml"}, `--output "xml" is not one of text, json, yaml, review`},
		"an unknown trace filter":                    {[]string{"testdata/inputs/node-valid.yaml", "--trace=all"}, `--trace "all" is not one of full, fails, notes`},
		"--old with DELETE":                          {[]string{"testdata/inputs/node-valid.yaml", "--operation", "DELETE", "--old", "testdata/inputs/node-valid.yaml"}, "--old does not apply to DELETE"},
		"--resource with a review":                   {[]string{"testdata/inputs/review-kind-mismatch.json", "--resource", "x"}, "--resource applies to a plain object"},
		"no file":                                    {nil, "accepts 1 arg(s), received 0"},
		"an unknown flag":                            {[]string{"x", "--bogus"}, "unknown flag: --bogus"},
		"a policy whose Rego tests fail":             {[]string{"testdata/inputs/node-valid.yaml", "--policy-dir", copyDir(t, testPolicies, map[string]string{"nodes_test.rego": "package demo.nodes_test\n\ntest_fails if false\n"})}, "nodes_test.rego:3: demo.nodes_test.test_fails: test rule evaluated to false or undefined"},
		"an endless file":                            {[]string{"/dev/zero"}, "/dev/zero is larger than 16 MiB, the most qnctl reads"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"eval", "--policy-dir", testPolicies, "--time", testTime}, tc.args...)
			code, out, errOut := run(t, "", args...)
			if code != exitBadInput {
				t.Fatalf("exit code %d, want 2\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, errOut)
			}
			if out != "" {
				t.Errorf("nothing should reach stdout on an error, got:\n%s", out)
			}
		})
	}
}

func TestEvalStdinIsReadUpToALimit(t *testing.T) {
	code, out, errOut := run(t, strings.Repeat(" ", maxInputBytes+1), "eval", "--policy-dir", testPolicies, "-")
	if code != exitBadInput || out != "" || !strings.Contains(errOut, "stdin is larger than 16 MiB") {
		t.Fatalf("want exit 2 naming the limit, got %d\nstdout:\n%s\nstderr:\n%.300s", code, out, errOut)
	}
}

func TestTextOutputEscapesWhatATerminalWouldInterpret(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"plain text and tabs are kept":              {in: "PASS\tfixture café", want: "PASS\tfixture café"},
		"an escape sequence is shown, not run":      {in: "name \x1b[2J\x1b[31mred", want: `name \x1b[2J\x1b[31mred`},
		"a byte that is not UTF-8 is shown":         {in: "bin\xff\xfe", want: `bin\xff\xfe`},
		"a carriage return cannot overwrite a line": {in: "FAIL\rPASS", want: `FAIL\rPASS`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			tw := &textWriter{w: &b}
			tw.line(tc.in)
			if got := strings.TrimSuffix(b.String(), "\n"); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEvalSkipRegoTestsLoadsASetWhoseTestsFail(t *testing.T) {
	dir := copyDir(t, testPolicies, map[string]string{"nodes_test.rego": "package demo.nodes_test\n\ntest_fails if false\n"})
	code, out, errOut := run(t, "", "eval", "--policy-dir", dir, "--skip-rego-tests", "testdata/inputs/node-valid.yaml")
	if code != exitOK {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
}

func TestEvalJSONAndYAMLCarryTheDecisionAndTheReview(t *testing.T) {
	code, out, errOut := run(t, "", "eval", "--policy-dir", testPolicies, "--time", testTime, "-o", "json", "--show-patched", "testdata/inputs/node-invalid.yaml")
	if code != exitFailed {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		Allowed  bool `json:"allowed"`
		Validate struct {
			Code    int32    `json:"code"`
			Reasons []string `json:"reasons"`
			Role    string   `json:"role"`
			Review  struct {
				Response struct {
					UID string `json:"uid"`
				} `json:"response"`
			} `json:"review"`
		} `json:"validate"`
		Mutate struct {
			Patch []map[string]any `json:"patch"`
		} `json:"mutate"`
		PatchedObject map[string]any `json:"patchedObject"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if doc.Allowed || doc.Validate.Code != 403 || len(doc.Validate.Reasons) != 2 || doc.Validate.Role != "standard" || doc.Validate.Review.Response.UID != evalUID {
		t.Errorf("unexpected validate answer: %+v", doc)
	}
	if len(doc.Mutate.Patch) != 1 || doc.PatchedObject == nil {
		t.Errorf("want the patch and the patched object: %+v", doc)
	}

	code, yout, _ := run(t, "", "eval", "--policy-dir", testPolicies, "--time", testTime, "-o", "yaml", "testdata/inputs/node-invalid.yaml")
	if code != exitFailed {
		t.Fatalf("exit %d", code)
	}
	js, err := yaml.YAMLToJSON([]byte(yout))
	if err != nil {
		t.Fatalf("not YAML: %v", err)
	}
	var again map[string]any
	if err := json.Unmarshal(js, &again); err != nil || again["allowed"] != false {
		t.Errorf("YAML output does not carry the decision: %v %v", err, again)
	}
}

func TestEvalOverridesAReviewsFieldsWithFlags(t *testing.T) {
	review := "../../../test/testdata/review-valid.json"
	code, out, _ := run(t, "", "eval", review, "-o", "json", "--webhook", "validate", "--user", "bob", "--group", "a", "--group", "system:authenticated", "--namespace", "other", "--dry-run", "--role", "batch")
	if code != exitFailed {
		t.Fatalf("exit %d: %s", code, out)
	}
	for _, want := range []string{`"role": "batch"`, `batch QuantumNodes must carry label priority=low`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
