package policies

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/quantumnode/qn-admission/internal/astjson"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
)

// TestFastPathMatchesReferenceEvaluation holds the engine's evaluation path
// (input built as ast.Value without what no policy reads, topdown run
// directly) equal to a plain reference
// evaluation of the same policies: the input document marshalled to JSON and
// given to OPA's prepared query as a Go value. Every role's validate and
// mutate query runs on every load fixture, every bundled fixture case and a
// seeded corpus of generated QuantumNodes, with and without a window state.
func TestFastPathMatchesReferenceEvaluation(t *testing.T) {
	set, err := Load(context.Background(), rego.Bundled(), LoadOptions{SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	inputs := map[string]*Input{}
	for name, in := range loadFixtureInputs(t) {
		inputs[name] = in
	}
	for name, in := range bundledCaseInputs(t) {
		inputs[name] = in
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for i := 0; i < 300; i++ {
		inputs[fmt.Sprintf("generated QuantumNode %d", i)] = generatedInput(t, rng)
	}
	if len(inputs) < 330 {
		t.Fatalf("only %d inputs; the fixtures were not found", len(inputs))
	}
	roles := make([]string, 0, len(set.validate))
	for role := range set.validate {
		roles = append(roles, role)
	}
	sort.Strings(roles)
	compared := 0
	for name, in := range inputs {
		decodedOnce := valueForm(t, in)
		for _, role := range roles {
			for _, q := range []*rego.Query{set.validate[role], set.mutate[role]} {
				if q == nil {
					continue
				}
				// The fast path is planned evaluation (rego/planeval):
				// every bundled query must run on it, or this test
				// compares topdown with itself.
				if planned, why := q.Planned(); !planned {
					t.Fatalf("role %s: query not planned: %s", role, why)
				}
				for _, window := range []*WindowState{nil, {Key: "user", Count: 119, Limit: 120, PeriodSeconds: 60, Remaining: 1}} {
					facts := in.Facts
					facts.Role, facts.Window = role, window
					fast, fastErr := evalFast(set, q, in, facts)
					ref, refErr := evalReference(q, in, facts)
					if (fastErr != nil) != (refErr != nil) {
						t.Fatalf("%s, role %s: fast path error %v, reference error %v", name, role, fastErr, refErr)
					}
					if fastErr != nil {
						continue
					}
					if !reflect.DeepEqual(fast, ref) {
						t.Fatalf("%s, role %s, window %v: fast path %+v, reference %+v", name, role, window, fast, ref)
					}
					// The webhook's form: objects decoded once, straight to Rego values.
					once, onceErr := evalFast(set, q, decodedOnce, facts)
					if onceErr != nil || !reflect.DeepEqual(once, ref) {
						t.Fatalf("%s, role %s, window %v: one-pass input %+v (error %v), reference %+v", name, role, window, once, onceErr, ref)
					}
					compared += 2
					// A traced request's form: the same query through the
					// tracer that times each package.
					if window == nil {
						v, err := policyInputValue(set, decodedOnce, facts)
						if err != nil {
							t.Fatal(err)
						}
						timed, _, timedErr := q.EvalTimed(context.Background(), v)
						if timedErr != nil || !reflect.DeepEqual(timed, ref) {
							t.Fatalf("%s, role %s: traced evaluation %+v (error %v), reference %+v", name, role, timed, timedErr, ref)
						}
						compared++
					}
				}
			}
		}
	}
	t.Logf("%d evaluations identical over %d inputs", compared, len(inputs))
}

func evalFast(set *Set, q *rego.Query, in *Input, facts Facts) (rego.Result, error) {
	v, err := policyInputValue(set, in, facts)
	if err != nil {
		return rego.Result{}, err
	}
	return q.Eval(context.Background(), v)
}

// evalReference evaluates the input's JSON form the plain way: the objects
// as the API server sends them (decoded by sigs.k8s.io/json, encoded by
// encoding/json), every number kept as written there (json.Number: OPA would
// write a float64 its own way), converted and evaluated by OPA.
func evalReference(q *rego.Query, in *Input, facts Facts) (rego.Result, error) {
	req := *in.Request
	for _, o := range []struct {
		raw     *[]byte
		decoded map[string]any
	}{{&req.Object.Raw, in.Object}, {&req.OldObject.Raw, in.OldObject}} {
		if o.decoded == nil {
			continue
		}
		js, err := json.Marshal(o.decoded)
		if err != nil {
			return rego.Result{}, err
		}
		*o.raw = js
	}
	doc, err := json.Marshal(policyInput{Request: &req, Facts: facts})
	if err != nil {
		return rego.Result{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var input any
	if err := dec.Decode(&input); err != nil {
		return rego.Result{}, err
	}
	return q.EvalReference(context.Background(), input)
}

// valueForm is in as the webhook builds it: the objects decoded from the
// request's bytes by internal/astjson, without Go maps.
func valueForm(t *testing.T, in *Input) *Input {
	out := *in
	out.Object, out.OldObject = nil, nil
	for _, f := range []struct {
		raw []byte
		to  *ast.Value
	}{{in.Request.Object.Raw, &out.ObjectValue}, {in.Request.OldObject.Raw, &out.OldObjectValue}} {
		if len(f.raw) == 0 {
			continue
		}
		v, err := astjson.Decode(f.raw)
		if err != nil {
			t.Fatal(err)
		}
		*f.to = v
	}
	return &out
}

// loadFixtureInputs reads the load suite's AdmissionReviews.
func loadFixtureInputs(t *testing.T) map[string]*Input {
	files, err := filepath.Glob("../test/load/testdata/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no load fixtures: %v", err)
	}
	out := map[string]*Input{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(data, &review); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = requestInput(t, review.Request)
	}
	return out
}

// bundledCaseInputs turns every case of the bundled fixture files into a
// request: CREATE for a case with only an object, UPDATE with an oldObject.
func bundledCaseInputs(t *testing.T) map[string]*Input {
	files, err := filepath.Glob("../test/fixtures/bundled/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bundled fixtures: %v", err)
	}
	out := map[string]*Input{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var file struct {
			Cases []struct {
				Name      string          `json:"name"`
				Operation string          `json:"operation"`
				User      string          `json:"user"`
				Object    json.RawMessage `json:"object"`
				OldObject json.RawMessage `json:"oldObject"`
			} `json:"cases"`
		}
		if err := yaml.Unmarshal(data, &file); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, c := range file.Cases {
			op := admissionv1.Operation(c.Operation)
			if op == "" {
				op = admissionv1.Create
				if len(c.OldObject) > 0 {
					op = admissionv1.Update
				}
			}
			req := quantumNodeRequest(op, orDefault(c.User, "alice"), c.Object, c.OldObject)
			out[filepath.Base(f)+": "+c.Name] = requestInput(t, req)
		}
	}
	return out
}

// generatedInput is a random QuantumNode request: zones, roles, latency
// budgets, architectures and services drawn from values the policies judge
// and values they do not.
func generatedInput(t *testing.T, rng *rand.Rand) *Input {
	pick := func(list ...string) string { return list[rng.IntN(len(list))] }
	labels := map[string]any{}
	if rng.IntN(4) > 0 {
		labels["topology.kubernetes.io/zone"] = pick("cn-shanghai", "cn-beijing", "eu-west", "us-east", "")
	}
	if rng.IntN(3) == 0 {
		labels["qn.dev/managed-by"] = pick("qn-admission", "someone-else")
	}
	annotations := map[string]any{}
	if role := pick("realtime", "batch", "default", "unknown", ""); role != "" {
		annotations[RoleAnnotation] = role
	}
	if rng.IntN(4) > 0 {
		annotations["qn.dev/latency-budget-ms"] = pick("5", "20", "49", "50", "500", "fast", "-1", "1e2")
	}
	services := []any{}
	for i := rng.IntN(6); i > 0; i-- {
		svc := map[string]any{"name": pick("mqtt", "metrics", "ota", "ssh", "", "mqtt")}
		if rng.IntN(8) > 0 {
			svc["port"] = []any{8883, 9100, 8443, 22, 0, 70000, 443}[rng.IntN(7)]
		}
		services = append(services, svc)
	}
	spec := map[string]any{"services": services}
	if rng.IntN(6) > 0 {
		spec["hardware"] = map[string]any{"arch": pick("arm64", "amd64", "riscv64", "")}
	}
	if rng.IntN(3) == 0 {
		spec["replicas"] = rng.IntN(20)
	}
	obj := map[string]any{
		"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode",
		"metadata": map[string]any{"name": fmt.Sprintf("node-%d", rng.IntN(100)), "namespace": "edge", "labels": labels, "annotations": annotations},
		"spec":     spec,
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	op := admissionv1.Operation(pick("CREATE", "UPDATE", "DELETE"))
	var object, old json.RawMessage
	switch op {
	case admissionv1.Create:
		object = raw
	case admissionv1.Update:
		object, old = raw, raw
	case admissionv1.Delete:
		old = raw
	}
	return requestInput(t, quantumNodeRequest(op, pick("alice", "bob", "system:serviceaccount:kube-system:gc"), object, old))
}

func quantumNodeRequest(op admissionv1.Operation, user string, object, oldObject []byte) *admissionv1.AdmissionRequest {
	dryRun := false
	return &admissionv1.AdmissionRequest{
		UID:       "u-1",
		Kind:      metav1.GroupVersionKind{Group: "qn.dev", Version: "v1alpha1", Kind: "QuantumNode"},
		Resource:  metav1.GroupVersionResource{Group: "qn.dev", Version: "v1alpha1", Resource: "quantumnodes"},
		Name:      "edge-1",
		Namespace: "edge",
		Operation: op,
		UserInfo:  authv1UserInfo(user),
		Object:    runtime.RawExtension{Raw: object},
		OldObject: runtime.RawExtension{Raw: oldObject},
		DryRun:    &dryRun,
	}
}

// requestInput decodes the objects as the webhook does (sigs.k8s.io/json,
// integers as int64) and fills the facts the policies read.
func requestInput(t *testing.T, req *admissionv1.AdmissionRequest) *Input {
	in := &Input{Request: req}
	decode := func(raw []byte) map[string]any {
		if len(raw) == 0 {
			return nil
		}
		var m map[string]any
		if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	in.Object, in.OldObject = decode(req.Object.Raw), decode(req.OldObject.Raw)
	meta := in.Object
	if meta == nil {
		meta = in.OldObject
	}
	strings := func(field string) map[string]string {
		out := map[string]string{}
		md, _ := meta["metadata"].(map[string]any)
		m, _ := md[field].(map[string]any)
		for k, v := range m {
			out[k], _ = v.(string)
		}
		return out
	}
	groups := req.UserInfo.Groups
	if groups == nil {
		groups = []string{}
	}
	in.Facts = Facts{
		UID: string(req.UID), User: req.UserInfo.Username, Groups: groups, Operation: string(req.Operation),
		Kind:      GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind},
		Resource:  GroupVersionRes{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource},
		Namespace: req.Namespace, Name: req.Name, Labels: strings("labels"), Annotations: strings("annotations"),
		DryRun: req.DryRun != nil && *req.DryRun, Time: t0,
	}
	in.Facts.Role = in.Facts.Annotations[RoleAnnotation]
	return in
}

func authv1UserInfo(user string) authenticationv1.UserInfo {
	return authenticationv1.UserInfo{Username: user, Groups: []string{"edge-ops", "system:authenticated"}}
}

func TestPolicyInputLeavesOutManagedFieldsNoPolicyReads(t *testing.T) {
	set, err := Load(context.Background(), rego.Bundled(), LoadOptions{SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range loadFixtureInputs(t) {
		full, err := inputValue(in, in.Facts)
		if err != nil {
			t.Fatal(err)
		}
		projected, err := policyInputValue(set, in, in.Facts)
		if err != nil {
			t.Fatal(err)
		}
		ref := ast.MustParseRef("input.request.object.metadata.managedFields")[1:]
		if _, err := full.Find(ref); err != nil {
			t.Fatalf("%s: fixture has no managedFields to leave out", name)
		}
		if _, err := projected.Find(ref); err == nil {
			t.Errorf("%s: the bundled policies read no managedFields, but the input carries them", name)
		}
		if in.Object["metadata"].(map[string]any)["managedFields"] == nil {
			t.Errorf("%s: the decoded object lost its managedFields; patches and explanations read it", name)
		}
	}
}

// TestEngineDecidesAlikeOnDecodedValues holds the engine's whole answer
// (role binding, pattern policies, patches) the same whether the objects
// arrive as Go maps or, as from the webhook, as Rego values decoded once.
func TestEngineDecidesAlikeOnDecodedValues(t *testing.T) {
	sets := map[string]*Set{}
	bundled, err := Load(context.Background(), rego.Bundled(), LoadOptions{SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	sets["bundled"] = bundled
	patterns, err := Load(context.Background(), os.DirFS("../cmd/qnctl/app/testdata/patterns"), LoadOptions{SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	sets["patterns"] = patterns
	inputs := loadFixtureInputs(t)
	for name, in := range bundledCaseInputs(t) {
		inputs[name] = in
	}
	compared := 0
	for setName, set := range sets {
		maps := NewEngine(set, EngineOptions{Windows: window.NewMemoryStore(clocktesting.NewFakePassiveClock(t0), window.MemoryOptions{})})
		values := NewEngine(set, EngineOptions{Windows: window.NewMemoryStore(clocktesting.NewFakePassiveClock(t0), window.MemoryOptions{})})
		for name, in := range inputs {
			for _, path := range []Path{PathValidate, PathMutate} {
				decide := func(e *Engine, in *Input) Decision {
					if path == PathMutate {
						return e.Mutate(context.Background(), in)
					}
					return e.Validate(context.Background(), in)
				}
				want := decide(maps, in)
				got := decide(values, valueForm(t, in))
				if got.Allowed != want.Allowed || got.Code != want.Code || got.Message != want.Message ||
					!reflect.DeepEqual(got.Warnings, want.Warnings) || string(got.Patch) != string(want.Patch) || got.Role != want.Role {
					t.Fatalf("%s set, %s, %v: from values %+v, from maps %+v", setName, name, path, got, want)
				}
				compared++
			}
		}
	}
	t.Logf("%d decisions identical", compared)
}

// The input builder leaves out exactly the members of input.request and
// input.context that no policy of the set may read.
func TestInputFieldsFollowWhatPoliciesRead(t *testing.T) {
	skipped := func(m map[*ast.Term]bool) []string {
		var out []string
		for k := range m {
			out = append(out, string(k.Value.(ast.String)))
		}
		sort.Strings(out)
		return out
	}
	cases := []struct {
		name, source             string
		keepRequest, keepContext []string // must be built
		skipRequest, skipContext []string // must be left out
	}{
		{
			name:        "a reference and object.get name their members",
			source:      "package p\ndeny contains input.context.user if object.get(input.request, [\"userInfo\", \"username\"], \"\") == \"x\"\n",
			keepRequest: []string{"userInfo"}, keepContext: []string{"user"},
			skipRequest: []string{"uid", "options", "object", "oldObject"}, skipContext: []string{"uid", "groups", "time", "labels", "window"},
		},
		{
			name:        "a member chosen by a variable keeps them all",
			source:      "package p\ndeny contains k if { some k; input.context[k] == \"x\" }\n",
			keepContext: []string{"uid", "user", "groups", "time", "labels", "window", "extra"},
			skipRequest: []string{"uid", "userInfo", "object"},
		},
		{
			name:        "input passed whole keeps everything",
			source:      "package p\ndeny contains \"x\" if count(input) > 5\n",
			keepRequest: []string{"uid", "userInfo", "object", "options"}, keepContext: []string{"uid", "time", "window"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := rego.Compile([]rego.Module{{Path: "p.rego", Source: tc.source}}, nil, rego.CompileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			f := newInputFields(c)
			for _, check := range []struct {
				skip       map[*ast.Term]bool
				keep, drop []string
				where      string
			}{{f.skipRequest, tc.keepRequest, tc.skipRequest, "request"}, {f.skipContext, tc.keepContext, tc.skipContext, "context"}} {
				got := skipped(check.skip)
				for _, k := range check.keep {
					if slices.Contains(got, k) {
						t.Errorf("input.%s.%s is left out (skipped %v)", check.where, k, got)
					}
				}
				for _, k := range check.drop {
					if !slices.Contains(got, k) {
						t.Errorf("input.%s.%s is built although no policy reads it (skipped %v)", check.where, k, got)
					}
				}
			}
		})
	}
	// The bundled set: what its policies read is built, the rest is not.
	set, err := Load(context.Background(), rego.Bundled(), LoadOptions{SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := skipped(set.fields.skipContext); slices.Contains(got, "labels") || slices.Contains(got, "window") || !slices.Contains(got, "user") {
		t.Errorf("bundled set skips context members %v", got)
	}
	if got := skipped(set.fields.skipRequest); slices.Contains(got, "object") || slices.Contains(got, "operation") || !slices.Contains(got, "userInfo") {
		t.Errorf("bundled set skips request members %v", got)
	}
}
