package chart

import (
	"context"
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
	"os"
	"path/filepath"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/vap"
	"github.com/quantumnode/qn-admission/rego"
)

// compiledBundled is what `qnctl vap` compiles from the bundled policies,
// with options.
func compiledBundled(t *testing.T, opts vap.Options) *vap.Result {
	t.Helper()
	set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	opts.Source = policies.BundledName
	r, err := vap.Compile(set, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// files/admission-policy.yaml is byte for byte what qnctl vap writes for the
// bundled policies (TestVAPWritesTheCompiledObjects in cmd/qnctl/app holds
// qnctl's stream equal to the compiler's).
func TestTheChartsAdmissionPolicyIsQnctlVapsOutput(t *testing.T) {
	got, err := os.ReadFile(filepath.Join(chartrender.Dir(), "files", "admission-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := compiledBundled(t, vap.Options{}).YAML()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("charts/qn-admission/files/admission-policy.yaml differs from qnctl vap's output: %s", regenerate)
	}
}

// The chart renders the compiled objects as they are, with the release's
// names and labels and the values' mode, failurePolicy and excluded
// namespaces; the parameters only where nothing else writes them.
func TestTheAdmissionPolicyRendersQnctlVapsObjects(t *testing.T) {
	tests := map[string]struct {
		values string
		// rendered: the policy and its binding; params: the parameters
		// too; roleTable: qn-controller keeps them.
		rendered, params, roleTable bool
		opts                        vap.Options
	}{
		"the default enforces, with the chart's parameters": {
			rendered: true, params: true,
			opts: vap.Options{Actions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
		},
		"audit mode warns and annotates": {
			values: `admissionPolicy: {mode: audit}`, rendered: true, params: true,
			opts: vap.Options{Actions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit, admissionregistrationv1.Warn}},
		},
		"failurePolicy Fail and more excluded namespaces": {
			values:   `{admissionPolicy: {failurePolicy: Fail}, webhook: {namespaceSelector: {excludeNamespaces: [kube-system, sandbox]}}}`,
			rendered: true, params: true,
			opts: vap.Options{FailurePolicy: admissionregistrationv1.Fail, ExcludeNamespaces: []string{releaseNS, "kube-system", "sandbox"}},
		},
		"a configMap source: qn-controller keeps the parameters": {
			values:   `policies: {source: configMap}`,
			rendered: true, roleTable: true,
		},
		"a configMap source without the audit still keeps them": {
			values:   `{policies: {source: configMap}, controller: {audit: {enabled: false}}}`,
			rendered: true, roleTable: true,
		},
		"off renders nothing":                      {values: `admissionPolicy: {mode: "off"}`},
		"a gitSync source renders nothing":         {values: `policies: {source: gitSync, gitSync: {repo: "https://example.com/p.git"}}`},
		"a configMap source without qn-controller": {values: `{policies: {source: configMap}, controller: {enabled: false}}`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			rel := render(t, tt.values)
			policy := rel.Find("ValidatingAdmissionPolicy", fullname)
			binding := rel.Find("ValidatingAdmissionPolicyBinding", fullname)
			params := rel.Find(qnv1alpha1.RoleTableKind, fullname)
			if (policy != nil) != tt.rendered || (binding != nil) != tt.rendered || (params != nil) != tt.params {
				t.Fatalf("rendered policy %v, binding %v, parameters %v; want %v, %v, %v (kinds %v)", policy != nil, binding != nil, params != nil, tt.rendered, tt.rendered, tt.params, rel.Kinds())
			}
			if c := rel.Find("Deployment", fullname+"-controller"); c != nil {
				d := decodeStrict[appsv1.Deployment](t, c)
				args := container(t, &d.Spec.Template.Spec, "qn-controller").Args
				got, set := flag(args, "role-table")
				if set != tt.roleTable || set && got != fullname {
					t.Errorf("qn-controller --role-table=%q (set %v), want it set to %s: %v", got, set, fullname, tt.roleTable)
				}
				if dir, _ := flag(args, "policy-dir"); tt.roleTable && dir == "" {
					t.Errorf("qn-controller keeps the parameters without reading the policy directory: %v", args)
				}
			}
			if !tt.rendered {
				return
			}
			opts := tt.opts
			opts.Name = fullname
			if opts.ExcludeNamespaces == nil {
				opts.ExcludeNamespaces = []string{releaseNS, "kube-system"}
			}
			want, err := compiledBundled(t, opts).Objects()
			if err != nil {
				t.Fatal(err)
			}
			for i, got := range []*unstructured.Unstructured{policy, binding, params} {
				if got == nil {
					continue
				}
				if got.GetLabels()["app.kubernetes.io/instance"] != releaseName {
					t.Errorf("%s carries no release labels: %v", got.GetKind(), got.GetLabels())
				}
				got = got.DeepCopy()
				got.SetLabels(nil)
				if !equality.Semantic.DeepEqual(normalized(t, got), normalized(t, want[i])) {
					t.Errorf("the chart's %s differs from qnctl vap's:\n got %v\nwant %v", got.GetKind(), got.Object, want[i].Object)
				}
			}
		})
	}
}

// normalized is obj as JSON decodes it, so numbers compare equal whatever
// decoded them (Helm's fromYaml gives float64).
func normalized(t *testing.T, obj *unstructured.Unstructured) map[string]any {
	t.Helper()
	data, err := obj.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	out := &unstructured.Unstructured{}
	if err := out.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	return out.Object
}
