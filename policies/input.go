// Package policies is the decision engine of qn-admission: it picks the role
// a request runs under, checks the operation is one the role may perform,
// evaluates the role's Rego policies and composes one Decision. It knows
// nothing of HTTP; the webhook package turns requests into Input and
// Decisions into AdmissionReview responses.
package policies

import (
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

// RoleAnnotation routes a request to a role's policy set.
const RoleAnnotation = "qn-role"

// Input is one admission request as the engine reads it: the request, its
// object and oldObject decoded once (duplicate keys already refused), and the
// context extracted from it.
type Input struct {
	Request *admissionv1.AdmissionRequest
	// Object and OldObject are Request.Object and Request.OldObject decoded;
	// nil when absent. Policies read these, never the raw bytes.
	Object    map[string]any
	OldObject map[string]any
	Facts     Facts
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
