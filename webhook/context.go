package webhook

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "sigs.k8s.io/json"

	"github.com/quantumnode/qn-admission/policies"
)

// ownKinds maps the kinds this project defines to their resources, so a
// request whose kind and resource disagree is refused instead of slipping
// past policies keyed on either.
var ownKinds = map[schema.GroupKind]string{
	{Group: "qn.dev", Kind: "QuantumNode"}: "quantumnodes",
}

// extractContext turns an AdmissionRequest into the context the engine reads.
// Crafted requests (an unknown operation, an object of another kind than the
// request says, a kind that does not match its resource) are errors.
//
// It fills in.Object, in.OldObject and in.Facts from in.Request.
func extractInput(req *admissionv1.AdmissionRequest, now time.Time) (*policies.Input, error) {
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
	if in.Object, err = decodeObject("request.object", req.Object.Raw, req); err != nil {
		return nil, err
	}
	if in.OldObject, err = decodeObject("request.oldObject", req.OldObject.Raw, req); err != nil {
		return nil, err
	}
	// DELETE carries only oldObject: its labels and role are what we judge.
	meta := in.Object
	if meta == nil {
		meta = in.OldObject
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
	if c.Labels, err = stringMap(meta, "labels"); err != nil {
		return nil, err
	}
	if c.Annotations, err = stringMap(meta, "annotations"); err != nil {
		return nil, err
	}
	c.Role = c.Annotations[policies.RoleAnnotation]
	in.Facts = c
	return in, nil
}

// stringMap reads metadata.labels or metadata.annotations; a value that is
// not a map of strings is a malformed object, not an empty map.
func stringMap(obj map[string]any, field string) (map[string]string, error) {
	out := map[string]string{}
	if obj == nil {
		return out, nil
	}
	m, found, err := unstructured.NestedMap(obj, "metadata", field)
	if err != nil {
		return nil, fmt.Errorf("metadata.%s is malformed: %v", field, err)
	}
	if !found {
		return out, nil
	}
	for k, v := range m {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("metadata.%s[%q] is %T, not a string", field, k, v)
		}
		out[k] = s
	}
	return out, nil
}

// decodeObject decodes an embedded object, refusing duplicate keys anywhere
// in it, and checks it is of the kind the request claims. nil when absent.
func decodeObject(field string, raw []byte, req *admissionv1.AdmissionRequest) (map[string]any, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil, nil
	}
	if trimmed[0] != '{' {
		return nil, fmt.Errorf("%s %v", field, errNotObject)
	}
	var m map[string]any
	strictErrs, err := kjson.UnmarshalStrict(trimmed, &m, kjson.DisallowDuplicateFields)
	if err != nil {
		return nil, fmt.Errorf("%s is malformed: %s", field, describeJSONError(err))
	}
	if len(strictErrs) > 0 {
		return nil, fmt.Errorf("%s is ambiguous: %s", field, joinErrors(strictErrs))
	}
	// A request for a subresource (status, scale) may carry another kind.
	if req.SubResource == "" {
		want := schema.GroupVersion{Group: req.Kind.Group, Version: req.Kind.Version}.String()
		apiVersion, _ := m["apiVersion"].(string)
		kind, _ := m["kind"].(string)
		if apiVersion != want || kind != req.Kind.Kind {
			return nil, fmt.Errorf("%s is apiVersion %q kind %q, but request.kind says %s", field, apiVersion, kind, gvkString(req.Kind.Group, req.Kind.Version, req.Kind.Kind))
		}
	}
	return m, nil
}

func gvkString(group, version, kind string) string {
	return schema.GroupVersion{Group: group, Version: version}.String() + " " + kind
}

func gvrString(group, version, resource string) string {
	return schema.GroupVersion{Group: group, Version: version}.String() + " " + resource
}
