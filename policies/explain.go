package policies

import (
	"context"
	"fmt"

	"github.com/open-policy-agent/opa/v1/topdown"
	"go.yaml.in/yaml/v3"

	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
)

// Explanation is how the engine reaches its decision on one request, step
// by step: the exemption or the role and why it was chosen, whether the
// role may perform the operation, the requester's window as policies see
// it, and the traced evaluation of the role's prepared query. It is built
// by the same role resolution, window key and prepared query as the
// decision, for qnctl eval --explain; the serving path never builds one.
type Explanation struct {
	Mutating bool
	// Exempt names the exemption that admits the request unjudged; the
	// fields below are then empty.
	Exempt string
	// Role is the role the request runs under.
	Role string
	// RoleFromAnnotation is true when the qn-role annotation named the
	// role, false when the table's defaultRole applied.
	RoleFromAnnotation bool
	// RoleKnown is false when the annotation names no role of the table.
	RoleKnown bool
	// Spec is the role's entry in the role table (when RoleKnown).
	Spec Role
	// Operation is the request's operation; OperationAllowed says whether
	// the role may perform it.
	Operation        string
	OperationAllowed bool
	// WindowKey and Window are the requester's rate window before this
	// request, as policies see it as input.context.window (validating
	// path, roles with a window).
	WindowKey string
	Window    *WindowState
	// Evaluated says whether the role's policies ran; Packages and Rules
	// say which packages and which of their rules.
	Evaluated bool
	Packages  []string
	Rules     []string
	// Result is what the policies produced; Err an evaluation error.
	Result rego.Result
	Err    error
	// Firings are the rules that held, with file, line and value.
	Firings []rego.Firing
	// Trace is every event of the evaluation, for a readable Rego trace.
	Trace []*topdown.Event
}

// Explain evaluates in the way Validate (mutating false) or Mutate would,
// with a tracer, and says how the decision comes about. It changes nothing:
// the window is only peeked at, so calling Explain and then Validate
// explains exactly the decision Validate makes.
func (e *Engine) Explain(ctx context.Context, in *Input, mutating bool) (*Explanation, error) {
	set := e.current.Load()
	x := &Explanation{Mutating: mutating, Operation: in.Facts.Operation}
	if why, ok := set.Roles.Exemptions.match(in.Facts); ok {
		x.Exempt = why
		return x, nil
	}
	name, role, _, ok := resolveRole(set, in)
	x.Role, x.RoleFromAnnotation, x.RoleKnown = name, in.Facts.Role != "", ok
	if !ok {
		return x, nil
	}
	x.Spec = role
	x.OperationAllowed = role.Allows(in.Facts.Operation)
	if !x.OperationAllowed {
		return x, nil
	}
	ctxv := in.Facts
	ctxv.Role = name
	if w := role.Window; w != nil && !mutating {
		key := windowKey(name, w, in.Facts)
		st, err := e.windows.Peek(ctx, key, window.Limit{Count: w.Limit, Period: w.Period})
		if err != nil {
			return nil, fmt.Errorf("read rate window %s: %w", key, err)
		}
		x.WindowKey, x.Window = key, windowState(w, st)
		ctxv.Window = x.Window
	}
	q, ok := set.Query(name, mutating)
	if !ok {
		return nil, fmt.Errorf("role %q has no prepared policies (policy set %s is inconsistent)", name, set.Revision)
	}
	value, err := inputValue(in, ctxv)
	if err != nil {
		return nil, err
	}
	x.Evaluated, x.Packages = true, q.Packages()
	x.Rules = rego.ValidationRules
	if mutating {
		x.Rules = rego.MutationRules
	}
	x.Result, x.Trace, x.Err = q.EvalTraced(ctx, value)
	x.Firings = rego.Firings(x.Trace)
	return x, nil
}

// RoleTableLine is the line of a dotted path ("roles.realtime.packages")
// in the source of a role table, or of its nearest ancestor that exists; 0
// when src is not YAML.
func RoleTableLine(src []byte, path string) int {
	var root yaml.Node
	if yaml.Unmarshal(src, &root) != nil || len(root.Content) == 0 {
		return 0
	}
	return lineOf(root.Content[0], path)
}
