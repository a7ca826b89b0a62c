package crd_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/quantumnode/qn-admission/config/crd"
)

// toInternal defaults a v1 CRD and converts it to the internal version, the
// way the apiserver's decoder does before it validates a create.
func toInternal(t *testing.T, in *apiextensionsv1.CustomResourceDefinition) *apiextensions.CustomResourceDefinition {
	t.Helper()
	scheme := runtime.NewScheme()
	install.Install(scheme)
	in = in.DeepCopy()
	scheme.Default(in)
	out := &apiextensions.CustomResourceDefinition{}
	if err := scheme.Convert(in, out, nil); err != nil {
		t.Fatalf("convert the CRD to the internal version: %v", err)
	}
	// The CRD registry's PrepareForCreate records the storage version.
	for _, v := range out.Spec.Versions {
		if v.Storage {
			out.Status.StoredVersions = []string{v.Name}
		}
	}
	return out
}

// loadCRD decodes the embedded manifest or stops the test.
func loadCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	c, err := crd.QuantumNode()
	if err != nil {
		t.Fatalf("decode the embedded CRD: %v", err)
	}
	return c
}

// objectSchema validates custom resources the way the apiserver's
// customresource strategy does on create: OpenAPI schema, metadata, embedded
// resources, list-type map and set keys, and x-kubernetes-validations (CEL).
type objectSchema struct {
	validator  apiservervalidation.SchemaValidator
	structural *structuralschema.Structural
	cel        *cel.Validator
	namespaced bool
}

func newObjectSchema(t *testing.T, c *apiextensionsv1.CustomResourceDefinition, version string) *objectSchema {
	t.Helper()
	var props *apiextensionsv1.JSONSchemaProps
	for _, v := range c.Spec.Versions {
		if v.Name == version && v.Schema != nil {
			props = v.Schema.OpenAPIV3Schema
		}
	}
	if props == nil {
		t.Fatalf("the CRD has no schema for version %q", version)
	}
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(props, internal, nil); err != nil {
		t.Fatalf("convert the %s schema to the internal version: %v", version, err)
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(internal)
	if err != nil {
		t.Fatalf("build the %s schema validator: %v", version, err)
	}
	structural, err := structuralschema.NewStructural(internal)
	if err != nil {
		t.Fatalf("the %s schema is not structural: %v", version, err)
	}
	return &objectSchema{
		validator:  validator,
		structural: structural,
		cel:        cel.NewValidator(structural, true, celconfig.PerCallLimit), // nil without rules
		namespaced: c.Spec.Scope != apiextensionsv1.ClusterScoped,
	}
}

// validate returns every error the apiserver would report creating obj.
func (s *objectSchema) validate(obj map[string]any) field.ErrorList {
	u := &unstructured.Unstructured{Object: obj}
	errs := apivalidation.ValidateObjectMetaAccessor(u, s.namespaced, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, s.validator)...)
	errs = append(errs, schemaobjectmeta.Validate(nil, obj, s.structural, false)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, s.structural, obj)...)
	if s.cel != nil {
		celErrs, _ := s.cel.Validate(context.Background(), nil, s.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	return errs
}

// validateUpdate returns the errors of the x-kubernetes-validations rules
// for obj, as an UPDATE from old (transition rules see oldSelf), or as a
// CREATE when old is nil, and the runtime cost the API server charged the
// object (of its budget of celconfig.RuntimeCELCostBudget).
func (s *objectSchema) validateUpdate(obj, old map[string]any) (field.ErrorList, int64) {
	var oldObj any
	if old != nil {
		oldObj = old
	}
	errs, remaining := s.cel.Validate(context.Background(), nil, s.structural, obj, oldObj, celconfig.RuntimeCELCostBudget)
	return errs, celconfig.RuntimeCELCostBudget - remaining
}

// unknownFields lists the paths the apiserver would prune from obj (and
// reject under fieldValidation=Strict). obj itself is left as it is.
func (s *objectSchema) unknownFields(obj map[string]any) []string {
	return pruning.PruneWithOptions(runtime.DeepCopyJSON(obj), s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
}

// The sample policy is valid, and a duration that is no Go duration is
// refused by the schema: the controller's typed informer could not decode
// the object otherwise.
func TestTheHealthPolicySchema(t *testing.T) {
	c, err := crd.HealthPolicy()
	if err != nil {
		t.Fatal(err)
	}
	if c.Spec.Scope != apiextensionsv1.ClusterScoped {
		t.Errorf("scope %s, want Cluster: remediation is a cluster operator's decision", c.Spec.Scope)
	}
	schema := newObjectSchema(t, c, "v1alpha1")
	data, err := os.ReadFile(filepath.Join("..", "samples", "healthpolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sample := map[string]any{}
	if err := yaml.Unmarshal(data, &sample); err != nil {
		t.Fatal(err)
	}
	if errs := schema.validate(sample); len(errs) > 0 {
		t.Errorf("config/samples/healthpolicy.yaml: %v", errs.ToAggregate())
	}
	if unknown := schema.unknownFields(sample); len(unknown) > 0 {
		t.Errorf("config/samples/healthpolicy.yaml has fields the schema prunes: %v", unknown)
	}
	bad := runtime.DeepCopyJSON(sample)
	if err := unstructured.SetNestedField(bad, "5 minutes", "spec", "node", "failedAfter"); err != nil {
		t.Fatal(err)
	}
	if errs := schema.validate(bad); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "spec.node.failedAfter") {
		t.Errorf("failedAfter \"5 minutes\" is accepted: %v", errs)
	}
}
