package policies

import (
	"fmt"

	"github.com/quantumnode/qn-admission/policies/dialect"
	"github.com/quantumnode/qn-admission/policies/pattern"
	"github.com/quantumnode/qn-admission/rego"
)

// Path is the webhook that asks. Validation judges and counts the request
// against its role's rate window; mutation only proposes a patch, because
// the apiserver may call mutating webhooks more than once and validation
// judges the final object.
type Path int

const (
	// PathValidate is the validating webhook.
	PathValidate Path = iota
	// PathMutate is the mutating webhook.
	PathMutate
)

// String names the path as the webhook's route does.
func (p Path) String() string {
	if p == PathMutate {
		return "mutate"
	}
	return "validate"
}

// Plan is one request resolved against one policy set: everything the
// engine decides before any policy runs. Validate, Mutate and Explain all
// consume the same Plan, so the server, qnctl and the audit cannot disagree
// on which role judges a request or which window it counts against.
type Plan struct {
	Path Path
	// Set is the policy set the whole decision uses.
	Set *Set
	// Exempt names why the request is admitted without policies or window
	// (an exemption, or the control plane deleting); the fields below are
	// then empty.
	Exempt string
	// Role is the role the request runs under; Spec is its entry in the
	// role table (nil when the role is unknown). RoleFromAnnotation says
	// qn-role named it rather than defaultRole.
	Role               string
	Spec               *Role
	RoleFromAnnotation bool
	// StoredRole is the role of the stored object on UPDATE and DELETE.
	StoredRole string
	// Refusal, when set, is the role table's answer: the policies do not
	// run. RefusalEnforceable says the role's enforcement applies to it.
	Refusal            *Decision
	RefusalEnforceable bool
	// Warnings from the role table reach the requester with the decision.
	Warnings []string
	// Window is the rate window the request counts against (validation,
	// roles with a window).
	Window *PlannedWindow
	// Facts are what the policies see as input.context, with the resolved
	// role; the engine adds the window state when it reads it.
	Facts Facts
	// Query is the role's prepared query for Path; nil for a role judged
	// by pattern policies only.
	Query *rego.Query
	// Patterns are the role's pattern policies, judged beside Query on the
	// validating path (patterns never patch).
	Patterns []*pattern.Policy
	// Policies are the role's policies in other dialects (ClusterPolicy,
	// ValidatingAdmissionPolicy...), judged beside the patterns.
	Policies []dialect.Policy
	// DenyFirst, when set, is Query in two stages (validation, roles with
	// a window none of whose deny rules may read it): the deny rules, and
	// the warn rules that do not read the window, before the window is
	// counted; the warn rules that may read it after (validateDenyFirst).
	DenyFirst *rego.Stages
}

// Plan resolves a request against the current policy set.
func (e *Engine) Plan(in *Input, path Path) *Plan {
	return e.current.Load().plan(in, path)
}

func (s *Set) plan(in *Input, path Path) *Plan {
	b := s.Roles.bind(in)
	p := &Plan{
		Path: path, Set: s, Exempt: b.exempt,
		Role: b.role, Spec: b.spec, RoleFromAnnotation: b.fromAnnotation, StoredRole: b.stored,
		Refusal: b.refusal, RefusalEnforceable: b.enforceable, Warnings: b.warnings,
		Facts: in.Facts,
	}
	p.Facts.Role = b.role
	if p.Exempt != "" || p.Spec == nil {
		return p
	}
	if w := p.Spec.Window; w != nil && path == PathValidate && w.Counts(in.Facts.Kind) {
		p.Window = planWindow(b.role, w, in.Facts)
	}
	if path == PathMutate {
		p.Query = s.mutate[b.role]
	} else {
		p.Query = s.validate[b.role]
		p.Patterns = s.patterns[b.role]
		p.Policies = s.dialects[b.role]
		if p.Window != nil {
			p.DenyFirst = s.denyFirst[b.role]
		}
	}
	return p
}

// Evaluates says whether the role's policies run for this plan (or would,
// in a role that does not enforce the table's refusal).
func (p *Plan) Evaluates() bool {
	return p.Exempt == "" && p.Spec != nil && (p.Refusal == nil || p.RefusalEnforceable && p.Spec.Enforcement != EnforceDeny)
}

// patternsOnly says the role lists no Rego packages: it has no prepared
// query and is judged by its pattern and dialect policies alone.
func (p *Plan) patternsOnly() bool {
	return p.Spec != nil && len(p.Spec.Packages) == 0
}

// inconsistent is the error of a set whose role has no prepared query,
// which Load never produces.
func (p *Plan) inconsistent() error {
	return fmt.Errorf("no prepared policies for role %q (policy set %s is inconsistent)", p.Role, p.Set.Revision)
}

// judgesBesideRego says the plan has pattern or dialect policies to judge
// beside its Rego query.
func (p *Plan) judgesBesideRego() bool {
	return len(p.Patterns) > 0 || len(p.Policies) > 0
}
