package policies

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/quantumnode/qn-admission/rego"
)

func bundledEngine(t *testing.T) *Engine {
	t.Helper()
	set, err := Load(context.Background(), rego.Bundled(), LoadOptions{})
	if err != nil {
		t.Fatalf("load bundled policies: %v", err)
	}
	return NewEngine(set, EngineOptions{})
}

// qnInput builds the Input the webhook would extract for a QuantumNode.
func qnInput(op string, object, oldObject string) *Input {
	req := &admissionv1.AdmissionRequest{
		UID:       "uid-1",
		Kind:      metav1.GroupVersionKind{Group: "qn.dev", Version: "v1alpha1", Kind: "QuantumNode"},
		Resource:  metav1.GroupVersionResource{Group: "qn.dev", Version: "v1alpha1", Resource: "quantumnodes"},
		Operation: admissionv1.Operation(op),
		Namespace: "edge",
		Name:      "edge-1",
		UserInfo:  authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}},
	}
	if object != "" {
		req.Object = runtime.RawExtension{Raw: []byte(object)}
	}
	if oldObject != "" {
		req.OldObject = runtime.RawExtension{Raw: []byte(oldObject)}
	}
	in := &Input{Request: req, Facts: Facts{
		Operation: op, Namespace: "edge", Name: "edge-1", User: "alice", Groups: []string{"system:authenticated"},
		Kind: GroupVersionKind{Group: "qn.dev", Version: "v1alpha1", Kind: "QuantumNode"},
	}}
	if object != "" {
		_ = json.Unmarshal([]byte(object), &in.Object)
		annotations, _, _ := unstructured.NestedStringMap(in.Object, "metadata", "annotations")
		in.Facts.Role = annotations[RoleAnnotation]
	}
	if oldObject != "" {
		_ = json.Unmarshal([]byte(oldObject), &in.OldObject)
	}
	return in
}

const validNode = `{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"edge-1"},"spec":{"hardware":{"arch":"arm64"},"services":[{"name":"mqtt","port":8883}]}}`

func TestValidate(t *testing.T) {
	cases := map[string]struct {
		in          *Input
		wantAllowed bool
		wantCode    int32
		wantInMsg   string
		wantWarning string
	}{
		"a valid QuantumNode is admitted": {
			in: qnInput("CREATE", validNode, ""), wantAllowed: true, wantCode: 200,
		},
		"duplicate service names are forbidden with both places named": {
			in:       qnInput("CREATE", `{"metadata":{},"spec":{"hardware":{"arch":"amd64"},"services":[{"name":"a","port":8001},{"name":"a","port":8002}]}}`, ""),
			wantCode: 403, wantInMsg: `service name "a" is declared 2 times (spec.services[0], spec.services[1])`,
		},
		"every reason is in the message": {
			in:       qnInput("CREATE", `{"metadata":{},"spec":{"hardware":{"arch":"riscv"},"services":[{"name":"a","port":9000},{"name":"b","port":9000}]}}`, ""),
			wantCode: 403, wantInMsg: `port 9000 is declared 2 times (spec.services[0], spec.services[1]); each service needs its own port; spec.hardware.arch "riscv" is not supported`,
		},
		"an UPDATE that changes the architecture is judged against oldObject": {
			in:       qnInput("UPDATE", strings.Replace(validNode, "arm64", "amd64", 1), validNode),
			wantCode: 403, wantInMsg: `spec.hardware.arch is immutable: this QuantumNode was created as "arm64" and cannot become "amd64"`,
		},
		"a privileged port is admitted with a warning": {
			in:          qnInput("CREATE", strings.Replace(validNode, "8883", "443", 1), ""),
			wantAllowed: true, wantCode: 200, wantWarning: "uses privileged port 443",
		},
		"an unknown role is forbidden and the known roles are listed": {
			in:       qnInput("CREATE", strings.Replace(validNode, `"name":"edge-1"}`, `"name":"edge-1","annotations":{"qn-role":"turbo"}}`, 1), ""),
			wantCode: 403, wantInMsg: `annotation qn-role="turbo" names no known role; known roles: batch, default, realtime`,
		},
		"an operation the role may not perform is forbidden": {
			in:       qnInput("CONNECT", validNode, ""),
			wantCode: 403, wantInMsg: `role "default" may not connect QuantumNode; it may CREATE, UPDATE, DELETE`,
		},
		"a DELETE is admitted": {
			in: qnInput("DELETE", "", validNode), wantAllowed: true, wantCode: 200,
		},
	}
	e := bundledEngine(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := e.Validate(context.Background(), tc.in)
			if d.Allowed != tc.wantAllowed || d.Code != tc.wantCode {
				t.Fatalf("allowed=%v code=%d, want %v %d (message %q)", d.Allowed, d.Code, tc.wantAllowed, tc.wantCode, d.Message)
			}
			if !strings.Contains(d.Message, tc.wantInMsg) {
				t.Errorf("message %q does not contain %q", d.Message, tc.wantInMsg)
			}
			if tc.wantWarning != "" && (len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], tc.wantWarning)) {
				t.Errorf("warnings %q, want one containing %q", d.Warnings, tc.wantWarning)
			}
			if tc.wantWarning == "" && len(d.Warnings) != 0 {
				t.Errorf("unexpected warnings %q", d.Warnings)
			}
			if d.Patch != nil {
				t.Errorf("a validating decision must carry no patch, got %s", d.Patch)
			}
			if d.Revision == "" || d.Role != "default" && !strings.Contains(name, "unknown role") {
				t.Errorf("decision should name role and revision, got role=%q revision=%q", d.Role, d.Revision)
			}
		})
	}
}

func TestMutate(t *testing.T) {
	cases := map[string]struct {
		object    string
		op        string
		wantPatch string
	}{
		"the managed-by label is added, creating metadata.labels": {
			object: validNode, op: "CREATE",
			wantPatch: `[{"op":"add","path":"/metadata/labels","value":{"qn.dev/managed-by":"qn-admission"}}]`,
		},
		"the label is added beside existing labels": {
			object: strings.Replace(validNode, `"name":"edge-1"}`, `"name":"edge-1","labels":{"zone":"a"}}`, 1), op: "CREATE",
			wantPatch: `[{"op":"add","path":"/metadata/labels/qn.dev~1managed-by","value":"qn-admission"}]`,
		},
		"an object that already carries the label gets no patch": {
			object: strings.Replace(validNode, `"name":"edge-1"}`, `"name":"edge-1","labels":{"qn.dev/managed-by":"qn-admission"}}`, 1), op: "UPDATE",
		},
		"an invalid object is still patched: mutation never denies": {
			object: `{"metadata":{"labels":{}},"spec":{}}`, op: "CREATE",
			wantPatch: `[{"op":"add","path":"/metadata/labels/qn.dev~1managed-by","value":"qn-admission"}]`,
		},
	}
	e := bundledEngine(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			old := ""
			if tc.op == "UPDATE" {
				old = tc.object
			}
			d := e.Mutate(context.Background(), qnInput(tc.op, tc.object, old))
			if !d.Allowed || d.Code != http.StatusOK {
				t.Fatalf("mutation should admit, got %+v", d)
			}
			if string(d.Patch) != tc.wantPatch {
				t.Fatalf("patch %s, want %s", d.Patch, tc.wantPatch)
			}
		})
	}
}

// TestBothWebhooksRefuseMalformedRequestsAlike: a write without the object
// it writes, or an UPDATE or DELETE without the stored object, is a forged
// request; the mutating webhook refuses it with the validating webhook's
// 400, instead of admitting it (or failing with a 500).
func TestBothWebhooksRefuseMalformedRequestsAlike(t *testing.T) {
	e := bundledEngine(t)
	for name, tc := range map[string]struct {
		op, object, old, want string
	}{
		"a CREATE without its object":   {op: "CREATE", want: "request.object is missing: a CREATE"},
		"an UPDATE without its object":  {op: "UPDATE", old: validNode, want: "request.object is missing: a UPDATE"},
		"an UPDATE without the old one": {op: "UPDATE", object: validNode, want: "request.oldObject is missing: a UPDATE"},
		"a DELETE without the old one":  {op: "DELETE", want: "request.oldObject is missing: a DELETE"},
	} {
		t.Run(name, func(t *testing.T) {
			validated := e.Validate(context.Background(), qnInput(tc.op, tc.object, tc.old))
			mutated := e.Mutate(context.Background(), qnInput(tc.op, tc.object, tc.old))
			for path, d := range map[string]Decision{"validate": validated, "mutate": mutated} {
				if d.Allowed || d.Code != http.StatusBadRequest || !strings.Contains(d.Message, tc.want) {
					t.Errorf("%s: want a 400 saying %q, got %+v", path, tc.want, d)
				}
			}
			if validated.Message != mutated.Message {
				t.Errorf("the two webhooks answer differently:\n validate %s\n mutate   %s", validated.Message, mutated.Message)
			}
		})
	}
}

func TestPolicyErrorFailsClosed(t *testing.T) {
	fsys := fstest.MapFS{
		"roles.yaml": {Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    packages: [p]\n")},
		"p.rego":     {Data: []byte("package p\ndeny contains msg if { msg := sprintf(\"%d\", input.request.object.spec) }\n")},
	}
	set, err := Load(context.Background(), fsys, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := NewEngine(set, EngineOptions{}).Validate(context.Background(), qnInput("CREATE", validNode, ""))
	if d.Allowed || d.Code != 500 || !strings.Contains(d.Message, `role "r": evaluate packages [p]`) {
		t.Fatalf("a policy error must deny with 500 and say where, got %+v", d)
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	roles := "defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    packages: [p]\n"
	good := "package p\ndeny contains \"no\" if false\n"
	cases := map[string]struct {
		files fstest.MapFS
		want  string
	}{
		"no role table": {
			files: fstest.MapFS{"p.rego": {Data: []byte(good)}},
			want:  "roles.yaml: missing: a policy directory needs a role table",
		},
		"an unknown field in roles.yaml": {
			files: fstest.MapFS{"roles.yaml": {Data: []byte(roles + "    limt: 3\n")}, "p.rego": {Data: []byte(good)}},
			want:  `roles.yaml:6: roles.r.limt: unknown field (known here: operations, requesters, delete, moveTo, window, packages, patterns, policies, enforcement, packageEnforcement, patternEnforcement, onError, parameters)`,
		},
		"a default role that does not exist": {
			files: fstest.MapFS{"roles.yaml": {Data: []byte(strings.Replace(roles, "defaultRole: r", "defaultRole: x", 1))}, "p.rego": {Data: []byte(good)}},
			want:  `roles.yaml:1: defaultRole: "x" is not one of the declared roles (r)`,
		},
		"an unknown operation": {
			files: fstest.MapFS{"roles.yaml": {Data: []byte(strings.Replace(roles, "CREATE", "PATCH", 1))}, "p.rego": {Data: []byte(good)}},
			want:  `roles.yaml:4: roles.r.operations: "PATCH" is not an operation (use CREATE, UPDATE, DELETE, CONNECT)`,
		},
		"a package no module declares": {
			files: fstest.MapFS{"roles.yaml": {Data: []byte(strings.Replace(roles, "[p]", "[p, q]", 1))}, "p.rego": {Data: []byte(good)}},
			want:  `roles.yaml:5: roles.r.packages: package "q" is not declared by any .rego file (known packages: p)`,
		},
		"a Rego syntax error": {
			files: fstest.MapFS{"roles.yaml": {Data: []byte(roles)}, "p.rego": {Data: []byte("package p\ndeny contains if {\n")}},
			want:  "p.rego:2",
		},
		"a failing Rego test": {
			files: fstest.MapFS{"roles.yaml": {Data: []byte(roles)}, "p.rego": {Data: []byte(good)}, "p_test.rego": {Data: []byte("package p_test\ntest_no if data.p.deny[\"no\"]\n")}},
			want:  "p_test.rego:2: p_test.test_no: test rule evaluated to false or undefined",
		},
		"broken data": {
			files: fstest.MapFS{"roles.yaml": {Data: []byte(roles)}, "p.rego": {Data: []byte(good)}, "data.yaml": {Data: []byte("zones: [a\n")}},
			want:  "data.yaml:",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Load(context.Background(), tc.files, LoadOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}
