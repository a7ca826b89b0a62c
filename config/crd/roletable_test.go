package crd_test

import (
	"context"
	"strings"
	"testing"

	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/runtime"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/config/crd"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/vap"
	"github.com/quantumnode/qn-admission/rego"
)

// The QuantumNodeRoleTable CRD is the parameters' kind of the compiled
// ValidatingAdmissionPolicy: the API server accepts it, and the parameters
// `qnctl vap` compiles from the bundled policies are valid objects of it.
func TestTheRoleTableCRDHoldsWhatTheCompilerWrites(t *testing.T) {
	c, err := crd.RoleTable()
	if err != nil {
		t.Fatal(err)
	}
	if errs := apiextensionsvalidation.ValidateCustomResourceDefinition(context.Background(), toInternal(t, c)); len(errs) > 0 {
		t.Fatalf("the apiserver would reject the CRD:\n%s", errs.ToAggregate())
	}
	if c.Spec.Scope != "Cluster" || c.Spec.Names.Kind != qnv1alpha1.RoleTableKind || c.Spec.Names.Plural != qnv1alpha1.RoleTableResource {
		t.Errorf("the CRD serves %s %s/%s, want the cluster-scoped %s", c.Spec.Scope, c.Spec.Names.Kind, c.Spec.Names.Plural, qnv1alpha1.RoleTableKind)
	}
	set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	compiled, err := vap.Compile(set, vap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(compiled.Params)
	if err != nil {
		t.Fatal(err)
	}
	schema := newObjectSchema(t, c, qnv1alpha1.Version)
	if errs := schema.validate(obj); len(errs) > 0 {
		t.Fatalf("the compiled parameters are not a valid QuantumNodeRoleTable:\n%v", errs.ToAggregate())
	}
	if unknown := schema.unknownFields(obj); len(unknown) > 0 {
		t.Fatalf("the API server would prune %v from the compiled parameters", unknown)
	}
	// A condition with both comparisons, or neither, is refused.
	spec := obj["spec"].(map[string]any)
	realtime := spec["roles"].(map[string]any)["realtime"].(map[string]any)
	zone := realtime["conditions"].(map[string]any)["labels"].([]any)[0].(map[string]any)
	zone["below"] = "5"
	errs := schema.validate(obj)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "set exactly one of values and below") {
		t.Fatalf("want the condition refused, got %v", errs.ToAggregate())
	}
}
