package vap_test

import (
	"io/fs"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/policies/vap"
	"github.com/quantumnode/qn-admission/rego"
)

func TestThePolicyCompilesWhereverTheChartRuns(t *testing.T) {
	r, err := vap.Compile(load(t, rego.Bundled()), vap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, env := range map[string]struct {
		v    *version.Version
		mode environment.Type
	}{
		// A 1.30 API server checks a new policy against the CEL of 1.29.
		"created on a Kubernetes 1.30 API server": {version.MajorMinor(1, 29), environment.NewExpressions},
		"created on the test API server":          {environment.DefaultCompatibilityVersion(), environment.NewExpressions},
		"run by the test API server":              {environment.DefaultCompatibilityVersion(), environment.StoredExpressions},
	} {
		t.Run(name, func(t *testing.T) {
			if _, problems := compileForAPIServer(t, r, env.v, env.mode); len(problems) > 0 {
				t.Fatalf("CEL %s: %s", env.v, strings.Join(problems, "\n"))
			}
		})
	}
}

func TestTheBundledTableCompilesToTheseParameters(t *testing.T) {
	r, err := vap.Compile(load(t, rego.Bundled()), vap.Options{Source: "bundled"})
	if err != nil {
		t.Fatal(err)
	}
	empty := []string{}
	noConditions := qnv1alpha1.RoleConditions{Labels: []qnv1alpha1.ValueCondition{}, Annotations: []qnv1alpha1.ValueCondition{}}
	authenticated := &qnv1alpha1.CompiledSubjects{Users: empty, UserPrefixes: empty, Groups: []string{"system:authenticated"}, GroupPrefixes: empty, Description: "groups system:authenticated"}
	masters := &qnv1alpha1.CompiledSubjects{Users: empty, UserPrefixes: empty, Groups: []string{"system:masters"}, GroupPrefixes: empty, Description: "groups system:masters"}
	want := qnv1alpha1.RoleTableSpec{
		Revision: r.Params.Spec.Revision, Source: "bundled", DefaultRole: "default",
		RoleNames: []string{"batch", "default", "realtime"},
		Exemptions: qnv1alpha1.RoleTableExemptions{Users: empty, UserPrefixes: empty, Groups: empty, GroupPrefixes: empty,
			Namespaces: []string{"kube-system"}, NamespacePrefixes: empty},
		Roles: map[string]qnv1alpha1.CompiledRole{
			"realtime": {Operations: []string{"CREATE", "UPDATE"}, Enforced: true, Requesters: authenticated, Delete: masters, MoveTo: empty,
				Conditions: qnv1alpha1.RoleConditions{
					Labels:      []qnv1alpha1.ValueCondition{{Key: "topology.kubernetes.io/zone", Values: []string{"cn-shanghai"}, Rule: "qn.roles.realtime: roles.realtime.parameters.allowedZones"}},
					Annotations: []qnv1alpha1.ValueCondition{{Key: "qn.dev/latency-budget-ms", Below: "50", Rule: "qn.roles.realtime: roles.realtime.parameters.maxLatencyBudgetMs"}},
				}},
			"batch": {Operations: []string{"CREATE"}, Enforced: true, Requesters: authenticated, Delete: masters, MoveTo: empty,
				Conditions: qnv1alpha1.RoleConditions{
					Labels:      []qnv1alpha1.ValueCondition{{Key: "priority", Values: []string{"low"}, Rule: "qn.roles.batch: roles.batch.parameters.priority"}},
					Annotations: []qnv1alpha1.ValueCondition{},
				}},
			"default": {Operations: []string{"CREATE", "UPDATE", "DELETE"}, Enforced: true, MoveTo: []string{"realtime"}, Conditions: noConditions},
		},
	}
	if !strings.HasPrefix(want.Revision, "sha256:") {
		t.Errorf("revision %q is not the set's content hash", want.Revision)
	}
	if !equality.Semantic.DeepEqual(r.Params.Spec, want) {
		got, _ := yaml.Marshal(r.Params.Spec)
		t.Fatalf("the parameters are:\n%s", got)
	}
}

func TestTheReportSaysWhereEachRuleIsEnforced(t *testing.T) {
	tests := map[string]struct {
		files map[string]string
		role  string
		want  map[string]vap.Where // rule text prefix -> where
		why   map[string]string    // rule text prefix -> part of why
		note  string               // part of the role's note
	}{
		"bundled realtime": {
			role: "realtime",
			want: map[string]vap.Where{
				"operations CREATE, UPDATE":               vap.WhereAPIServer,
				"requesters: groups system:authenticated": vap.WhereAPIServer,
				"delete: groups system:masters":           vap.WhereAPIServer,
				"moveTo: none":                            vap.WhereAPIServer,
				"Rego package qn.roles.realtime":          vap.WhereAPIServer,
				"Rego package qn.quantumnode":             vap.WhereCRD,
				"window: 120 changes per 1m0s per user":   vap.WhereWebhook,
				"Rego package qn.window":                  vap.WhereWebhook,
				"Rego package qn.mutate.managedby":        vap.WhereWebhook,
			},
			why: map[string]string{
				"window: 120":                      "keeps no state",
				"Rego package qn.mutate.managedby": "cannot change an object",
			},
		},
		"an edited package is left to the webhook, and says why": {
			files: map[string]string{"realtime.rego": editedRealtime(t)},
			role:  "realtime",
			want:  map[string]vap.Where{"Rego package qn.roles.realtime": vap.WhereWebhook},
			why:   map[string]string{"Rego package qn.roles.realtime": "package qn.roles.realtime differs from the bundled one"},
		},
		"an edited package another one reads leaves both": {
			files: map[string]string{"quantumnode.rego": strings.Replace(mustRead(t, "quantumnode.rego"), `input.request.operation in {"CREATE", "UPDATE"}`, `input.request.operation in {"CREATE"}`, 1)},
			role:  "batch",
			want:  map[string]vap.Where{"Rego package qn.roles.batch": vap.WhereWebhook, "Rego package qn.quantumnode": vap.WhereWebhook},
			why:   map[string]string{"Rego package qn.roles.batch": "package qn.quantumnode differs from the bundled one"},
		},
		"a parameter of the wrong type is named": {
			files: map[string]string{"roles.yaml": strings.Replace(mustRead(t, "roles.yaml"), "maxLatencyBudgetMs: 50", `maxLatencyBudgetMs: "50"`, 1)},
			role:  "realtime",
			want:  map[string]vap.Where{"Rego package qn.roles.realtime": vap.WhereWebhook},
			why:   map[string]string{"Rego package qn.roles.realtime": `roles.realtime.parameters.maxLatencyBudgetMs is "50", not a number`},
		},
		"a package in warn mode is left to the webhook": {
			files: map[string]string{"roles.yaml": strings.Replace(mustRead(t, "roles.yaml"), "      maxLatencyBudgetMs: 50\n", "      maxLatencyBudgetMs: 50\n    packageEnforcement: {qn.roles.realtime: warn}\n", 1)},
			role:  "realtime",
			want:  map[string]vap.Where{"Rego package qn.roles.realtime": vap.WhereWebhook, "operations CREATE, UPDATE": vap.WhereAPIServer},
			why:   map[string]string{"Rego package qn.roles.realtime": "its enforcement is warn"},
		},
		"a role in warn mode is compiled and not enforced": {
			files: map[string]string{"roles.yaml": strings.Replace(mustRead(t, "roles.yaml"), "    window: {limit: 30, period: 60s, key: user}\n", "    window: {limit: 30, period: 60s, key: user}\n    enforcement: warn\n", 1)},
			role:  "batch",
			want:  map[string]vap.Where{"operations CREATE": vap.WhereAPIServer},
			note:  "leaves this role's table refusals to the webhook",
		},
		"a role's own Rego package is left to the webhook": {
			files: map[string]string{
				"roles.yaml": strings.Replace(mustRead(t, "roles.yaml"), "packages: [qn.quantumnode, qn.window, qn.mutate.managedby]", "packages: [qn.quantumnode, qn.window, qn.mutate.managedby, team.rules]", 1),
				"team.rego":  "package team.rules\n\ndeny contains \"no\" if input.context.labels.forbidden\n",
			},
			role: "default",
			want: map[string]vap.Where{"Rego package team.rules": vap.WhereWebhook},
			why:  map[string]string{"Rego package team.rules": "Rego runs in the webhook"},
		},
		"a package that reads the inventory is left to the webhook, which alone sees the cluster": {
			files: map[string]string{
				"roles.yaml": strings.Replace(mustRead(t, "roles.yaml"), "packages: [qn.quantumnode, qn.window, qn.mutate.managedby]", "packages: [qn.quantumnode, qn.window, qn.mutate.managedby, team.unique]", 1),
				"team.rego":  "package team.unique\n\ndeny contains \"taken\" if data.inventory.cluster.v1.Node[input.request.name].metadata.labels.taken\n",
			},
			role: "default",
			want: map[string]vap.Where{"Rego package team.unique": vap.WhereWebhook, "Rego package qn.quantumnode": vap.WhereCRD},
			why:  map[string]string{"Rego package team.unique": "reads the cluster inventory (data.inventory, other stored objects), which the ValidatingAdmissionPolicy cannot see"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r, err := vap.Compile(load(t, policyDir(t, tt.files)), vap.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var role *vap.RoleReport
			for i := range r.Report.Roles {
				if r.Report.Roles[i].Role == tt.role {
					role = &r.Report.Roles[i]
				}
			}
			if role == nil {
				t.Fatalf("no report for role %s", tt.role)
			}
			for prefix, where := range tt.want {
				rule, ok := ruleStarting(role, prefix)
				if !ok {
					t.Errorf("no rule %q in %+v", prefix, role.Rules)
					continue
				}
				if rule.Where != where {
					t.Errorf("%s: enforced by %s, want %s (%s)", prefix, rule.Where, where, rule.Why)
				}
				if where == vap.WhereWebhook && rule.Why == "" {
					t.Errorf("%s is left out without a reason", prefix)
				}
			}
			for prefix, why := range tt.why {
				if rule, _ := ruleStarting(role, prefix); !strings.Contains(rule.Why, why) {
					t.Errorf("%s: why %q, want it to say %q", prefix, rule.Why, why)
				}
			}
			if !strings.Contains(role.Note, tt.note) || tt.note == "" && role.Note != "" {
				t.Errorf("the role's note is %q, want it to say %q", role.Note, tt.note)
			}
		})
	}
}

func ruleStarting(r *vap.RoleReport, prefix string) (vap.Rule, bool) {
	for _, rule := range r.Rules {
		if strings.HasPrefix(rule.What, prefix) {
			return rule, true
		}
	}
	return vap.Rule{}, false
}

func mustRead(t testing.TB, name string) string {
	t.Helper()
	data, err := fs.ReadFile(rego.Bundled(), name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestARoleTableBeyondTheParametersLimitsIsRefusedByName(t *testing.T) {
	var users []string
	for i := range 65 {
		users = append(users, "user-"+strings.Repeat("x", i%5)+string(rune('a'+i%26))+strings.Repeat("y", i/26))
	}
	roles := strings.Replace(mustRead(t, "roles.yaml"), "requesters: {groups: [system:authenticated]}\n    delete: {groups: [system:masters]}\n    window: {limit: 120",
		"requesters: {users: ["+strings.Join(users, ", ")+"]}\n    delete: {groups: [system:masters]}\n    window: {limit: 120", 1)
	_, err := vap.Compile(load(t, policyDir(t, map[string]string{"roles.yaml": roles})), vap.Options{})
	if err == nil || !strings.Contains(err.Error(), "roles.realtime.requesters.users and serviceAccounts: 65 entries, at most 64 compile") {
		t.Fatalf("want the field named, got %v", err)
	}
}

func TestTheOptionsShapeOnlyTheBinding(t *testing.T) {
	set := load(t, rego.Bundled())
	plain, err := vap.Compile(set, vap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	audit, err := vap.Compile(set, vap.Options{Name: "qn", Actions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit, admissionregistrationv1.Warn},
		ExcludeNamespaces: []string{"kube-system", "qn-system"}})
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(plain.Policy.Spec, audit.Policy.Spec) || !equality.Semantic.DeepEqual(plain.Params.Spec, audit.Params.Spec) {
		t.Errorf("the policy or the parameters depend on the options")
	}
	b := audit.Binding
	if b.Name != "qn" || b.Spec.PolicyName != "qn" || b.Spec.ParamRef.Name != "qn" || audit.Params.Name != "qn" || audit.Policy.Name != "qn" {
		t.Errorf("names: binding %s policy %s paramRef %s params %s", b.Name, b.Spec.PolicyName, b.Spec.ParamRef.Name, audit.Params.Name)
	}
	if got := b.Spec.ValidationActions; len(got) != 2 || got[0] != admissionregistrationv1.Audit || got[1] != admissionregistrationv1.Warn {
		t.Errorf("actions %v", got)
	}
	if got := b.Spec.MatchResources.NamespaceSelector.MatchExpressions[0].Values; strings.Join(got, ",") != "kube-system,qn-system" {
		t.Errorf("excluded namespaces %v", got)
	}
	if got := plain.Binding.Spec.ValidationActions; len(got) != 1 || got[0] != admissionregistrationv1.Deny {
		t.Errorf("default actions %v, want [Deny]", got)
	}
	if *plain.Binding.Spec.ParamRef.ParameterNotFoundAction != admissionregistrationv1.AllowAction {
		t.Errorf("missing parameters must not refuse every write (the namespace controller's among them)")
	}
}

func TestTheYAMLStreamIsTheObjects(t *testing.T) {
	r, err := vap.Compile(load(t, rego.Bundled()), vap.Options{Source: "bundled"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.YAML()
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(out), "\n---\n")
	if len(docs) != 4 || !strings.HasPrefix(docs[0], "# ") {
		t.Fatalf("want the report as comments and three documents, got %d parts:\n%s", len(docs), out)
	}
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	var params qnv1alpha1.QuantumNodeRoleTable
	for i, into := range []any{&policy, &binding, &params} {
		if err := yaml.UnmarshalStrict([]byte(docs[i+1]), into); err != nil {
			t.Fatalf("document %d: %v", i+1, err)
		}
	}
	if !equality.Semantic.DeepEqual(policy.Spec, r.Policy.Spec) || !equality.Semantic.DeepEqual(binding.Spec, r.Binding.Spec) || !equality.Semantic.DeepEqual(params.Spec, r.Params.Spec) {
		t.Errorf("the stream does not decode to the compiled objects")
	}
	for _, want := range []string{"role realtime (enforcement deny)", "a rate window counts the requester's recent changes", "exemptions (admitted unjudged): namespaces kube-system"} {
		if !strings.Contains(docs[0], want) {
			t.Errorf("the report lacks %q:\n%s", want, docs[0])
		}
	}
	if strings.Contains(string(out), "creationTimestamp") || strings.Contains(string(out), "status:") {
		t.Errorf("the stream carries empty fields:\n%s", out)
	}
}
