package policies

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/config/crd"
)

// quantumNodeInputSchema is the input schema qnctl lint checks against.
func quantumNodeInputSchema(t *testing.T) map[string]any {
	t.Helper()
	def, err := crd.QuantumNode()
	if err != nil {
		t.Fatal(err)
	}
	openAPI, err := crd.OpenAPIV3Schema(def, qnv1alpha1.GroupVersion.Version)
	if err != nil {
		t.Fatal(err)
	}
	return InputSchema(ObjectSchema(openAPI))
}

// TestInputSchemaHasEveryMemberTheEngineGives builds the input of a request
// whose every field is set, with the engine's own builder (the one every
// decision uses), and holds each of its members to the input schema: a
// member the builder gains that the schema lacks, or one of another type,
// fails here, before qnctl lint would warn of every policy that reads it.
// The object is a QuantumNode of the Go API type with every field set, so
// the CRD's schema (and the ObjectMeta lint adds to it) is held to it too.
func TestInputSchemaHasEveryMemberTheEngineGives(t *testing.T) {
	schema := quantumNodeInputSchema(t)

	var node qnv1alpha1.QuantumNode
	fillEvery(reflect.ValueOf(&node).Elem())
	node.APIVersion, node.Kind = qnv1alpha1.GroupVersion.String(), qnv1alpha1.Kind
	js, err := json.Marshal(node)
	if err != nil {
		t.Fatal(err)
	}
	var object map[string]any
	if err := json.Unmarshal(js, &object); err != nil {
		t.Fatal(err)
	}
	var req admissionv1.AdmissionRequest
	fillEvery(reflect.ValueOf(&req).Elem())
	req.Object, req.OldObject = runtime.RawExtension{Raw: js}, runtime.RawExtension{Raw: js}
	var facts Facts
	fillEvery(reflect.ValueOf(&facts).Elem())

	value, err := inputValue(&Input{Request: &req, Object: object, OldObject: object}, facts)
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	conforms(value, schema, "input", &missing)
	if len(missing) > 0 {
		t.Fatalf("the engine's input has members its schema lacks or types otherwise (add them to the Go type the schema is derived from):\n%s", strings.Join(missing, "\n"))
	}
	// The walk reached the leaves: a schema left open would pass anything.
	for _, path := range [][]string{
		{"request", "object", "spec", "services"},
		{"request", "object", "metadata", "labels"},
		{"request", "oldObject", "status", "phase"},
		{"request", "userInfo", "groups"},
		{"request", "requestSubResource"},
		{"context", "window", "remaining"},
		{"context", "userUID"},
	} {
		if ValueAt(value, path...) == nil {
			t.Errorf("the input built lacks %s", strings.Join(path, "."))
		}
		if schemaAt(schema, path...) == nil {
			t.Errorf("the schema lacks %s", strings.Join(path, "."))
		}
	}
}

func TestObjectSchemaKeepsShapesAndOpensWhatMayHoldAnything(t *testing.T) {
	openAPI := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"metadata": map[string]any{"type": "object"},
			"spec": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"replicas": map[string]any{"type": "integer", "minimum": 0},
					"port":     map[string]any{"x-kubernetes-int-or-string": true, "anyOf": []any{map[string]any{"type": "integer"}, map[string]any{"type": "string"}}},
					"config":   map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": map[string]any{"a": map[string]any{"type": "string"}}},
					"template": map[string]any{"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
					"selector": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
					"tags":     map[string]any{"type": "array", "items": map[string]any{"type": "string", "enum": []any{"a"}}},
				},
			},
		},
	}
	got := ObjectSchema(openAPI)
	spec := schemaAt(got, "spec")
	for name, want := range map[string]string{
		"replicas": `{"type":"integer"}`,
		"port":     `{}`,
		"config":   `{"type":"object"}`,
		"template": `{"type":"object"}`,
		"selector": `{"type":"object"}`,
		"tags":     `{"items":{"type":"string"},"type":"array"}`,
	} {
		js, _ := json.Marshal(spec["properties"].(map[string]any)[name])
		if string(js) != want {
			t.Errorf("spec.%s: %s, want %s", name, js, want)
		}
	}
	for _, path := range [][]string{{"metadata", "labels"}, {"metadata", "annotations"}, {"metadata", "managedFields"}, {"apiVersion"}, {"kind"}} {
		if schemaAt(got, path...) == nil {
			t.Errorf("no %s in %v", strings.Join(path, "."), got)
		}
	}
	if ts := schemaAt(got, "metadata", "creationTimestamp"); ts["type"] != "string" {
		t.Errorf("metadata.creationTimestamp: %v, want a string", ts)
	}
}

// schemaAt follows properties; nil when one is missing.
func schemaAt(s map[string]any, path ...string) map[string]any {
	for _, p := range path {
		props, _ := s["properties"].(map[string]any)
		s, _ = props[p].(map[string]any)
		if s == nil {
			return nil
		}
	}
	return s
}

// conforms adds to bad each member of v its schema does not list, and each
// value of another type than its schema's.
func conforms(v ast.Value, s map[string]any, path string, bad *[]string) {
	typ, _ := s["type"].(string)
	want := map[string]func(ast.Value) bool{
		"object":  func(v ast.Value) bool { _, ok := v.(ast.Object); return ok },
		"array":   func(v ast.Value) bool { _, ok := v.(*ast.Array); return ok },
		"string":  func(v ast.Value) bool { _, ok := v.(ast.String); return ok },
		"integer": func(v ast.Value) bool { _, ok := v.(ast.Number); return ok },
		"number":  func(v ast.Value) bool { _, ok := v.(ast.Number); return ok },
		"boolean": func(v ast.Value) bool { _, ok := v.(ast.Boolean); return ok },
	}[typ]
	if _, null := v.(ast.Null); want != nil && !null && !want(v) {
		*bad = append(*bad, path+": "+v.String()+" is not "+typ)
		return
	}
	switch x := v.(type) {
	case ast.Object:
		props, ok := s["properties"].(map[string]any)
		if !ok {
			return // open
		}
		keys := x.Keys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].Value.Compare(keys[j].Value) < 0 })
		for _, k := range keys {
			name := string(k.Value.(ast.String))
			sub, ok := props[name].(map[string]any)
			if !ok {
				*bad = append(*bad, path+"."+name+": not in the schema")
				continue
			}
			conforms(x.Get(k).Value, sub, path+"."+name, bad)
		}
	case *ast.Array:
		items, ok := s["items"].(map[string]any)
		if !ok {
			return
		}
		for i := range x.Len() {
			conforms(x.Elem(i).Value, items, path+"[]", bad)
		}
	}
}

// fillEvery sets every exported field reachable from v to a value that is
// not its zero, so that every omitempty member is in its JSON form.
func fillEvery(v reflect.Value) {
	switch v.Type() {
	case reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
		return
	case reflect.TypeFor[runtime.RawExtension]():
		v.Set(reflect.ValueOf(runtime.RawExtension{Raw: []byte(`{"fieldManager":"kubectl"}`)}))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillEvery(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillEvery(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte(`{}`)) // a raw JSON field (FieldsV1)
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillEvery(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillEvery(k)
		fillEvery(e)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	}
}

// TestContextSharesTheDecodedLabelsAndAnnotations: input.context.labels
// and annotations are the objects the webhook decoded when it shares them
// (no second build), and without them the same values built from the maps.
func TestContextSharesTheDecodedLabelsAndAnnotations(t *testing.T) {
	labels := map[string]string{"qn.dev/tier": "edge", "app": "sensor"}
	annotations := map[string]string{RoleAnnotation: "realtime"}
	decoded := func(m map[string]string) ast.Object {
		o := ast.NewObject()
		for k, v := range m {
			o.Insert(ast.StringTerm(k), ast.StringTerm(v))
		}
		return o
	}
	labelsValue, annotationsValue := decoded(labels), decoded(annotations)
	req := admissionv1.AdmissionRequest{Operation: admissionv1.Create}
	built, err := inputValue(&Input{Request: &req}, Facts{Labels: labels, Annotations: annotations})
	if err != nil {
		t.Fatal(err)
	}
	facts := Facts{Labels: labels, Annotations: annotations}
	facts.ShareMetadataValues(labelsValue, annotationsValue)
	shared, err := inputValue(&Input{Request: &req}, facts)
	if err != nil {
		t.Fatal(err)
	}
	if built.Compare(shared) != 0 {
		t.Fatalf("the input with shared metadata differs:\n%v\nbuilt from the maps:\n%v", shared, built)
	}
	for field, want := range map[string]ast.Object{"labels": labelsValue, "annotations": annotationsValue} {
		if got := ValueAt(shared, "context", field); got != ast.Value(want) {
			t.Errorf("input.context.%s is a new object, not the decoded one", field)
		}
	}
}

// TestKindAndResourceObjectsAreBuiltOncePerValue: the input's kind and
// resource objects are shared between requests of the same kind (and
// between request.kind and context.kind), and hold their own values.
func TestKindAndResourceObjectsAreBuiltOncePerValue(t *testing.T) {
	input := func(group, kind, resource string) ast.Value {
		req := admissionv1.AdmissionRequest{Operation: admissionv1.Create,
			Kind:     metav1.GroupVersionKind{Group: group, Version: "v1", Kind: kind},
			Resource: metav1.GroupVersionResource{Group: group, Version: "v1", Resource: resource}}
		facts := Facts{Kind: GroupVersionKind{Group: group, Version: "v1", Kind: kind},
			Resource: GroupVersionRes{Group: group, Version: "v1", Resource: resource}}
		v, err := inputValue(&Input{Request: &req}, facts)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	first, second, other := input("qn.dev", "QuantumNode", "quantumnodes"), input("qn.dev", "QuantumNode", "quantumnodes"), input("", "Pod", "pods")
	for _, path := range [][]string{{"request", "kind"}, {"context", "kind"}, {"request", "resource"}, {"context", "resource"}} {
		if ValueAt(first, path...) != ValueAt(second, path...) {
			t.Errorf("input.%s is built again for the same kind", strings.Join(path, "."))
		}
	}
	if ValueAt(first, "request", "kind") != ValueAt(first, "context", "kind") {
		t.Error("request.kind and context.kind are two objects of one value")
	}
	for v, want := range map[ast.Value]string{
		ValueAt(first, "request", "kind"):     `{"group": "qn.dev", "kind": "QuantumNode", "version": "v1"}`,
		ValueAt(other, "context", "kind"):     `{"group": "", "kind": "Pod", "version": "v1"}`,
		ValueAt(other, "request", "resource"): `{"group": "", "resource": "pods", "version": "v1"}`,
	} {
		if v.Compare(ast.MustParseTerm(want).Value) != 0 {
			t.Errorf("got %v, want %s", v, want)
		}
	}
}
