package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
	"github.com/quantumnode/qn-admission/webhook"
)

// The bundled batch rule exists twice: as Rego (qn.roles.batch) and as a
// pattern policy (batch-priority-low.pattern.yaml). Two roles that differ
// only in which of them they run must answer every request alike.
const parityRoles = `
  parity-rego:
    operations: [CREATE, UPDATE, DELETE]
    packages: [qn.roles.batch]
  parity-pattern:
    operations: [CREATE, UPDATE, DELETE]
    patterns: [batch-priority-low]
`

const batchReason = "batch QuantumNodes must carry label priority=low"

func paritySet(t *testing.T) *policies.Set {
	t.Helper()
	fsys := fstest.MapFS{}
	err := fs.WalkDir(rego.Bundled(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(rego.Bundled(), p)
		fsys[p] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	roles := string(fsys[policies.RolesFile].Data)
	if !strings.HasSuffix(strings.TrimSpace(roles), "packages: [qn.quantumnode, qn.window, qn.mutate.managedby]") {
		t.Fatalf("the bundled roles.yaml no longer ends with the default role's packages; place the parity roles under roles: by hand")
	}
	fsys[policies.RolesFile] = &fstest.MapFile{Data: []byte(strings.TrimRight(roles, "\n") + "\n" + parityRoles)}
	set, err := policies.Load(context.Background(), fsys, policies.LoadOptions{SkipTests: true, EvalTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// parityReviews are every bundled fixture case, every load-test review and
// generated QuantumNodes (and Pods) over the label shapes, operations and
// kinds that could tell the two rules apart.
func parityReviews(t *testing.T, now time.Time) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	cases := bundledCases(t, now)
	for _, c := range cases {
		b, err := c.Spec.reviewBytes()
		if err != nil {
			t.Fatalf("%s: %v", c.Location, err)
		}
		out["fixture "+c.Location] = b
	}
	loadReviews, err := filepath.Glob("../../../test/load/testdata/*.json")
	if err != nil || len(loadReviews) == 0 {
		t.Fatalf("no load-test reviews: %v", err)
	}
	for _, f := range loadReviews {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out["load "+filepath.Base(f)] = b
	}
	for name, b := range generatedReviews(t) {
		out["generated "+name] = b
	}
	return out
}

func generatedReviews(t *testing.T) map[string][]byte {
	t.Helper()
	labelShapes := map[string]any{
		"no labels key":       nil,
		"labels null":         "null",
		"no labels":           map[string]any{},
		"other labels":        map[string]any{"team": "ops"},
		"priority low":        map[string]any{"priority": "low"},
		"priority high":       map[string]any{"priority": "high"},
		"priority LOW":        map[string]any{"priority": "LOW"},
		"priority empty":      map[string]any{"priority": ""},
		"priority low space":  map[string]any{"priority": "low "},
		"priority wildcard":   map[string]any{"priority": "lo*"},
		"priority either":     map[string]any{"priority": "low|high"},
		"priority key cased":  map[string]any{"Priority": "low"},
		"priority and others": map[string]any{"priority": "low", "team": "ops", "app.kubernetes.io/name": "x"},
	}
	kinds := map[string][4]string{ // group, version, kind, resource
		"QuantumNode": {"qn.dev", "v1alpha1", "QuantumNode", "quantumnodes"},
		"Pod":         {"", "v1", "Pod", "pods"},
	}
	out := map[string][]byte{}
	for shape, labels := range labelShapes {
		for kname, k := range kinds {
			for _, op := range []string{"CREATE", "UPDATE", "DELETE"} {
				for _, oldShape := range []string{"priority low", "priority high"} {
					if op == "CREATE" && oldShape != "priority low" {
						continue
					}
					obj := object(k, labels)
					old := object(k, labelShapes[oldShape])
					req := map[string]any{
						"uid":       "parity",
						"kind":      map[string]any{"group": k[0], "version": k[1], "kind": k[2]},
						"resource":  map[string]any{"group": k[0], "version": k[1], "resource": k[3]},
						"namespace": "edge", "name": "n1", "operation": op,
						"userInfo": map[string]any{"username": "alice", "groups": []any{"system:authenticated"}},
					}
					switch op {
					case "CREATE":
						req["object"] = obj
					case "UPDATE":
						req["object"], req["oldObject"] = obj, old
					case "DELETE":
						req["oldObject"] = obj
					}
					b, err := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
					if err != nil {
						t.Fatal(err)
					}
					out[fmt.Sprintf("%s %s, %s (old: %s)", op, kname, shape, oldShape)] = b
				}
			}
		}
	}
	return out
}

func object(k [4]string, labels any) map[string]any {
	apiVersion := k[1]
	if k[0] != "" {
		apiVersion = k[0] + "/" + k[1]
	}
	meta := map[string]any{"name": "n1", "namespace": "edge"}
	switch l := labels.(type) {
	case string: // "null"
		meta["labels"] = nil
	case map[string]any:
		meta["labels"] = l
	}
	return map[string]any{
		"apiVersion": apiVersion, "kind": k[2], "metadata": meta,
		"spec": map[string]any{"hardware": map[string]any{"arch": "arm64"}, "services": []any{map[string]any{"name": "mqtt", "port": 8883}}},
	}
}

// decideAs is the validating webhook's decision on review with both
// objects moved into role.
func decideAs(t *testing.T, set *policies.Set, review []byte, role string, now time.Time) policies.Decision {
	t.Helper()
	rev, err := webhook.DecodeReview(review)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	for _, target := range []*runtime.RawExtension{&rev.Request.Object, &rev.Request.OldObject} {
		if len(target.Raw) > 0 && string(target.Raw) != "null" {
			setRole(target, role)
		}
	}
	b, err := json.Marshal(rev)
	if err != nil {
		t.Fatal(err)
	}
	out, err := evaluate(context.Background(), set, evalRequest{Review: b, Webhook: webhookValidate, Now: now})
	if err != nil {
		t.Fatalf("evaluate as %s: %v", role, err)
	}
	return out.Validate.Decision
}

func TestBatchPatternAnswersAsTheRegoRule(t *testing.T) {
	set := paritySet(t)
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	reviews := parityReviews(t, now)
	names := make([]string, 0, len(reviews))
	for n := range reviews {
		names = append(names, n)
	}
	sort.Strings(names)
	var denied, admitted int
	for _, name := range names {
		r := decideAs(t, set, reviews[name], "parity-rego", now)
		p := decideAs(t, set, reviews[name], "parity-pattern", now)
		rDenied, pDenied := hasReason(r, batchReason), hasReason(p, batchReason)
		if r.Allowed != p.Allowed || r.Code != p.Code || rDenied != pDenied || len(r.Reasons) != len(p.Reasons) {
			t.Errorf("%s:\n  rego    allowed=%v code=%d %q\n  pattern allowed=%v code=%d %q", name, r.Allowed, r.Code, r.Message, p.Allowed, p.Code, p.Message)
			continue
		}
		if rDenied {
			denied++
		} else if r.Allowed {
			admitted++
		}
	}
	t.Logf("%d requests: %d denied by both rules, %d admitted by both", len(names), denied, admitted)
	// The comparison means something only if both answers occur often.
	if denied < 20 || admitted < 20 {
		t.Fatalf("only %d denials and %d admissions among %d requests: the inputs no longer exercise the rule", denied, admitted, len(names))
	}
}

func hasReason(d policies.Decision, prefix string) bool {
	for _, r := range d.Reasons {
		if strings.HasPrefix(r, prefix) {
			return true
		}
	}
	return false
}
