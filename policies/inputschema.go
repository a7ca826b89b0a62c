package policies

import (
	"encoding/json"
	"reflect"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InputSchema is the JSON schema of the document a policy reads as input,
// for OPA's type checker (qnctl lint): input.request is the
// admission.k8s.io/v1 AdmissionRequest and input.context the Facts, both
// derived from the very Go type the engine's input is the JSON form of
// (policyInput), so the schema cannot lack a member the engine gives.
// object is the schema of request.object and request.oldObject (a kind's
// ObjectSchema); nil leaves them any object.
//
// Every object of the schema that lists its properties is closed: the type
// checker reports a ref to a member it does not list (a misspelt path).
// Maps (labels, userInfo.extra) and the request's options stay open.
func InputSchema(object map[string]any) map[string]any {
	s := typeSchema(reflect.TypeFor[policyInput](), map[reflect.Type]bool{})
	request := s["properties"].(map[string]any)["request"].(map[string]any)["properties"].(map[string]any)
	if object == nil {
		object = map[string]any{"type": "object"}
	}
	request["object"] = object
	request["oldObject"] = object
	s["$schema"] = "http://json-schema.org/draft-07/schema#"
	s["description"] = "The input of a qn-admission policy: the AdmissionReview's request and the context the engine adds (docs/policies.md)."
	return s
}

// ObjectSchema is the schema of request.object for a kind whose
// CustomResourceDefinition version has the OpenAPI v3 schema openAPIV3 (in
// its JSON form): its structure, with metadata the ObjectMeta every object
// carries (the CRD leaves it "type: object"). Only what gives a shape is
// kept; validations (enum, pattern, anyOf, x-kubernetes-validations) are
// the API server's. An object with x-kubernetes-preserve-unknown-fields,
// an embedded resource, a map (additionalProperties) and an int-or-string
// are left open, so a policy that reads what they may hold is never
// flagged.
func ObjectSchema(openAPIV3 map[string]any) map[string]any {
	s := structuralSchema(openAPIV3)
	if props, ok := s["properties"].(map[string]any); ok {
		props["metadata"] = typeSchema(reflect.TypeFor[metav1.ObjectMeta](), map[reflect.Type]bool{})
		props["apiVersion"] = map[string]any{"type": "string"}
		props["kind"] = map[string]any{"type": "string"}
	}
	return s
}

// structuralSchema keeps the types and properties of a structural schema.
func structuralSchema(s map[string]any) map[string]any {
	typ, _ := s["type"].(string)
	for _, open := range []string{"x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string"} {
		if s[open] == true {
			if typ == "object" {
				return map[string]any{"type": "object"}
			}
			return map[string]any{}
		}
	}
	out := map[string]any{}
	switch typ {
	case "object", "array", "string", "integer", "number", "boolean":
		out["type"] = typ
	}
	if props, ok := s["properties"].(map[string]any); ok && len(props) > 0 {
		kept := make(map[string]any, len(props))
		for name, p := range props {
			if p, ok := p.(map[string]any); ok {
				kept[name] = structuralSchema(p)
			} else {
				kept[name] = map[string]any{}
			}
		}
		out["type"] = "object"
		out["properties"] = kept
	}
	if items, ok := s["items"].(map[string]any); ok {
		out["items"] = structuralSchema(items)
	}
	return out
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	// timeTypes marshal as RFC 3339 strings.
	timeTypes = map[reflect.Type]bool{
		reflect.TypeFor[time.Time]():        true,
		reflect.TypeFor[metav1.Time]():      true,
		reflect.TypeFor[metav1.MicroTime](): true,
	}
)

// typeSchema is the JSON schema of t's encoding/json form. A type with its
// own MarshalJSON (a RawExtension, FieldsV1) may be anything.
func typeSchema(t reflect.Type, seen map[reflect.Type]bool) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if timeTypes[t] {
		return map[string]any{"type": "string"}
	}
	if t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler) {
		return map[string]any{}
	}
	switch t.Kind() {
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string"} // base64
		}
		return map[string]any{"type": "array", "items": typeSchema(t.Elem(), seen)}
	case reflect.Map:
		return map[string]any{"type": "object"}
	case reflect.Struct:
		if seen[t] {
			return map[string]any{}
		}
		seen[t] = true
		defer delete(seen, t)
		props := map[string]any{}
		structProperties(t, seen, props)
		return map[string]any{"type": "object", "properties": props}
	}
	return map[string]any{}
}

// structProperties adds the members of struct t's JSON form to props,
// those of embedded structs without a name inlined as encoding/json does.
func structProperties(t reflect.Type, seen map[reflect.Type]bool, props map[string]any) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				structProperties(ft, seen, props)
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		props[name] = typeSchema(f.Type, seen)
	}
}
