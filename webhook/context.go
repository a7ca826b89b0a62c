package webhook

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/quantumnode/qn-admission/internal/astjson"
	"github.com/quantumnode/qn-admission/policies"
)

// ownKinds maps the kinds this project defines to their resources, so a
// request whose kind and resource disagree is refused instead of slipping
// past policies keyed on either.
var ownKinds = map[schema.GroupKind]string{
	{Group: "qn.dev", Kind: "QuantumNode"}:        "quantumnodes",
	{Group: "qn.dev", Kind: "HorizontalQNScaler"}: "horizontalqnscalers",
}

// extractInput turns an AdmissionRequest into the Input the engine reads.
// Crafted requests (an unknown operation, an object of another kind than the
// request says, a kind that does not match its resource) are errors.
//
// It fills in.Object, in.OldObject and in.Facts from in.Request.
func extractInput(req *admissionv1.AdmissionRequest, objs *decodedObjects, now time.Time) (*policies.Input, error) {
	in := &policies.Input{Request: req}
	if !slices.Contains(policies.Operations, string(req.Operation)) {
		return nil, fmt.Errorf("request.operation %q is not one of %s", req.Operation, strings.Join(policies.Operations, ", "))
	}
	gk := schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}
	if req.Kind.Kind == "" || req.Kind.Version == "" {
		return nil, fmt.Errorf("request.kind is incomplete (group %q, version %q, kind %q)", req.Kind.Group, req.Kind.Version, req.Kind.Kind)
	}
	for own, resource := range ownKinds {
		kindIsOwn := gk == own
		resourceIsOwn := req.Resource.Group == own.Group && req.Resource.Resource == resource
		if kindIsOwn != resourceIsOwn {
			return nil, fmt.Errorf("request.kind %s does not match request.resource %s", gvkString(req.Kind.Group, req.Kind.Version, req.Kind.Kind), gvrString(req.Resource.Group, req.Resource.Version, req.Resource.Resource))
		}
	}
	var err error
	if objs != nil {
		// Decoded with the envelope (decodeReviewOnePass).
		in.ObjectValue, in.OldObjectValue, in.ObjectReads = objs.object, objs.oldObject, objs.reads
		if err = checkObjectKind("request.object", in.ObjectValue, req); err != nil {
			return nil, err
		}
		if err = checkObjectKind("request.oldObject", in.OldObjectValue, req); err != nil {
			return nil, err
		}
	} else {
		if in.ObjectValue, err = decodeObject("request.object", req.Object.Raw, req); err != nil {
			return nil, err
		}
		if in.OldObjectValue, err = decodeObject("request.oldObject", req.OldObject.Raw, req); err != nil {
			return nil, err
		}
	}
	meta := in.ObjectValue
	if meta == nil {
		meta = in.OldObjectValue
	}
	c := policies.Facts{
		UID:         string(req.UID),
		User:        req.UserInfo.Username,
		UserUID:     req.UserInfo.UID,
		Groups:      req.UserInfo.Groups,
		Operation:   string(req.Operation),
		Kind:        policies.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind},
		Resource:    policies.GroupVersionRes{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource},
		SubResource: req.SubResource,
		Namespace:   req.Namespace,
		Name:        req.Name,
		DryRun:      req.DryRun != nil && *req.DryRun,
		Time:        now,
	}
	if c.Groups == nil {
		c.Groups = []string{}
	}
	if len(req.UserInfo.Extra) > 0 {
		c.Extra = make(map[string][]string, len(req.UserInfo.Extra))
		for k, v := range req.UserInfo.Extra {
			c.Extra[k] = v
		}
	}
	var labels, annotations ast.Object
	if c.Labels, labels, err = stringMap(meta, "labels"); err != nil {
		return nil, err
	}
	if c.Annotations, annotations, err = stringMap(meta, "annotations"); err != nil {
		return nil, err
	}
	c.ShareMetadataValues(labels, annotations)
	c.Role = c.Annotations[policies.RoleAnnotation]
	in.Facts = c
	return in, nil
}

// stringMap reads metadata.labels or metadata.annotations, as a map and,
// when the object has the member, as the Rego object it is; a value that
// is not a map of strings is a malformed object, not an empty map.
func stringMap(obj ast.Value, field string) (map[string]string, ast.Object, error) {
	out := map[string]string{}
	if obj == nil {
		return out, nil, nil
	}
	metadata := policies.ValueAt(obj, "metadata")
	if metadata == nil {
		return out, nil, nil
	}
	meta, ok := metadata.(ast.Object)
	if !ok {
		return nil, nil, fmt.Errorf("metadata is %s, not an object", typeName(metadata))
	}
	value := policies.ValueAt(meta, field)
	if value == nil {
		return out, nil, nil
	}
	m, ok := value.(ast.Object)
	if !ok {
		return nil, nil, fmt.Errorf("metadata.%s is %s, not an object", field, typeName(value))
	}
	var err error
	m.Foreach(func(k, v *ast.Term) {
		key := string(k.Value.(ast.String))
		s, ok := v.Value.(ast.String)
		if !ok {
			if err == nil {
				err = fmt.Errorf("metadata.%s[%q] is %s, not a string", field, key, typeName(v.Value))
			}
			return
		}
		out[key] = string(s)
	})
	if err != nil {
		return nil, nil, err
	}
	return out, m, nil
}

// typeName names a JSON value's type in an error message.
func typeName(v ast.Value) string {
	switch v.(type) {
	case ast.Null:
		return "null"
	case ast.Boolean:
		return "a boolean"
	case ast.Number:
		return "a number"
	case ast.String:
		return "a string"
	case *ast.Array:
		return "an array"
	case ast.Object:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// decodeObject decodes an embedded object, refusing duplicate keys anywhere
// in it, and checks it is of the kind the request claims. nil when absent.
func decodeObject(field string, raw []byte, req *admissionv1.AdmissionRequest) (ast.Value, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil, nil
	}
	if trimmed[0] != '{' {
		return nil, fmt.Errorf("%s %v", field, errNotObject)
	}
	v, err := astjson.Decode(trimmed)
	if err != nil {
		var dup *astjson.DuplicateError
		if errors.As(err, &dup) {
			return nil, fmt.Errorf("%s is ambiguous: %s", field, dup.Error())
		}
		return nil, fmt.Errorf("%s is malformed: %v", field, err)
	}
	if err := checkObjectKind(field, v, req); err != nil {
		return nil, err
	}
	return v, nil
}

// checkObjectKind holds an object (nil: absent) to request.kind, unless
// the request is for a subresource, whose body is another kind.
func checkObjectKind(field string, v ast.Value, req *admissionv1.AdmissionRequest) error {
	if v == nil || req.SubResource != "" {
		return nil
	}
	want := schema.GroupVersion{Group: req.Kind.Group, Version: req.Kind.Version}.String()
	apiVersion, _ := policies.ValueAt(v, "apiVersion").(ast.String)
	kind, _ := policies.ValueAt(v, "kind").(ast.String)
	if string(apiVersion) != want || string(kind) != req.Kind.Kind {
		return fmt.Errorf("%s is apiVersion %q kind %q, but request.kind says %s", field, string(apiVersion), string(kind), gvkString(req.Kind.Group, req.Kind.Version, req.Kind.Kind))
	}
	return nil
}

func gvkString(group, version, kind string) string {
	return schema.GroupVersion{Group: group, Version: version}.String() + " " + kind
}

func gvrString(group, version, resource string) string {
	return schema.GroupVersion{Group: group, Version: version}.String() + " " + resource
}
