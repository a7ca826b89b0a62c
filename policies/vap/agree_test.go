package vap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/cel/environment"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/vap"
	"github.com/quantumnode/qn-admission/rego"
)

// The compiled policy, evaluated by the API server's own CEL, against the
// webhook's engine on generated requests. Two properties:
//
//   - sound: the API server never refuses what the webhook admits (it is a
//     safety net beside the webhook, never a second opinion);
//   - complete for the static part: on structurally valid QuantumNodes in
//     a window with room (what remains is the role table and the role
//     conditions the compiler translates), it refuses exactly what the
//     webhook refuses, the role table's refusals in the same words.

// policyDir is the bundled policy directory with files replaced (an
// empty content removes the file).
func policyDir(t testing.TB, replace map[string]string) fs.FS {
	t.Helper()
	dir := fstest.MapFS{}
	err := fs.WalkDir(rego.Bundled(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(rego.Bundled(), path)
		dir[path] = &fstest.MapFile{Data: data}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range replace {
		if content == "" {
			delete(dir, name)
			continue
		}
		dir[name] = &fstest.MapFile{Data: []byte(content)}
	}
	return dir
}

func load(t testing.TB, fsys fs.FS) *policies.Set {
	t.Helper()
	// The bundled Rego tests pin the bundled parameters; a changed table
	// is tested here, not by them.
	set, err := policies.Load(context.Background(), fsys, policies.LoadOptions{EvalTimeout: 5 * time.Second, SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// wideTable exercises every part of the role table: requesters by group,
// user prefix and service account, delete lists, moves in several
// directions, a role in warn mode and one in dryrun, exemptions by user,
// group prefix and namespace prefix, and a role that reads realtime's
// parameters under another name.
const wideTable = `defaultRole: default
exemptions:
  users: [breakglass]
  groups: ["qn:admins*"]
  namespaces: [kube-system, "sandbox-*"]
roles:
  realtime:
    operations: [CREATE, UPDATE]
    requesters: {groups: [qn:realtime-operators], users: ["ops-*"], serviceAccounts: ["qn-system:deployer", "ci:*"]}
    delete: {groups: [system:masters], users: [carol]}
    moveTo: [default]
    packages: [qn.quantumnode, qn.roles.realtime, qn.window, qn.mutate.managedby]
    parameters:
      allowedZones: [cn-shanghai, cn-beijing]
      maxLatencyBudgetMs: 49.5
  fast:
    operations: [CREATE, UPDATE, DELETE]
    requesters: {groups: [qn:realtime-operators]}
    packages: [qn.quantumnode, qn.roles.realtime]
  batch:
    operations: [CREATE]
    delete: {serviceAccounts: ["ci:*"]}
    window: {limit: 30, period: 60s}
    packages: [qn.quantumnode, qn.roles.batch, qn.window]
    parameters:
      priority: low
  trial:
    operations: [CREATE]
    enforcement: warn
    requesters: {users: [nobody]}
    packages: [qn.quantumnode, qn.roles.batch]
    packageEnforcement: {qn.roles.batch: deny}
  staged:
    operations: [CREATE, UPDATE]
    moveTo: [trial]
    packages: [qn.quantumnode, qn.roles.realtime]
    packageEnforcement: {qn.roles.realtime: warn}
  shadow:
    operations: [UPDATE]
    enforcement: dryrun
    moveTo: [default, batch]
    packages: [qn.quantumnode]
  default:
    operations: [CREATE, UPDATE, DELETE]
    moveTo: [realtime, batch, fast, trial, staged]
    packages: [qn.quantumnode, qn.window, qn.mutate.managedby]
`

// editedRealtime is qn.roles.realtime with one comparison changed: it no
// longer means what the compiler's translation says.
func editedRealtime(t testing.TB) string {
	t.Helper()
	src, err := fs.ReadFile(rego.Bundled(), "realtime.rego")
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(src), "to_number(budget) < params.maxLatencyBudgetMs\n\tinput.context.labels", "to_number(budget) <= params.maxLatencyBudgetMs\n\tinput.context.labels", 1)
	if edited == string(src) {
		t.Fatal("realtime.rego changed: adjust the edit")
	}
	return edited
}

func TestTheAPIServerAgreesWithTheWebhook(t *testing.T) {
	tests := map[string]struct {
		files map[string]string
		// complete: the compiled policy refuses exactly what the engine
		// refuses; otherwise it only never refuses more.
		complete bool
	}{
		"the bundled role table":                            {complete: true},
		"a table with every kind of rule":                   {files: map[string]string{"roles.yaml": wideTable}, complete: true},
		"an edited realtime package is left to the webhook": {files: map[string]string{"realtime.rego": editedRealtime(t)}},
		"a table whose realtime zones are not strings":      {files: map[string]string{"roles.yaml": strings.Replace(wideTable, "allowedZones: [cn-shanghai, cn-beijing]", "allowedZones: [cn-shanghai, 7]", 1)}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			set := load(t, policyDir(t, tt.files))
			compiled, err := vap.Compile(set, vap.Options{Source: "test"})
			if err != nil {
				t.Fatal(err)
			}
			apiServer, problems := compileForAPIServer(t, compiled, environment.DefaultCompatibilityVersion(), environment.StoredExpressions)
			if len(problems) > 0 {
				t.Fatalf("the policy does not compile: %v", problems)
			}
			engine := policies.NewEngine(set, policies.EngineOptions{})
			rng := rand.New(rand.NewPCG(29, uint64(len(name))))
			var refusedBoth, refusedOnlyByWebhook, admitted int
			for i := range 3000 {
				r := randomRequest(rng, set.Roles.Names())
				got := apiServer.judge(t, r)
				if len(got.errors) > 0 {
					t.Fatalf("request %d %s: the policy failed to evaluate (failurePolicy %s decides then): %v", i, describeRequest(r), failurePolicyOf(compiled.Policy), got.errors)
				}
				want := engine.Validate(context.Background(), engineInput(r))
				switch {
				case got.denied && want.Allowed:
					t.Fatalf("request %d %s: the API server refuses what the webhook admits:\n  %s", i, describeRequest(r), got.message)
				case tt.complete && !got.denied && !want.Allowed:
					t.Fatalf("request %d %s: the webhook refuses (%s), the API server admits", i, describeRequest(r), want.Message)
				case got.denied && !strings.HasPrefix(got.message, "denied by qn-admission") && got.message != want.Message:
					t.Fatalf("request %d %s: the role table's refusal reads differently:\n  API server: %s\n  webhook:    %s", i, describeRequest(r), got.message, want.Message)
				case got.denied:
					refusedBoth++
				case !want.Allowed:
					refusedOnlyByWebhook++
				default:
					admitted++
				}
			}
			t.Logf("3000 requests: %d refused by both, %d by the webhook only, %d admitted by both", refusedBoth, refusedOnlyByWebhook, admitted)
			if refusedBoth < 300 || admitted < 300 {
				t.Errorf("the generated requests hardly cover both answers (%d refused, %d admitted): widen them", refusedBoth, admitted)
			}
		})
	}
}

// randomRequest draws a QuantumNode write from the dimensions the role
// table and the role conditions read. The objects themselves are always
// valid (the CRD judges their shape).
func randomRequest(rng *rand.Rand, roles []string) request {
	pick := func(options ...string) string { return options[rng.IntN(len(options))] }
	roleNames := append([]string{"", "", "-", "turbo"}, roles...)
	annotations := func() map[string]string {
		a := map[string]string{}
		switch role := pick(roleNames...); role {
		case "":
		case "-":
			a[policies.RoleAnnotation] = ""
		default:
			a[policies.RoleAnnotation] = role
		}
		if budget := pick("", "20", "49.4", "49.5", "49.9", "50", "0049", "500", "fast", "1e3", "-1", "", "12.", ".5", "0.000000000000000000049", strings.Repeat("9", 200),
			"49.9999999999999999999", "50.0000000000000000001", "49.49999999999999999999", "49.50000000000000000001",
			"0000000000000000000049.5", "0000000000000000000080", "1234567890123456", strings.Repeat("0", 400)+"7"); budget != "" {
			a["qn.dev/latency-budget-ms"] = budget
		}
		return a
	}
	labels := func() map[string]string {
		l := map[string]string{}
		if z := pick("", "cn-shanghai", "cn-beijing", "eu-west-1", "CN-SHANGHAI"); z != "" {
			l["topology.kubernetes.io/zone"] = z
		}
		if p := pick("", "low", "high", "Low"); p != "" {
			l["priority"] = p
		}
		return l
	}
	users := []struct {
		name   string
		groups []string
	}{
		{"alice", []string{"system:authenticated"}},
		{"bob", []string{"qn:developers", "system:authenticated"}},
		{"carol", []string{"qn:realtime-operators", "system:authenticated"}},
		{"ops-7", []string{"system:authenticated"}},
		{"admin", []string{"system:masters", "system:authenticated"}},
		{"breakglass", nil},
		{"dana", []string{"qn:admins-emea", "system:authenticated"}},
		{"system:serviceaccount:qn-system:deployer", []string{"system:serviceaccounts", "system:serviceaccounts:qn-system", "system:authenticated"}},
		{"system:serviceaccount:ci:runner", []string{"system:serviceaccounts", "system:authenticated"}},
		{"system:serviceaccount:cix:runner", []string{"system:serviceaccounts", "system:authenticated"}},
		{"system:serviceaccount:kube-system:namespace-controller", []string{"system:serviceaccounts", "system:authenticated"}},
		{"system:serviceaccount:kube-system:generic-garbage-collector", []string{"system:serviceaccounts", "system:authenticated"}},
		{"system:kube-controller-manager", []string{"system:authenticated"}},
	}
	u := users[rng.IntN(len(users))]
	r := request{user: u.name, groups: u.groups, namespace: pick("edge", "edge", "edge", "kube-system", "sandbox-1", "sandboxes")}
	newNode := func() map[string]any {
		n := node("edge-1", annotations(), labels())
		n["metadata"].(map[string]any)["namespace"] = r.namespace
		return n
	}
	switch pick("CREATE", "UPDATE", "UPDATE", "DELETE") {
	case "CREATE":
		r.op, r.object = admission.Create, newNode()
	case "UPDATE":
		r.op, r.object, r.old = admission.Update, newNode(), newNode()
		if rng.IntN(3) == 0 {
			// The same role before and after: an update, not a move.
			old := r.old["metadata"].(map[string]any)
			if a, ok := r.object["metadata"].(map[string]any)["annotations"]; ok {
				old["annotations"] = a
			}
		}
	default:
		r.op, r.old = admission.Delete, newNode()
	}
	return r
}

// engineInput is the request as qn-webhook hands it to the engine: a
// dry run (so no rate window fills), with the context the webhook
// extracts.
func engineInput(r request) *policies.Input {
	raw := func(obj map[string]any) runtime.RawExtension {
		if obj == nil {
			return runtime.RawExtension{}
		}
		data, _ := json.Marshal(obj)
		return runtime.RawExtension{Raw: data}
	}
	dryRun := true
	req := &admissionv1.AdmissionRequest{
		UID:       types.UID(fmt.Sprintf("uid-%p", &r)),
		Kind:      metav1.GroupVersionKind{Group: qnv1alpha1.Group, Version: qnv1alpha1.Version, Kind: qnv1alpha1.Kind},
		Resource:  metav1.GroupVersionResource{Group: qnv1alpha1.Group, Version: qnv1alpha1.Version, Resource: qnv1alpha1.Resource},
		Namespace: r.namespace, Name: "edge-1",
		Operation: admissionv1.Operation(r.op),
		UserInfo:  authenticationv1.UserInfo{Username: r.user, Groups: r.groups},
		Object:    raw(r.object), OldObject: raw(r.old),
		DryRun: &dryRun,
	}
	meta := r.object
	if meta == nil {
		meta = r.old
	}
	strs := func(field string) map[string]string {
		out := map[string]string{}
		m, _ := meta["metadata"].(map[string]any)[field].(map[string]any)
		for k, v := range m {
			out[k] = v.(string)
		}
		return out
	}
	groups := r.groups
	if groups == nil {
		groups = []string{}
	}
	facts := policies.Facts{
		UID: string(req.UID), User: r.user, Groups: groups, Operation: string(r.op),
		Kind:      policies.GroupVersionKind{Group: qnv1alpha1.Group, Version: qnv1alpha1.Version, Kind: qnv1alpha1.Kind},
		Resource:  policies.GroupVersionRes{Group: qnv1alpha1.Group, Version: qnv1alpha1.Version, Resource: qnv1alpha1.Resource},
		Namespace: r.namespace, Name: "edge-1",
		Labels: strs("labels"), Annotations: strs("annotations"),
		DryRun: true, Time: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC),
	}
	facts.Role = facts.Annotations[policies.RoleAnnotation]
	return &policies.Input{Request: req, Object: r.object, OldObject: r.old, Facts: facts}
}

func describeRequest(r request) string {
	return fmt.Sprintf("%s by %s %v in %s, object %s, stored %s", r.op, r.user, r.groups, r.namespace, jsonString(metaOf(r.object)), jsonString(metaOf(r.old)))
}

func metaOf(obj map[string]any) any {
	if obj == nil {
		return nil
	}
	return obj["metadata"]
}

// The largest requests the API server lets through leave the policy
// answering, never failing (a failure would answer by failurePolicy): an
// annotation of 250 KiB (the API server caps all of them at 256 KiB), a
// requester in 2,000 groups, and every kind of refusal message over them.
func TestTheLargestRequestsDoNotMakeThePolicyFail(t *testing.T) {
	// The webhook's engine is the reference here, not the subject: its
	// Rego reads a 250 KiB number in seconds under the race detector on a
	// loaded machine, past load's 5 s deadline, and would then refuse for
	// the deadline instead of answering.
	set, err := policies.Load(context.Background(), policyDir(t, map[string]string{"roles.yaml": wideTable}), policies.LoadOptions{EvalTimeout: 2 * time.Minute, SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	compiled, err := vap.Compile(set, vap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, problems := compileForAPIServer(t, compiled, environment.DefaultCompatibilityVersion(), environment.StoredExpressions)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	groups := []string{"system:authenticated"}
	for i := range 2000 {
		groups = append(groups, fmt.Sprintf("team-%04d", i))
	}
	huge := strings.Repeat("9", 250<<10)
	engine := policies.NewEngine(set, policies.EngineOptions{})
	for name, r := range map[string]request{
		"a 250 KiB latency budget": {op: admission.Create, user: "carol", groups: []string{"qn:realtime-operators"}, namespace: "edge",
			object: node("edge-1", map[string]string{"qn-role": "realtime", "qn.dev/latency-budget-ms": huge}, map[string]string{"topology.kubernetes.io/zone": "cn-shanghai"})},
		"a 250 KiB number with a point": {op: admission.Create, user: "carol", groups: []string{"qn:realtime-operators"}, namespace: "edge",
			object: node("edge-1", map[string]string{"qn-role": "realtime", "qn.dev/latency-budget-ms": "1." + huge}, map[string]string{"topology.kubernetes.io/zone": "cn-shanghai"})},
		"2,000 groups, refused as a requester": {op: admission.Create, user: "dave", groups: groups, namespace: "edge",
			object: node("edge-1", map[string]string{"qn-role": "realtime"}, nil)},
		"2,000 groups, refused a deletion": {op: admission.Delete, user: "dave", groups: groups, namespace: "edge",
			old: node("edge-1", map[string]string{"qn-role": "realtime"}, nil)},
		"a 250 KiB role name": {op: admission.Create, user: "dave", groups: groups, namespace: "edge",
			object: node("edge-1", map[string]string{"qn-role": huge}, nil)},
	} {
		t.Run(name, func(t *testing.T) {
			got := p.judge(t, r)
			if len(got.errors) > 0 {
				t.Fatalf("the policy failed: %v", got.errors)
			}
			want := engine.Validate(context.Background(), engineInput(r))
			if got.denied != !want.Allowed {
				t.Fatalf("the API server denied=%v (%.200s), the webhook allowed=%v (%.200s)", got.denied, got.message, want.Allowed, want.Message)
			}
			for _, v := range compiled.Policy.Spec.Validations {
				if got.denied && got.message == v.Message {
					t.Errorf("the API server fell back to the static message %q: the message expression's was too long or failed", got.message)
				}
			}
			t.Logf("%.300s", got.message)
		})
	}
}
