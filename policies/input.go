// Package policies is the decision engine of qn-admission: it picks the role
// a request runs under, checks the operation is one the role may perform,
// evaluates the role's Rego policies and composes one Decision. It knows
// nothing of HTTP; the webhook package turns requests into Input and
// Decisions into AdmissionReview responses.
package policies

import (
	"bytes"
	"fmt"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"
	kjson "sigs.k8s.io/json"
)

// RoleAnnotation routes a request to a role's policy set.
const RoleAnnotation = "qn-role"

// Input is one admission request as the engine reads it: the request, its
// object and oldObject decoded once (duplicate keys already refused), and the
// context extracted from it.
type Input struct {
	Request *admissionv1.AdmissionRequest
	// Object and OldObject are Request.Object and Request.OldObject decoded
	// to Go values; nil when absent. Policies read these, never the raw
	// bytes.
	Object    map[string]any
	OldObject map[string]any
	// ObjectValue and OldObjectValue are the same objects as Rego values,
	// when the caller decoded them that way in one pass (the webhook does,
	// with internal/astjson). Rego policies then read these, and the Go
	// maps stay nil until a step that needs them (pattern policies, a
	// patch) decodes them from the request's bytes.
	ObjectValue    ast.Value
	OldObjectValue ast.Value
	// ObjectReads, when set, says ObjectValue and OldObjectValue were
	// decoded in part: only what it reads is there. The engine decodes
	// them again, whole, for a set that reads more (readableBy).
	ObjectReads *ObjectReads
	Facts       Facts
}

// goObjects fills Object and OldObject from the request's bytes where only
// their Rego values were decoded.
func (in *Input) goObjects() error {
	if in.Request == nil {
		return nil
	}
	var err error
	if in.Object == nil && in.ObjectValue != nil {
		if in.Object, err = decodeGoObject("request.object", in.Request.Object.Raw); err != nil {
			return err
		}
	}
	if in.OldObject == nil && in.OldObjectValue != nil {
		if in.OldObject, err = decodeGoObject("request.oldObject", in.Request.OldObject.Raw); err != nil {
			return err
		}
	}
	return nil
}

func decodeGoObject(field string, raw []byte) (map[string]any, error) {
	var m map[string]any
	strictErrs, err := kjson.UnmarshalStrict(bytes.TrimSpace(raw), &m, kjson.DisallowDuplicateFields)
	if err == nil && len(strictErrs) > 0 {
		err = strictErrs[0]
	}
	if err != nil {
		return nil, fmt.Errorf("decode %s for pattern policies and patches: %w", field, err)
	}
	return m, nil
}

// hasOldObject reports whether the request carries the stored object.
func (in *Input) hasOldObject() bool { return in.OldObject != nil || in.OldObjectValue != nil }

// hasObject says the request carries the object it writes.
func (in *Input) hasObject() bool { return in.Object != nil || in.ObjectValue != nil }

// oldAnnotation reads metadata.annotations[key] of the stored object; ""
// when absent or not a string.
func (in *Input) oldAnnotation(key string) string {
	if in.OldObject != nil || in.OldObjectValue == nil {
		return annotationOf(in.OldObject, key)
	}
	s, _ := ValueAt(in.OldObjectValue, "metadata", "annotations", key).(ast.String)
	return string(s)
}

// ValueAt follows keys through nested Rego objects; nil when a key is
// missing or a value on the way is not an object.
func ValueAt(v ast.Value, keys ...string) ast.Value {
	for _, k := range keys {
		obj, ok := v.(ast.Object)
		if !ok {
			return nil
		}
		t := obj.Get(ast.InternedTerm(k))
		if t == nil {
			return nil
		}
		v = t.Value
	}
	return v
}

// Facts are what the webhook extracted from a request. Policies see them as
// input.context; their JSON names are part of the policy API.
type Facts struct {
	UID         string              `json:"uid"`
	User        string              `json:"user"`
	UserUID     string              `json:"userUID,omitempty"`
	Groups      []string            `json:"groups"`
	Extra       map[string][]string `json:"extra,omitempty"`
	Operation   string              `json:"operation"`
	Kind        GroupVersionKind    `json:"kind"`
	Resource    GroupVersionRes     `json:"resource"`
	SubResource string              `json:"subResource,omitempty"`
	Namespace   string              `json:"namespace"`
	Name        string              `json:"name"`
	Labels      map[string]string   `json:"labels"`
	Annotations map[string]string   `json:"annotations"`
	// Role is the value of the qn-role annotation as extracted; the engine
	// replaces it with the resolved role (the default role when absent)
	// before policies see it.
	Role   string    `json:"role"`
	DryRun bool      `json:"dryRun"`
	Time   time.Time `json:"time"`
	// Window is the requester's rate window before this request, set by
	// the engine for roles with a window.
	Window *WindowState `json:"window,omitempty"`

	// labelsValue and annotationsValue are Labels and Annotations as the
	// Rego objects the webhook decoded them from (ShareMetadataValues):
	// input.context shares them rather than building both again.
	labelsValue, annotationsValue ast.Object
}

// ShareMetadataValues gives the Rego objects Labels and Annotations were
// read from, for input.context to share: each must hold exactly the
// strings of its map (a nil one is built from the map). Whoever changes
// Labels or Annotations afterwards calls it again.
func (c *Facts) ShareMetadataValues(labels, annotations ast.Object) {
	c.labelsValue, c.annotationsValue = labels, annotations
}

// WindowState is the rate window policies see as input.context.window, so a
// policy can warn near the limit. Count excludes the request being judged.
type WindowState struct {
	Key           string  `json:"key"`
	Count         int     `json:"count"`
	Limit         int     `json:"limit"`
	PeriodSeconds float64 `json:"periodSeconds"`
	Remaining     int     `json:"remaining"`
}

// GroupVersionKind names a kind the way policies read it.
type GroupVersionKind struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

// GroupVersionRes names a resource the way policies read it.
type GroupVersionRes struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
}
