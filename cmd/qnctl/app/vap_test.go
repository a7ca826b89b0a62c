package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/policies/vap"
	"github.com/quantumnode/qn-admission/test/harness"
)

// vapDocuments splits qnctl vap's stream into its report and objects.
func vapDocuments(t *testing.T, out string) (string, *admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, *qnv1alpha1.QuantumNodeRoleTable) {
	t.Helper()
	docs := strings.Split(out, "\n---\n")
	if len(docs) != 4 {
		t.Fatalf("want a report and three objects, got %d parts:\n%s", len(docs), out)
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	params := &qnv1alpha1.QuantumNodeRoleTable{}
	for i, into := range []any{policy, binding, params} {
		if err := yaml.UnmarshalStrict([]byte(docs[i+1]), into); err != nil {
			t.Fatalf("document %d does not decode strictly: %v\n%s", i+1, err, docs[i+1])
		}
	}
	return docs[0], policy, binding, params
}

func TestVAPWritesTheCompiledObjects(t *testing.T) {
	code, out, errOut := run(t, "", "vap")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	report, policy, binding, params := vapDocuments(t, out)
	set, err := loadPolicies(context.Background(), "", &commonOptions{}, true)
	if err != nil {
		t.Fatal(err)
	}
	want, err := vap.Compile(set.Set, vap.Options{Source: "bundled"})
	if err != nil {
		t.Fatal(err)
	}
	wantYAML, err := want.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if out != string(wantYAML) {
		t.Errorf("qnctl vap is not the compiler's stream for the bundled set")
	}
	if policy.Name != vap.DefaultName || binding.Spec.PolicyName != vap.DefaultName || params.Name != vap.DefaultName || params.Spec.Source != "bundled" {
		t.Errorf("names %s %s %s, source %q", policy.Name, binding.Spec.PolicyName, params.Name, params.Spec.Source)
	}
	if got := binding.Spec.ValidationActions; len(got) != 1 || got[0] != admissionregistrationv1.Deny {
		t.Errorf("enforce mode binds with %v, want [Deny]", got)
	}
	for _, line := range strings.Split(report, "\n") {
		if !strings.HasPrefix(line, "#") {
			t.Fatalf("the report is not all comments (kubectl would read it): %q", line)
		}
	}
}

func TestVAPOptions(t *testing.T) {
	dir := t.TempDir()
	if err := harness.WriteBundledPolicies(dir); err != nil {
		t.Fatal(err)
	}
	roles := filepath.Join(dir, "roles.yaml")
	src, err := os.ReadFile(roles)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(roles, []byte(strings.Replace(string(src), "allowedZones: [cn-shanghai]", "allowedZones: [cn-shanghai, cn-beijing]", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The bundled Rego tests pin the zones: this directory keeps its own.
	if err := os.Remove(filepath.Join(dir, "roles_test.rego")); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "", "vap", "--policy-dir", dir, "--mode", "audit", "--name", "qn", "--exclude-namespace", "kube-system,qn-system", "--failure-policy", "Fail")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	_, policy, binding, params := vapDocuments(t, out)
	if got := binding.Spec.ValidationActions; len(got) != 2 || got[0] != admissionregistrationv1.Audit || got[1] != admissionregistrationv1.Warn {
		t.Errorf("audit mode binds with %v, want [Audit Warn]", got)
	}
	if binding.Name != "qn" || binding.Spec.ParamRef.Name != "qn" || *policy.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("binding %s paramRef %s failurePolicy %s", binding.Name, binding.Spec.ParamRef.Name, *policy.Spec.FailurePolicy)
	}
	if got := binding.Spec.MatchResources.NamespaceSelector.MatchExpressions[0].Values; strings.Join(got, ",") != "kube-system,qn-system" {
		t.Errorf("excluded namespaces %v", got)
	}
	if zones := params.Spec.Roles["realtime"].Conditions.Labels[0].Values; strings.Join(zones, ",") != "cn-shanghai,cn-beijing" || params.Spec.Source != dir {
		t.Errorf("the parameters are not the directory's: zones %v, source %s", zones, params.Spec.Source)
	}

	code, out, _ = run(t, "", "vap", "--policy-dir", dir, "-o", "text")
	if code != exitOK || !strings.HasPrefix(out, "qn-admission's role table from "+dir) || strings.Contains(out, "apiVersion") {
		t.Errorf("-o text prints the report only, got exit %d:\n%s", code, out)
	}
}

func TestVAPRefusesWhatCannotCompile(t *testing.T) {
	broken := t.TempDir()
	if err := harness.WriteBundledPolicies(broken); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "roles.yaml"), []byte("defaultRole: default\nroles:\n  default:\n    operations: [CREATE, DESTROY]\n    packages: [qn.quantumnode]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args []string
		want string
	}{
		"an unknown mode":                {[]string{"vap", "--mode", "strict"}, `--mode "strict" is not one of enforce, audit`},
		"off, which only the chart has":  {[]string{"vap", "--mode", "off"}, `--mode off writes nothing: to run without the API server's copy, apply nothing`},
		"an unknown failure policy":      {[]string{"vap", "--failure-policy", "Maybe"}, `--failure-policy "Maybe" is not one of Fail, Ignore`},
		"an unknown output":              {[]string{"vap", "-o", "json"}, `--output "json" is not one of yaml, text`},
		"a directory that does not load": {[]string{"vap", "--policy-dir", broken}, `roles.yaml:4: roles.default.operations: "DESTROY" is not an operation`},
		"an argument":                    {[]string{"vap", "roles.yaml"}, `unknown command "roles.yaml"`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := run(t, "", tt.args...)
			if code != exitBadInput || out != "" || !strings.Contains(errOut, tt.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, tt.want)
			}
		})
	}
}
