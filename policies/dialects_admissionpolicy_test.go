package policies

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// celPolicies are a ValidatingAdmissionPolicy with its binding and
// parameters, and a Kyverno ValidatingPolicy, as users keep them.
var celPolicies = fstest.MapFS{
	"policies/arch.yaml": {Data: []byte(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: allowed-arch
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - apiGroups: [qn.dev]
      apiVersions: ["*"]
      resources: [quantumnodes]
      operations: [CREATE, UPDATE]
  validations:
  - expression: object.spec.hardware.arch in params.data.arches.split(',')
    messageExpression: "'arch ' + object.spec.hardware.arch + ' is not one of ' + params.data.arches"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: allowed-arch
spec:
  policyName: allowed-arch
  validationActions: [Deny]
  paramRef: {name: arches, parameterNotFoundAction: Deny}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: arches, namespace: edge}
data: {arches: "arm64,riscv64"}
`)},
	"policies/team.yaml": {Data: []byte(`apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: require-team
spec:
  validationActions: [Audit, Warn]
  matchConstraints:
    resourceRules:
    - apiGroups: [qn.dev]
      apiVersions: ["*"]
      resources: [quantumnodes]
      operations: [CREATE, UPDATE]
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: nodes name their team
  - expression: "!request.dryRun || object.metadata.name != ''"
    message: not judged in the background
`)},
}

func celSet(t *testing.T) *Set {
	t.Helper()
	fsys := fstest.MapFS{
		"roles.yaml": {Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE, UPDATE]\n    packages: [p]\n    policies: [allowed-arch, require-team]\n")},
		"p.rego":     {Data: []byte(portRego)},
	}
	for k, v := range celPolicies {
		fsys[k] = v
	}
	set, err := Load(context.Background(), fsys, LoadOptions{})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return set
}

// TestDialectCELPoliciesAtAdmissionAndInTheAudit: roles.yaml routes a
// ValidatingAdmissionPolicy and a Kyverno ValidatingPolicy by name; the
// first refuses a QuantumNode at admission beside the role's Rego, the
// second warns, and the audit reports the first's rule failed, the
// second's as Audit asks (a failure), and skips the rule that reads the
// request.
func TestDialectCELPoliciesAtAdmissionAndInTheAudit(t *testing.T) {
	e := NewEngine(celSet(t), EngineOptions{})
	amd := `{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"edge-1","namespace":"edge"},"spec":{"hardware":{"arch":"amd64"},"services":[{"name":"a","port":80}]}}`
	d := e.Validate(context.Background(), qnInput("CREATE", amd, ""))
	wantMsg := `denied by qn-admission (role "r"): port 80 is reserved; arch amd64 is not one of arm64,riscv64 (ValidatingAdmissionPolicy allowed-arch rule validations[0])`
	if d.Allowed || d.Code != 403 || d.Message != wantMsg {
		t.Fatalf("decision allowed=%v code=%d message=%q\nwant a 403: %q", d.Allowed, d.Code, d.Message, wantMsg)
	}
	if want := []string{"nodes name their team (ValidatingPolicy require-team rule validations[0])"}; !slices.Equal(d.Warnings, want) {
		t.Errorf("warnings %q, want %q", d.Warnings, want)
	}
	arm := strings.Replace(strings.Replace(amd, "amd64", "arm64", 1), `"port":80`, `"port":8080`, 1)
	if d := e.Validate(context.Background(), qnInput("CREATE", arm, "")); !d.Allowed {
		t.Fatalf("an arm64 node: %+v", d)
	}

	stored := storedNode("edge", nil, nil, map[string]any{"hardware": map[string]any{"arch": "amd64"}})
	res := e.Audit(context.Background(), stored)
	want := []string{"allowed-arch.validations[0]=fail", "p.deny=pass", "require-team.validations[0]=fail", "require-team.validations[1]=skip"}
	if got := verdicts(res); !slices.Equal(got, want) {
		t.Fatalf("verdicts %q, want %q", got, want)
	}
	if res.Compliant() {
		t.Fatal("a node the ValidatingAdmissionPolicy refuses is reported compliant")
	}
	if v := strings.Join(res.Violations(), "; "); !strings.Contains(v, "arch amd64 is not one of arm64,riscv64 (ValidatingAdmissionPolicy allowed-arch rule validations[0])") {
		t.Errorf("violations %q do not say which rule failed", v)
	}
	skips := AuditSkips(context.Background(), e.Current())
	if s := skips["require-team.validations[1]"]; len(s) != 1 || s[0].Location != "policies/team.yaml:16" || s[0].Reads[0] != "request.dryRun" {
		t.Errorf("AuditSkips = %+v, want require-team's second rule at its line, reading request.dryRun", skips)
	}
}

// TestDialectCELLoadErrorsReachTheSet: a CEL policy that cannot be judged
// keeps the directory from loading, naming its file and line.
func TestDialectCELLoadErrorsReachTheSet(t *testing.T) {
	fsys := fstest.MapFS{
		"roles.yaml":  {Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    policies: [lookup]\n")},
		"lookup.yaml": {Data: []byte("apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: lookup}\nspec:\n  matchConstraints:\n    resourceRules: [{apiGroups: [qn.dev], apiVersions: [\"*\"], resources: [quantumnodes], operations: [CREATE]}]\n  validations:\n  - expression: \"resource.Get('v1', 'configmaps', 'edge', 'zones').data.z == 'a'\"\n")},
	}
	_, err := Load(context.Background(), fsys, LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "lookup.yaml:8: spec.validations[0].expression: uses Kyverno's resource library") || !strings.Contains(err.Error(), "needs a cluster") {
		t.Fatalf("load: %v", err)
	}
}

// BenchmarkEngineValidateCELPolicies is a role's validation with its Rego
// package alone, and with a ValidatingAdmissionPolicy (binding and
// parameters) and a Kyverno ValidatingPolicy beside it.
func BenchmarkEngineValidateCELPolicies(b *testing.B) {
	arm := `{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"edge-1","namespace":"edge","labels":{"team":"ops"}},"spec":{"hardware":{"arch":"arm64"},"services":[{"name":"a","port":8080}]}}`
	for _, c := range []struct{ name, policies string }{
		{"rego_only", ""},
		{"rego_and_two_CEL_policies", "    policies: [allowed-arch, require-team]\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			fsys := fstest.MapFS{
				"roles.yaml": {Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE, UPDATE]\n    packages: [p]\n" + c.policies)},
				"p.rego":     {Data: []byte(portRego)},
			}
			for k, v := range celPolicies {
				fsys[k] = v
			}
			set, err := Load(context.Background(), fsys, LoadOptions{})
			if err != nil {
				b.Fatal(err)
			}
			e := NewEngine(set, EngineOptions{})
			in := qnInput("CREATE", arm, "")
			b.ReportAllocs()
			for b.Loop() {
				if d := e.Validate(context.Background(), in); !d.Allowed {
					b.Fatal(d.Message)
				}
			}
		})
	}
}
