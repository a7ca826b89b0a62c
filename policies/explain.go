package policies

import (
	"context"

	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/quantumnode/qn-admission/policies/dialect"
	"github.com/quantumnode/qn-admission/policies/pattern"
	"github.com/quantumnode/qn-admission/rego"
)

// Explanation is how the engine reaches its decision on one request, step
// by step: the exemption or the role and why it was chosen, whether the
// role table lets the request run under it, the requester's window as
// policies see it, and the traced evaluation of the role's prepared query.
// It is built from the same Plan as the decision, for qnctl eval --explain;
// the serving path never builds one.
type Explanation struct {
	Path Path
	// Exempt names why the request is admitted unjudged (an exemption or
	// the control plane deleting); the fields below are then empty.
	Exempt string
	// Role is the role the request runs under.
	Role string
	// RoleFromAnnotation is true when the qn-role annotation named the
	// role, false when the table's defaultRole applied.
	RoleFromAnnotation bool
	// StoredRole is the role of the stored object (UPDATE, DELETE).
	StoredRole string
	// RoleKnown is false when the annotation names no role of the table.
	RoleKnown bool
	// Spec is the role's entry in the role table (when RoleKnown).
	Spec Role
	// Operation is the request's operation; OperationAllowed says whether
	// the role table lets the requester perform it under the role (the
	// operation, requesters, moveTo and delete rules); Refusal says why not.
	Operation        string
	OperationAllowed bool
	Refusal          string
	// Warnings are the role table's warnings (e.g. a stored role that is
	// no longer declared).
	Warnings []string
	// WindowKey and Window are the requester's rate window before this
	// request, as policies see it as input.context.window (validating
	// path, roles with a window).
	WindowKey string
	Window    *WindowState
	// WindowSubject says whose window it is, readably ("user \"alice\""):
	// the key holds only a hash of the name.
	WindowSubject string
	// Evaluated says whether the role's policies ran; Packages and Rules
	// say which packages and which of their rules.
	Evaluated bool
	Packages  []string
	Rules     []string
	// Result is what the policies produced; Err an evaluation error.
	Result rego.Result
	Err    error
	// Patterns are the verdicts of the role's pattern policies (validating
	// path): which failed, where, and which did not apply or were skipped.
	// Their denials and warnings are not in Result, which is the Rego
	// query's alone; the decision merges both.
	Patterns []pattern.Verdict
	// Policies are the verdicts of the role's dialect policies
	// (ClusterPolicies...), one entry per policy.
	Policies []PolicyVerdicts
	// Firings are the rules that held, with file, line and value.
	Firings []rego.Firing
	// Trace is every event of the evaluation, for a readable Rego trace.
	Trace []*topdown.Event
}

// Explain evaluates along path as Validate or Mutate would, with a tracer,
// and says how the decision comes about. It changes nothing: the window is
// only peeked at, so calling Explain and then Validate explains exactly the
// decision Validate makes.
func (e *Engine) Explain(ctx context.Context, in *Input, path Path) (*Explanation, error) {
	p := e.Plan(in, path)
	x := &Explanation{
		Path: path, Operation: in.Facts.Operation, Exempt: p.Exempt,
		Role: p.Role, RoleFromAnnotation: p.RoleFromAnnotation, StoredRole: p.StoredRole,
		RoleKnown: p.Spec != nil, OperationAllowed: p.Refusal == nil, Warnings: p.Warnings,
	}
	if p.Exempt != "" {
		return x, nil
	}
	if p.Spec != nil {
		x.Spec = *p.Spec
	}
	if p.Refusal != nil {
		x.Refusal = p.Refusal.Message
	}
	if !p.Evaluates() || (path == PathMutate && p.Refusal != nil) {
		return x, nil
	}
	facts := p.Facts
	if p.Window != nil {
		st, err := e.peek(ctx, p, &verdict{plan: p})
		if err != nil {
			return nil, err
		}
		x.WindowKey, x.Window, x.WindowSubject = p.Window.Key, st, windowSubject(p.Role, p.Window.Spec, p.Facts)
		facts.Window = st
	}
	if p.Query == nil && !p.patternsOnly() {
		return nil, p.inconsistent()
	}
	x.Evaluated = true
	x.Rules = rego.ValidationRules
	if path == PathMutate {
		x.Rules = rego.MutationRules
	}
	if p.Query != nil {
		// An explanation shows the whole input the policies judged.
		whole, err := in.whole()
		if err != nil {
			return nil, err
		}
		value, err := inputValue(whole, facts)
		if err != nil {
			return nil, err
		}
		x.Packages = p.Query.Packages()
		evalCtx, err := e.withInventory(ctx, p.Query)
		if err != nil {
			x.Err = err
		} else {
			x.Result, x.Trace, x.Err = p.Query.EvalTraced(evalCtx, value)
		}
		x.Firings = rego.Firings(x.Trace)
	}
	if x.Err == nil && len(p.Patterns) > 0 {
		if err := in.goObjects(); err != nil {
			return nil, err
		}
		x.Patterns = explainPatterns(p.Patterns, in)
	}
	if x.Err == nil && len(p.Policies) > 0 {
		if err := in.goObjects(); err != nil {
			return nil, err
		}
		req := dialectRequest(in)
		for _, pol := range p.Policies {
			pv := PolicyVerdicts{Policy: pol}
			if e, ok := pol.(dialect.Explainer); ok {
				pv.Verdicts = e.Verdicts(ctx, &req)
			} else {
				for _, f := range pol.Evaluate(ctx, &req) {
					status := "fail"
					if f.Error {
						status = "error"
					}
					pv.Verdicts = append(pv.Verdicts, dialect.Verdict{Rule: f.Rule, Status: status, Message: f.Message, Warn: f.Warn})
				}
			}
			x.Policies = append(x.Policies, pv)
		}
	}
	return x, nil
}

// PolicyVerdicts is what one dialect policy's rules made of a request.
type PolicyVerdicts struct {
	Policy   dialect.Policy
	Verdicts []dialect.Verdict
}
