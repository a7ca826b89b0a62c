package crd_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// The QuantumNode rules the API server enforces itself (x-kubernetes-
// validations), so they hold while the admission webhook is not called:
// unique service names, unique ports, an immutable architecture. Their
// messages say what the webhook's do.

// services builds a services list of n entries from name(i) and port(i).
func services(n int, name func(int) string, port func(int) int64) []any {
	list := make([]any, n)
	for i := range list {
		list[i] = map[string]any{"name": name(i), "port": port(i)}
	}
	return list
}

func TestTheAPIServerRefusesDuplicatesAndAnArchChange(t *testing.T) {
	distinctName := func(i int) string { return fmt.Sprintf("svc-%d", i) }
	distinctPort := func(i int) int64 { return int64(1000 + i) }
	tests := map[string]struct {
		services []any
		oldArch  string // an UPDATE from a node of this arch; "" a CREATE
		arch     string
		want     string // the whole error, "" when admitted
	}{
		"distinct names and ports are admitted": {
			services: services(3, distinctName, distinctPort),
		},
		"two services on one port are refused, both named": {
			services: services(3, distinctName, func(i int) int64 { return []int64{8080, 9090, 8080}[i] }),
			want:     `spec.services: Invalid value: services "svc-0" and "svc-2" declare the same port; each service needs its own port`,
		},
		"three services on one port: the first and the last are named": {
			services: services(4, distinctName, func(i int) int64 { return []int64{1, 8080, 8080, 8080}[i] }),
			want:     `spec.services: Invalid value: services "svc-1" and "svc-3" declare the same port; each service needs its own port`,
		},
		"two services with one name are refused": {
			services: services(2, func(int) string { return "web" }, distinctPort),
			want:     `spec.services: Invalid value: service name "web" is declared more than once; service names must be unique`,
		},
		"the same arch on UPDATE is admitted": {
			services: services(1, distinctName, distinctPort), oldArch: "arm64", arch: "arm64",
		},
		"another arch on UPDATE is refused": {
			services: services(1, distinctName, distinctPort), oldArch: "arm64", arch: "amd64",
			want: `spec.hardware.arch: Invalid value: "amd64": spec.hardware.arch is immutable: this QuantumNode was created as "arm64" and cannot become "amd64"; delete and recreate it for new hardware`,
		},
		"256 services on one port, the worst case, are refused within the runtime budget": {
			services: services(256, distinctName, func(int) int64 { return 8080 }),
			want:     `spec.services: Invalid value: services "svc-0" and "svc-255" declare the same port; each service needs its own port`,
		},
		"256 services with one name of 63 characters are refused within the runtime budget": {
			services: services(256, func(int) string { return strings.Repeat("a", 63) }, distinctPort),
			want:     `spec.services: Invalid value: service name "` + strings.Repeat("a", 63) + `" is declared more than once; service names must be unique`,
		},
		"256 distinct names of 63 characters are admitted within the runtime budget": {
			services: services(256, func(i int) string { return fmt.Sprintf("%063d", i) }, distinctPort),
		},
	}
	schema := newObjectSchema(t, loadCRD(t), qnv1alpha1.Version)
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			obj := sample(t)
			spec := obj["spec"].(map[string]any)
			spec["services"] = tt.services
			var old map[string]any
			if tt.oldArch != "" {
				old = sample(t)
				old["spec"].(map[string]any)["hardware"] = map[string]any{"arch": tt.oldArch}
				spec["hardware"] = map[string]any{"arch": tt.arch}
			}
			errs, cost := schema.validateUpdate(obj, old)
			// Each expression runs under a per-call limit of
			// celconfig.PerCallLimit (over it the write fails with a cost
			// error, not the rule's message); the object under
			// RuntimeCELCostBudget for all its rules.
			t.Logf("runtime cost %d (budget %d per object, %d per expression)", cost, celconfig.RuntimeCELCostBudget, celconfig.PerCallLimit)
			if cost > celconfig.RuntimeCELCostBudget/4 {
				t.Errorf("the rules cost %d at run time: keep them under a quarter of the API server's budget of %d per object (lower maxItems)", cost, celconfig.RuntimeCELCostBudget)
			}
			if tt.want == "" {
				if len(errs) > 0 {
					t.Fatalf("want the object admitted, got:\n%v", errs.ToAggregate())
				}
				return
			}
			if len(errs) != 1 || errs[0].Error() != tt.want {
				t.Fatalf("want exactly\n  %s\ngot:\n  %v", tt.want, errs.ToAggregate())
			}
		})
	}
}

// The API server refuses a CRD whose rules it estimates over its budget
// (per expression and for the whole CRD), estimating lists at their
// maxItems. These are the estimates for the QuantumNode CRD as it ships;
// docs/policies.md quotes them.
func TestTheRulesStayWithinTheAPIServersCostBudget(t *testing.T) {
	c := loadCRD(t)
	internal := toInternal(t, c)
	if errs := apiextensionsvalidation.ValidateCustomResourceDefinition(context.Background(), internal); len(errs) > 0 {
		t.Fatalf("the apiserver would reject the CRD:\n%s", errs.ToAggregate())
	}
	costs := ruleCosts(t, c, environment.DefaultCompatibilityVersion())
	if len(costs) != 3 {
		t.Fatalf("want the three QuantumNode rules (names, ports, arch), found %d: %v", len(costs), costs)
	}
	var total uint64
	for _, rc := range costs {
		t.Logf("%-60s rule %9d  messageExpression %9d  (limit %d each)", rc.path, rc.rule, rc.message, apiextensionsvalidation.StaticEstimatedCostLimit)
		if rc.rule > apiextensionsvalidation.StaticEstimatedCostLimit/2 || rc.message > apiextensionsvalidation.StaticEstimatedCostLimit/2 {
			t.Errorf("%s: estimated cost rule %d, message %d: keep it under half the API server's limit of %d, so the rule survives a costlier CEL release (lower maxItems)",
				rc.path, rc.rule, rc.message, apiextensionsvalidation.StaticEstimatedCostLimit)
		}
		total += rc.rule + rc.message
	}
	t.Logf("total %d (limit %d for the CRD)", total, apiextensionsvalidation.StaticEstimatedCRDCostLimit)

	// The estimate grows with maxItems squared: at 4,096 services the API
	// server would refuse the CRD, which is why the cap stays small.
	big := c.DeepCopy()
	big.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["services"] = withMaxItems(big.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["services"], 4096)
	errs := apiextensionsvalidation.ValidateCustomResourceDefinition(context.Background(), toInternal(t, big))
	if !strings.Contains(errs.ToAggregate().Error(), "estimated rule cost exceeds budget") {
		t.Errorf("with maxItems 4096 the API server should refuse the uniqueness rules for their cost, got: %v", errs.ToAggregate())
	}
}

// The chart supports Kubernetes 1.30, whose API server compiles new rules
// in the CEL environment of 1.29: no two-variable comprehensions, no
// list library v3. The rules use nothing newer.
func TestTheRulesCompileForKubernetes130(t *testing.T) {
	for _, rc := range ruleCosts(t, loadCRD(t), version.MajorMinor(1, 29)) {
		if rc.err != "" {
			t.Errorf("%s does not compile in the CEL environment of Kubernetes 1.29: %s", rc.path, rc.err)
		}
	}
}

func withMaxItems(p apiextensionsv1.JSONSchemaProps, n int64) apiextensionsv1.JSONSchemaProps {
	p.MaxItems = &n
	return p
}

// ruleCost is the API server's estimate for one x-kubernetes-validations
// rule and its messageExpression.
type ruleCost struct {
	path          string
	rule, message uint64
	err           string
}

// ruleCosts compiles every rule of the CRD's schema as the API server does
// for a new CRD (the new-expressions environment of compatibility version
// v) and returns the estimates. None of the QuantumNode rules sits under a
// list, so the rule's cost is its estimate (no cardinality factor).
func ruleCosts(t *testing.T, c *apiextensionsv1.CustomResourceDefinition, v *version.Version) []ruleCost {
	t.Helper()
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(c.Spec.Versions[0].Schema.OpenAPIV3Schema, internal, nil); err != nil {
		t.Fatal(err)
	}
	root, err := structuralschema.NewStructural(internal)
	if err != nil {
		t.Fatal(err)
	}
	envSet := environment.MustBaseEnvSet(v)
	var out []ruleCost
	var walk func(s *structuralschema.Structural, path *field.Path, isRoot bool)
	walk = func(s *structuralschema.Structural, path *field.Path, isRoot bool) {
		if len(s.XValidations) > 0 {
			results, err := cel.Compile(s, model.SchemaDeclType(s, isRoot), celconfig.PerCallLimit, envSet, cel.NewExpressionsEnvLoader())
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			for i, r := range results {
				rc := ruleCost{path: fmt.Sprintf("%s x-kubernetes-validations[%d]", path, i), rule: r.MaxCost, message: r.MessageExpressionMaxCost}
				if r.Error != nil {
					rc.err = r.Error.Detail
				}
				if r.MessageExpressionError != nil {
					rc.err += " messageExpression: " + r.MessageExpressionError.Detail
				}
				out = append(out, rc)
			}
		}
		for name, p := range s.Properties {
			p := p
			walk(&p, path.Child(name), false)
		}
		if s.Items != nil {
			walk(s.Items, path.Child("items"), false)
		}
	}
	walk(root, field.NewPath("openAPIV3Schema"), true)
	return out
}
