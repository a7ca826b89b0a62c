package policies

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"
	kjson "sigs.k8s.io/json"

	"github.com/quantumnode/qn-admission/internal/astjson"
	"github.com/quantumnode/qn-admission/rego"
)

// FuzzInputValueMatchesItsJSONForm holds the hot-path Rego input builder
// to the JSON form of the input for arbitrary AdmissionRequests: the same
// property as TestInputValueMatchesItsJSONForm, on inputs nobody wrote.
func FuzzInputValueMatchesItsJSONForm(f *testing.F) {
	for _, pattern := range []string{"../test/testdata/*.json", "../test/load/testdata/*.json"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			body, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(body)
		}
	}
	f.Add([]byte(`{"request":{"uid":"u","object":{"a":[1,2.5,-3e400,"x",null,true,{}]},"options":{"dryRun":["All"]}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var rev admissionv1.AdmissionReview
		if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &rev); err != nil || rev.Request == nil {
			return
		}
		in := &Input{Request: rev.Request}
		// The webhook decodes the objects with these semantics; the JSON
		// form is then what they marshal to.
		for _, o := range []struct {
			raw     *[]byte
			decoded *map[string]any
		}{{&rev.Request.Object.Raw, &in.Object}, {&rev.Request.OldObject.Raw, &in.OldObject}} {
			if len(*o.raw) == 0 {
				continue
			}
			if err := kjson.UnmarshalCaseSensitivePreserveInts(*o.raw, o.decoded); err != nil || *o.decoded == nil {
				*o.raw, *o.decoded = nil, nil
				continue
			}
			js, err := json.Marshal(*o.decoded)
			if err != nil {
				return
			}
			*o.raw = js
		}
		if len(rev.Request.Options.Raw) > 0 && !json.Valid(rev.Request.Options.Raw) {
			rev.Request.Options.Raw = nil
		}
		r := rev.Request
		// Facts as the webhook extracts them: never-nil groups, labels and
		// annotations.
		facts := Facts{UID: string(r.UID), User: r.UserInfo.Username, Groups: r.UserInfo.Groups, Operation: string(r.Operation),
			Namespace: r.Namespace, Name: r.Name, Labels: map[string]string{}, Annotations: map[string]string{}}
		if facts.Groups == nil {
			facts.Groups = []string{}
		}
		fast, err := inputValue(in, facts)
		if err != nil {
			// Only numbers Rego cannot hold (beyond float64) may fail.
			if !strings.Contains(err.Error(), "request.") {
				t.Fatalf("an input error names the field: %v", err)
			}
			return
		}
		js, err := json.Marshal(policyInput{Request: r, Facts: facts})
		if err != nil {
			return
		}
		slow, err := ast.ValueFromReader(strings.NewReader(string(js)))
		if err != nil {
			t.Fatalf("the JSON form of the input does not parse: %v", err)
		}
		// The digits too: json.marshal and sprintf print them.
		if fast.Compare(slow) != 0 || fast.String() != slow.String() {
			t.Fatalf("fast input differs from its JSON form\nfast %v\njson %v", fast, slow)
		}
	})
}

// FuzzParseRoleTable feeds arbitrary YAML to the role-table parser: it
// returns a table or an error that names the file, never panics, and a
// table it returns names a default role it defines.
func FuzzParseRoleTable(f *testing.F) {
	for _, file := range []string{"../rego/bundle/roles.yaml", "../cmd/qnctl/app/testdata/policies/roles.yaml"} {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	f.Add([]byte("defaultRole: a\nroles:\n  a:\n    operations: [CREATE]\n    window: {limit: 1, period: 1m}\n"))
	f.Add([]byte("defaultRole: a\ndefaultRole: b\n"))
	f.Add([]byte("&a [*a, *a]"))
	f.Fuzz(func(t *testing.T, src []byte) {
		table, err := ParseRoleTable("roles.yaml", src)
		if err != nil {
			if !strings.Contains(err.Error(), "roles.yaml") {
				t.Fatalf("a role-table error names the file: %v", err)
			}
			return
		}
		if _, ok := table.Roles[table.DefaultRole]; !ok {
			t.Fatalf("a parsed table's default role %q is one of its roles %v", table.DefaultRole, table.Names())
		}
	})
}

// FuzzPlannedEvaluationMatchesReference holds the engine's evaluation
// (planned by OPA's planner, run by rego/planeval, on the projected input
// decoded in one pass) to OPA's own evaluation of the full input document,
// for every bundled role's queries on QuantumNode objects nobody wrote.
func FuzzPlannedEvaluationMatchesReference(f *testing.F) {
	set, err := Load(context.Background(), rego.Bundled(), LoadOptions{SkipTests: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"n","labels":{"topology.kubernetes.io/zone":"cn-shanghai"},"annotations":{"qn.dev/role":"realtime","qn.dev/latency-budget-ms":"20"}},"spec":{"hardware":{"arch":"arm64"},"services":[{"name":"mqtt","port":8883},{"name":"mqtt","port":8883}]}}`), uint8(0))
	f.Add([]byte(`{"metadata":{"annotations":{"qn.dev/role":"batch"}},"spec":{"services":[{"name":"","port":70000},{"port":0}],"replicas":3}}`), uint8(1))
	f.Add([]byte(`{"metadata":{"labels":{"qn.dev/managed-by":"someone-else"}},"spec":{"hardware":{"arch":"riscv64"},"services":"x"}}`), uint8(2))
	files, _ := filepath.Glob("../test/load/testdata/*.json")
	for _, file := range files {
		body, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		var rev admissionv1.AdmissionReview
		if kjson.UnmarshalCaseSensitivePreserveInts(body, &rev) == nil && rev.Request != nil && len(rev.Request.Object.Raw) > 0 {
			f.Add([]byte(rev.Request.Object.Raw), uint8(0))
		}
	}
	roles := make([]string, 0, len(set.validate))
	for role := range set.validate {
		roles = append(roles, role)
	}
	sort.Strings(roles)
	f.Fuzz(func(t *testing.T, object []byte, op uint8) {
		var m map[string]any
		if err := kjson.UnmarshalCaseSensitivePreserveInts(object, &m); err != nil || m == nil {
			return
		}
		if _, err := astjson.Decode(object); err != nil {
			return // the webhook refuses it (a duplicate key) before any policy
		}
		var req *admissionv1.AdmissionRequest
		switch op % 3 {
		case 0:
			req = quantumNodeRequest(admissionv1.Create, "alice", object, nil)
		case 1:
			req = quantumNodeRequest(admissionv1.Update, "alice", object, object)
		default:
			req = quantumNodeRequest(admissionv1.Delete, "alice", nil, object)
		}
		in := requestInput(t, req)
		decodedOnce := valueForm(t, in)
		for _, role := range roles {
			for _, q := range []*rego.Query{set.validate[role], set.mutate[role]} {
				if q == nil {
					continue
				}
				facts := in.Facts
				facts.Role = role
				ref, refErr := evalReference(q, in, facts)
				got, gotErr := evalFast(set, q, decodedOnce, facts)
				if (gotErr != nil) != (refErr != nil) {
					t.Fatalf("role %s: planned error %v, reference error %v", role, gotErr, refErr)
				}
				if gotErr == nil && !reflect.DeepEqual(got, ref) {
					t.Fatalf("role %s: planned %+v, reference %+v", role, got, ref)
				}
			}
		}
	})
}
