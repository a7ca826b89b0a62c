package crd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/config/crd"
)

// sampleYAML uses every field of the schema once.
const sampleYAML = `
apiVersion: qn.dev/v1alpha1
kind: QuantumNode
metadata:
  name: edge-1
  namespace: lab
spec:
  hardware:
    arch: arm64
  nodeName: worker-3
  revisionHistoryLimit: 5
  progressDeadlineSeconds: 300
  services:
  - name: grpc
    port: 9090
  - name: metrics
    port: 8080
status:
  phase: Ready
  health: Healthy
  observedGeneration: 2
  conditions:
  - type: Ready
    status: "True"
    reason: AllServicesUp
    message: every service answers
    lastTransitionTime: "2026-01-02T03:04:05Z"
    observedGeneration: 2
`

// sample returns a fresh copy of sampleYAML decoded as the apiserver decodes
// a request body (integers stay int64).
func sample(t *testing.T) map[string]any {
	t.Helper()
	obj := map[string]any{}
	if err := utiljson.Unmarshal(jsonOf(t, sampleYAML), &obj); err != nil {
		t.Fatalf("decode the sample: %v", err)
	}
	return obj
}

func jsonOf(t *testing.T, y string) []byte {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatalf("convert YAML to JSON: %v", err)
	}
	return j
}

func TestTheCRDNamesTheGoAPI(t *testing.T) {
	c := loadCRD(t)

	if want := qnv1alpha1.Resource + "." + qnv1alpha1.Group; c.Name != want {
		t.Errorf("metadata.name = %q, want %q", c.Name, want)
	}
	if c.Spec.Group != qnv1alpha1.Group {
		t.Errorf("spec.group = %q, want %q", c.Spec.Group, qnv1alpha1.Group)
	}
	wantNames := apiextensionsv1.CustomResourceDefinitionNames{
		Plural:     qnv1alpha1.Resource,
		Singular:   qnv1alpha1.Singular,
		ShortNames: []string{qnv1alpha1.ShortName},
		Kind:       qnv1alpha1.Kind,
		ListKind:   qnv1alpha1.ListKind,
	}
	if !equality.Semantic.DeepEqual(c.Spec.Names, wantNames) {
		t.Errorf("spec.names = %+v, want %+v", c.Spec.Names, wantNames)
	}
	if c.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Errorf("spec.scope = %q, want %q", c.Spec.Scope, apiextensionsv1.NamespaceScoped)
	}
	if len(c.Spec.Versions) != 1 {
		t.Fatalf("spec.versions has %d entries, want exactly %s", len(c.Spec.Versions), qnv1alpha1.Version)
	}
	v := c.Spec.Versions[0]
	if v.Name != qnv1alpha1.Version || !v.Served || !v.Storage {
		t.Errorf("version %q served=%v storage=%v, want %q served and stored", v.Name, v.Served, v.Storage, qnv1alpha1.Version)
	}
	if v.Subresources == nil || v.Subresources.Status == nil {
		t.Errorf("version %q has no status subresource; the controller writes status through it", v.Name)
	}
	if v.Subresources != nil && v.Subresources.Scale != nil {
		t.Errorf("version %q has a scale subresource; a QuantumNode does not scale", v.Name)
	}
}

func TestTheCRDIsOneTheAPIServerAccepts(t *testing.T) {
	c := loadCRD(t)
	internal := toInternal(t, c)

	if errs := apiextensionsvalidation.ValidateCustomResourceDefinition(context.Background(), internal); len(errs) > 0 {
		t.Errorf("the apiserver would reject the CRD:\n%s", errs.ToAggregate())
	}
	for _, v := range internal.Spec.Versions {
		// Conversion hoists a schema shared by all versions to spec.validation.
		validation := internal.Spec.Validation
		if v.Schema != nil {
			validation = v.Schema
		}
		if validation == nil || validation.OpenAPIV3Schema == nil {
			t.Fatalf("version %s has no schema", v.Name)
		}
		s, err := structuralschema.NewStructural(validation.OpenAPIV3Schema)
		if err != nil {
			t.Fatalf("version %s: the schema is not structural: %v", v.Name, err)
		}
		if errs := structuralschema.ValidateStructural(field.NewPath("openAPIV3Schema"), s); len(errs) > 0 {
			t.Errorf("version %s: the schema is not structural:\n%s", v.Name, errs.ToAggregate())
		}
	}
}

// The checks above have teeth: each of these broken copies fails them.
func TestABrokenCRDFailsValidation(t *testing.T) {
	tests := map[string]struct {
		breakIt   func(*apiextensionsv1.JSONSchemaProps, *apiextensionsv1.CustomResourceDefinitionVersion)
		wantField string // a suffix: the internal version hoists what all versions share out of spec.versions
	}{
		"a property without a type is not structural": {
			breakIt: func(s *apiextensionsv1.JSONSchemaProps, _ *apiextensionsv1.CustomResourceDefinitionVersion) {
				hw := s.Properties["spec"].Properties["hardware"]
				hw.Type = ""
				s.Properties["spec"].Properties["hardware"] = hw
			},
			wantField: "openAPIV3Schema.properties[spec].properties[hardware].type",
		},
		"a list-map key that the items do not require is refused": {
			breakIt: func(s *apiextensionsv1.JSONSchemaProps, _ *apiextensionsv1.CustomResourceDefinitionVersion) {
				conditions := s.Properties["status"].Properties["conditions"]
				conditions.Items.Schema.Required = []string{"status"}
				s.Properties["status"].Properties["conditions"] = conditions
			},
			wantField: "openAPIV3Schema.properties[status].properties[conditions].items.properties[type].default",
		},
		"a printer column of an unknown type is refused": {
			breakIt: func(_ *apiextensionsv1.JSONSchemaProps, v *apiextensionsv1.CustomResourceDefinitionVersion) {
				v.AdditionalPrinterColumns[0].Type = "text"
			},
			wantField: "additionalPrinterColumns[0].type",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c := loadCRD(t)
			v := &c.Spec.Versions[0]
			tt.breakIt(v.Schema.OpenAPIV3Schema, v)
			errs := apiextensionsvalidation.ValidateCustomResourceDefinition(context.Background(), toInternal(t, c))
			if !slices.ContainsFunc(errs, func(e *field.Error) bool { return strings.HasSuffix(e.Field, tt.wantField) }) {
				t.Errorf("want an error on …%s, got:\n%v", tt.wantField, errs.ToAggregate())
			}
		})
	}
}

func TestDecodeIsStrict(t *testing.T) {
	tests := map[string]struct {
		manifest string
		wantErr  string
	}{
		"the embedded manifest decodes": {
			manifest: string(crd.QuantumNodeYAML),
		},
		"a misspelt field is an error, not a silently dropped line": {
			manifest: strings.Replace(string(crd.QuantumNodeYAML), "  scope: Namespaced", "  scpe: Namespaced", 1),
			wantErr:  `unknown field "scpe"`,
		},
		"a field written twice is an error": {
			manifest: strings.Replace(string(crd.QuantumNodeYAML), "  scope: Namespaced", "  scope: Namespaced\n  scope: Cluster", 1),
			wantErr:  `"scope" already set`,
		},
		"a manifest of another kind is an error": {
			manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
			wantErr:  `apiVersion "v1" kind "ConfigMap"`,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := crd.Decode([]byte(tt.manifest))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestTheSchemaJudgesObjectsAsTheAPIServerWould(t *testing.T) {
	set := func(value any, path ...string) func(map[string]any) error {
		return func(o map[string]any) error { return unstructured.SetNestedField(o, value, path...) }
	}
	unset := func(path ...string) func(map[string]any) error {
		return func(o map[string]any) error { unstructured.RemoveNestedField(o, path...); return nil }
	}
	services := func(items ...map[string]any) func(map[string]any) error {
		list := make([]any, len(items))
		for i := range items {
			list[i] = items[i]
		}
		return set(list, "spec", "services")
	}
	svc := func(name string, port any) map[string]any { return map[string]any{"name": name, "port": port} }
	manyServices := func(n int) func(map[string]any) error {
		list := make([]map[string]any, n)
		for i := range list {
			list[i] = svc(fmt.Sprintf("svc-%d", i), int64(1000+i))
		}
		return services(list...)
	}
	condition := func(typ string) map[string]any {
		return map[string]any{"type": typ, "status": "True", "reason": "Fine", "message": "", "lastTransitionTime": "2026-01-02T03:04:05Z"}
	}

	tests := map[string]struct {
		change    func(map[string]any) error
		wantField string // empty: the object is accepted
		wantType  field.ErrorType
	}{
		"the sample with two services and a status is accepted": {},
		"a node without status is accepted":                     {change: unset("status")},
		"a node without nodeName is accepted":                   {change: unset("spec", "nodeName")},
		"arch amd64 is accepted":                                {change: set("amd64", "spec", "hardware", "arch")},
		"ports 1 and 65535, the ends of the range, are accepted": {
			change: services(svc("low", int64(1)), svc("high", int64(65535))),
		},
		"a service name of 63 characters is accepted": {
			change: services(svc(strings.Repeat("a", 63), int64(80))),
		},
		"arch riscv is not a supported architecture": {
			change: set("riscv", "spec", "hardware", "arch"), wantField: "spec.hardware.arch", wantType: field.ErrorTypeNotSupported,
		},
		"arch is required": {
			change: unset("spec", "hardware", "arch"), wantField: "spec.hardware.arch", wantType: field.ErrorTypeRequired,
		},
		"hardware is required": {
			change: unset("spec", "hardware"), wantField: "spec.hardware", wantType: field.ErrorTypeRequired,
		},
		"spec is required": {
			change: unset("spec"), wantField: "spec", wantType: field.ErrorTypeRequired,
		},
		"services is required": {
			change: unset("spec", "services"), wantField: "spec.services", wantType: field.ErrorTypeRequired,
		},
		"an empty services list is rejected": {
			change: services(), wantField: "spec.services", wantType: field.ErrorTypeInvalid,
		},
		"a service name with capitals is rejected": {
			change: services(svc("GRPC", int64(9090))), wantField: "spec.services[0].name", wantType: field.ErrorTypeInvalid,
		},
		"a service name ending in a dash is rejected": {
			change: services(svc("grpc-", int64(9090))), wantField: "spec.services[0].name", wantType: field.ErrorTypeInvalid,
		},
		"a service name of 64 characters is rejected": {
			change: services(svc(strings.Repeat("a", 64), int64(80))), wantField: "spec.services[0].name", wantType: field.ErrorTypeTooLong,
		},
		"a service without a name is rejected": {
			change: set([]any{map[string]any{"port": int64(80)}}, "spec", "services"), wantField: "spec.services[0].name", wantType: field.ErrorTypeRequired,
		},
		"a service without a port is rejected": {
			change: set([]any{map[string]any{"name": "web"}}, "spec", "services"), wantField: "spec.services[0].port", wantType: field.ErrorTypeRequired,
		},
		"port 0 is below the range": {
			change: services(svc("web", int64(0))), wantField: "spec.services[0].port", wantType: field.ErrorTypeInvalid,
		},
		"port 70000 is above the range": {
			change: services(svc("web", int64(70000))), wantField: "spec.services[0].port", wantType: field.ErrorTypeInvalid,
		},
		"a port written as a string is rejected": {
			change: services(svc("web", "80")), wantField: "spec.services[0].port", wantType: field.ErrorTypeTypeInvalid,
		},
		"256 services, the most an edge node may declare, are accepted": {change: manyServices(256)},
		"257 services are too many": {
			change: manyServices(257), wantField: "spec.services", wantType: field.ErrorTypeTooMany,
		},
		"a nodeName of 254 characters is too long": {
			change: set(strings.Repeat("n", 254), "spec", "nodeName"), wantField: "spec.nodeName", wantType: field.ErrorTypeTooLong,
		},
		"two services with one name are refused by the CRD's own rule": {
			change: services(svc("web", int64(80)), svc("web", int64(81))), wantField: "spec.services", wantType: field.ErrorTypeInvalid,
		},
		"two services on one port are refused by the CRD's own rule": {
			change: services(svc("web", int64(80)), svc("api", int64(80))), wantField: "spec.services", wantType: field.ErrorTypeInvalid,
		},
		"a phase outside the four phases is rejected": {
			change: set("Running", "status", "phase"), wantField: "status.phase", wantType: field.ErrorTypeNotSupported,
		},
		"two conditions of one type are rejected": {
			change:    set([]any{condition("Ready"), condition("Ready")}, "status", "conditions"),
			wantField: "status.conditions[1]", wantType: field.ErrorTypeDuplicate,
		},
	}
	schema := newObjectSchema(t, loadCRD(t), qnv1alpha1.Version)
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			obj := sample(t)
			if tt.change != nil {
				if err := tt.change(obj); err != nil {
					t.Fatalf("change the sample: %v", err)
				}
			}
			errs := schema.validate(obj)
			if tt.wantField == "" {
				if len(errs) > 0 {
					t.Fatalf("want the object accepted, got:\n%v", errs.ToAggregate())
				}
				return
			}
			if !hasError(errs, tt.wantField, tt.wantType) {
				t.Fatalf("want %q on %s, got:\n%v", tt.wantType, tt.wantField, errs.ToAggregate())
			}
			if msg := errs.ToAggregate().Error(); !strings.Contains(msg, tt.wantField) {
				t.Errorf("the message does not name %s: %s", tt.wantField, msg)
			}
		})
	}
}

func TestAMisspeltFieldIsPruned(t *testing.T) {
	schema := newObjectSchema(t, loadCRD(t), qnv1alpha1.Version)
	obj := sample(t)
	if unknown := schema.unknownFields(obj); len(unknown) > 0 {
		t.Fatalf("the sample has fields the schema does not know: %v", unknown)
	}
	if err := unstructured.SetNestedField(obj, "x86", "spec", "hardware", "archh"); err != nil {
		t.Fatal(err)
	}
	if got, want := schema.unknownFields(obj), []string{"spec.hardware.archh"}; !slices.Equal(got, want) {
		t.Errorf("unknown fields = %v, want %v", got, want)
	}
}

func TestTheGoTypesAndTheSchemaAgree(t *testing.T) {
	schema := newObjectSchema(t, loadCRD(t), qnv1alpha1.Version)

	t.Run("a typed QuantumNode marshals to an object the schema accepts whole", func(t *testing.T) {
		qn := &qnv1alpha1.QuantumNode{
			TypeMeta:   metav1.TypeMeta{APIVersion: qnv1alpha1.GroupVersion.String(), Kind: qnv1alpha1.Kind},
			ObjectMeta: metav1.ObjectMeta{Name: "edge-2", Namespace: "lab", Generation: 3},
			Spec: qnv1alpha1.QuantumNodeSpec{
				Hardware: qnv1alpha1.Hardware{Arch: qnv1alpha1.ArchAMD64},
				Services: []qnv1alpha1.Service{{Name: "web", Port: 443}, {Name: "ssh", Port: 22}},
				NodeName: "worker-1",
			},
			Status: qnv1alpha1.QuantumNodeStatus{
				Phase:              qnv1alpha1.PhaseProgressing,
				ObservedGeneration: 3,
				Conditions: []metav1.Condition{
					{Type: qnv1alpha1.ConditionNodeMatched, Status: metav1.ConditionTrue, Reason: "NodeFound", LastTransitionTime: metav1.Now(), ObservedGeneration: 3},
					{Type: qnv1alpha1.ConditionServicesReady, Status: metav1.ConditionFalse, Reason: "Starting", Message: "ssh is not up yet", LastTransitionTime: metav1.Now()},
					{Type: qnv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "ServicesNotReady", LastTransitionTime: metav1.Now()},
				},
			},
		}
		raw, err := json.Marshal(qn)
		if err != nil {
			t.Fatal(err)
		}
		obj := map[string]any{}
		if err := utiljson.Unmarshal(raw, &obj); err != nil {
			t.Fatal(err)
		}
		if errs := schema.validate(obj); len(errs) > 0 {
			t.Errorf("the schema rejects the typed object:\n%v\n%s", errs.ToAggregate(), raw)
		}
		if unknown := schema.unknownFields(obj); len(unknown) > 0 {
			t.Errorf("the apiserver would drop fields the Go type writes: %v", unknown)
		}
	})

	t.Run("every field of the schema has a place in the Go type", func(t *testing.T) {
		raw := jsonOf(t, sampleYAML)
		var qn qnv1alpha1.QuantumNode
		strictErrs, err := sigsjson.UnmarshalStrict(raw, &qn)
		if err != nil {
			t.Fatal(err)
		}
		if len(strictErrs) > 0 {
			t.Fatalf("the Go type has no place for: %v", strictErrs)
		}
		back, err := json.Marshal(&qn)
		if err != nil {
			t.Fatal(err)
		}
		var got, want map[string]any
		if err := utiljson.Unmarshal(back, &got); err != nil {
			t.Fatal(err)
		}
		want = sample(t)
		if !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("the sample does not survive a trip through the Go type:\n got %s\nwant %s", back, raw)
		}
	})

	t.Run("a zero spec is rejected, not admitted with empty values", func(t *testing.T) {
		qn := &qnv1alpha1.QuantumNode{
			TypeMeta:   metav1.TypeMeta{APIVersion: qnv1alpha1.GroupVersion.String(), Kind: qnv1alpha1.Kind},
			ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: "lab"},
		}
		raw, err := json.Marshal(qn)
		if err != nil {
			t.Fatal(err)
		}
		obj := map[string]any{}
		if err := utiljson.Unmarshal(raw, &obj); err != nil {
			t.Fatal(err)
		}
		errs := schema.validate(obj)
		for _, f := range []string{"spec.hardware.arch", "spec.services"} {
			if !hasField(errs, f) {
				t.Errorf("want an error on %s, got:\n%v", f, errs.ToAggregate())
			}
		}
	})
}

func TestPrinterColumnsShowWhatKubectlShows(t *testing.T) {
	c := loadCRD(t)
	convertor, err := tableconvertor.New(c.Spec.Versions[0].AdditionalPrinterColumns)
	if err != nil {
		t.Fatalf("the printer columns do not compile: %v", err)
	}
	obj := &unstructured.Unstructured{Object: sample(t)}
	table, err := convertor.ConvertToTable(context.Background(), obj, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, col := range table.ColumnDefinitions {
		names = append(names, col.Name)
	}
	if want := []string{"Name", "Arch", "Services", "Phase", "Health", "Age"}; !slices.Equal(names, want) {
		t.Errorf("columns = %v, want %v", names, want)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(table.Rows))
	}
	cells := map[string]any{}
	for i, cell := range table.Rows[0].Cells {
		cells[names[i]] = cell
	}
	if got := cells["Arch"]; got != "arm64" {
		t.Errorf("Arch = %v, want arm64", got)
	}
	if got := cells["Phase"]; got != "Ready" {
		t.Errorf("Phase = %v, want Ready", got)
	}
	if got := cells["Health"]; got != "Healthy" {
		t.Errorf("Health = %v, want Healthy", got)
	}
	// A JSONPath with [*] would show only the first service here.
	services, _ := cells["Services"].(string)
	for _, want := range []string{`"grpc"`, `9090`, `"metrics"`, `8080`} {
		if !strings.Contains(services, want) {
			t.Errorf("Services = %q, want every service, missing %s", services, want)
		}
	}
}

func hasError(errs field.ErrorList, path string, typ field.ErrorType) bool {
	return slices.ContainsFunc(errs, func(e *field.Error) bool { return e.Field == path && e.Type == typ })
}

func hasField(errs field.ErrorList, path string) bool {
	return slices.ContainsFunc(errs, func(e *field.Error) bool { return e.Field == path })
}
