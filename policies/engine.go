package policies

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/quantumnode/qn-admission/rego"
)

// Engine decides admission requests against the current policy Set. The set
// is swapped atomically on reload; a decision in flight keeps the set it
// started with.
type Engine struct {
	current atomic.Pointer[Set]
}

// NewEngine serves set until Swap replaces it.
func NewEngine(set *Set) *Engine {
	e := &Engine{}
	e.current.Store(set)
	return e
}

// Swap publishes a new policy set for every decision that starts after it.
func (e *Engine) Swap(set *Set) { e.current.Store(set) }

// Current returns the set decisions are made against now.
func (e *Engine) Current() *Set { return e.current.Load() }

// Validate judges a request on the validating path: every deny rule of the
// role counts, warnings reach the user, and nothing is patched.
func (e *Engine) Validate(ctx context.Context, in *Input) Decision {
	set := e.current.Load()
	d := e.validate(ctx, set, in)
	d.Revision = set.Revision
	return d
}

func (e *Engine) validate(ctx context.Context, set *Set, in *Input) Decision {
	roleName, role, d, ok := resolveRole(set, in)
	if !ok {
		return d
	}
	if !role.Allows(in.Context.Operation) {
		d := Deny(http.StatusForbidden, metav1.StatusReasonForbidden, fmt.Sprintf(
			"role %q may not %s %s; it may %s", roleName, strings.ToLower(in.Context.Operation), in.Context.Kind.Kind, strings.Join(role.Operations, ", ")))
		d.Role = roleName
		return d
	}
	res, err := evaluate(ctx, set, roleName, in)
	if err != nil {
		d := InternalError(fmt.Sprintf("role %q: %v", roleName, err))
		d.Role = roleName
		return d
	}
	if len(res.Deny) > 0 {
		d := Deny(http.StatusForbidden, metav1.StatusReasonForbidden,
			fmt.Sprintf("denied by qn-admission (role %q): %s", roleName, strings.Join(res.Deny, "; ")))
		d.Reasons = res.Deny
		d.Warnings = res.Warn
		d.Role = roleName
		return d
	}
	d = Allow(res.Warn...)
	d.Role = roleName
	return d
}

// Mutate computes the role's patch on the mutating path. It never denies for
// policy reasons (validation runs after every mutation and judges the final
// object); an unknown role or operation passes through unpatched for the
// validating webhook to refuse.
func (e *Engine) Mutate(ctx context.Context, in *Input) Decision {
	set := e.current.Load()
	d := e.mutate(ctx, set, in)
	d.Revision = set.Revision
	return d
}

func (e *Engine) mutate(ctx context.Context, set *Set, in *Input) Decision {
	roleName, role, _, ok := resolveRole(set, in)
	if !ok || !role.Allows(in.Context.Operation) {
		d := Allow()
		d.Role = roleName
		return d
	}
	res, err := evaluate(ctx, set, roleName, in)
	if err != nil {
		d := InternalError(fmt.Sprintf("role %q: %v", roleName, err))
		d.Role = roleName
		return d
	}
	patch, err := diffPatch(in.Object, res.Patch)
	if err != nil {
		d := InternalError(fmt.Sprintf("role %q: %v", roleName, err))
		d.Role = roleName
		return d
	}
	d := Allow()
	d.Patch = patch
	d.Role = roleName
	return d
}

// resolveRole picks the role named by the qn-role annotation, or the default
// role. An unknown role is a denial that lists the known ones.
func resolveRole(set *Set, in *Input) (string, Role, Decision, bool) {
	name := in.Context.Role
	if name == "" {
		name = set.Roles.DefaultRole
	}
	role, ok := set.Roles.Roles[name]
	if !ok {
		return name, Role{}, Deny(http.StatusForbidden, metav1.StatusReasonForbidden, fmt.Sprintf(
			"annotation %s=%q names no known role; known roles: %s", RoleAnnotation, name, strings.Join(set.Roles.Names(), ", "))), false
	}
	return name, role, Decision{}, true
}

// policyInput is the document Rego sees as input.
type policyInput struct {
	Request *admissionv1.AdmissionRequest `json:"request"`
	Context Context                       `json:"context"`
}

var (
	objectKey    = ast.StringTerm("object")
	oldObjectKey = ast.StringTerm("oldObject")
	requestKey   = ast.StringTerm("request")
)

func evaluate(ctx context.Context, set *Set, role string, in *Input) (rego.Result, error) {
	q, ok := set.Query(role)
	if !ok {
		return rego.Result{}, fmt.Errorf("no prepared policies (policy set %s is inconsistent)", set.Revision)
	}
	value, err := inputValue(in)
	if err != nil {
		return rego.Result{}, err
	}
	return q.Eval(ctx, value)
}

// inputValue builds the parsed Rego input once per request, so OPA does not
// convert it again. The objects come from their decoded form, not from the
// raw bytes, so policies judge exactly what the webhook validated.
func inputValue(in *Input) (ast.Value, error) {
	var req *admissionv1.AdmissionRequest
	if in.Request != nil {
		shallow := *in.Request
		shallow.Object, shallow.OldObject = runtime.RawExtension{}, runtime.RawExtension{}
		req = &shallow
	}
	raw, err := json.Marshal(policyInput{Request: req, Context: in.Context})
	if err != nil {
		return nil, fmt.Errorf("encode policy input: %w", err)
	}
	v, err := ast.ValueFromReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse policy input: %w", err)
	}
	if req == nil {
		return v, nil
	}
	request, ok := v.(ast.Object).Get(requestKey).Value.(ast.Object)
	if !ok {
		return nil, fmt.Errorf("policy input has no request object")
	}
	for key, obj := range map[*ast.Term]map[string]any{objectKey: in.Object, oldObjectKey: in.OldObject} {
		if obj == nil {
			continue
		}
		value, err := ast.InterfaceToValue(obj)
		if err != nil {
			return nil, fmt.Errorf("convert request.%s for policies: %w", key.Value, err)
		}
		request.Insert(key, ast.NewTerm(value))
	}
	return v, nil
}
