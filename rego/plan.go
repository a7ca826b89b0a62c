package rego

import (
	"context"
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"
	oparego "github.com/open-policy-agent/opa/v1/rego"

	"github.com/quantumnode/qn-admission/rego/planeval"
)

// Planned evaluation: each prepared query is also planned by OPA's planner
// (the IR `opa build -t plan` writes), on its first evaluation, and run by
// rego/planeval, which skips topdown's unification search. Planning takes
// about 2 ms in a set of 1,000 packages (the planner walks every module),
// so a role's first request pays it, not the load of the whole set. The query, the modules and the built-ins
// are the same; TestFastPathMatchesReferenceEvaluation (policies) holds the
// answers equal to OPA's own evaluation. A query the evaluator cannot run
// (print, a dynamic rule reference) stays on topdown.

// planTarget is the rego target under which the planner's output is
// captured. rego hands a target plugin the planned policy; this plugin only
// keeps it, the evaluation is planeval's.
const planTarget = "qn-admission-plan"

// planQueryName is the name rego gives the plan of its query.
const planQueryName = "eval"

type capturedPlanKey struct{}

type planCapture struct{}

func (planCapture) IsTarget(t string) bool { return t == planTarget }

func (planCapture) PrepareForEval(ctx context.Context, policy *ir.Policy, _ ...oparego.PrepareOption) (oparego.TargetPluginEval, error) {
	dst, ok := ctx.Value(capturedPlanKey{}).(**ir.Policy)
	if !ok {
		return nil, errors.New("the plan capture target is for rego.Compiled.Prepare only")
	}
	*dst = policy
	return refusingEval{}, nil
}

type refusingEval struct{}

func (refusingEval) Eval(context.Context, *oparego.EvalContext, ast.Value) (ast.Value, error) {
	return nil, errors.New("the plan capture target does not evaluate; use planeval")
}

func init() { oparego.RegisterPlugin(planTarget, planCapture{}) }

// planProgram plans query against the policy set and prepares it for
// planeval. An error says why the query stays on topdown.
func (c *Compiled) planProgram(query string) (*planeval.Program, error) {
	c.evalModeMu.Lock()
	defer c.evalModeMu.Unlock()
	// rego switches the shared compiler to the IR evaluation mode for a
	// plugin target; topdown queries prepared later need the default back.
	defer c.compiler.WithEvalMode(ast.EvalModeTopdown)
	var policy *ir.Policy
	ctx := context.WithValue(context.Background(), capturedPlanKey{}, &policy)
	_, err := oparego.New(
		oparego.Query(query),
		oparego.Compiler(c.compiler),
		oparego.Store(c.store),
		oparego.Target(planTarget),
		oparego.StrictBuiltinErrors(true),
	).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	prog, err := planeval.NewWithCapabilities(policy, planQueryName, c.data, c.compiler.Capabilities())
	if err != nil {
		return nil, err
	}
	prog.ShareAcrossEvaluations(c.sharedRule)
	return prog, nil
}

// evalPlanned evaluates the planned program; its one result is an object
// with a member per output variable.
func (q *Query) evalPlanned(ctx context.Context, program *planeval.Program, input ast.Value, bounds planeval.Bounds) (map[string]any, error) {
	results, _, err := program.EvalBoundedData(ctx, input, q.planData(ctx), bounds)
	if err != nil {
		return nil, err
	}
	if len(results) != 1 {
		return nil, fmt.Errorf("expected one result, got %d", len(results))
	}
	obj, ok := results[0].Value.(ast.Object)
	if !ok {
		return nil, fmt.Errorf("planned query result is %s, not an object", ast.ValueName(results[0].Value))
	}
	bindings := make(map[string]any, len(q.outputs))
	for i, out := range q.outputs {
		term := obj.Get(q.outputKeys[i])
		if term == nil {
			continue
		}
		if isEmptyCollection(term.Value) {
			// Most outputs of an admitted request (its deny and warn sets):
			// the value ast.JSON gives, without allocating it each time.
			bindings[out.variable] = noEntries
			continue
		}
		v, err := ast.JSON(term.Value)
		if err != nil {
			return nil, err
		}
		bindings[out.variable] = v
	}
	return bindings, nil
}

// noEntries is ast.JSON's value for an empty set or array, shared: a
// binding is read, never written.
var noEntries = []any{}

func isEmptyCollection(v ast.Value) bool {
	switch c := v.(type) {
	case ast.Set:
		return c.Len() == 0
	case *ast.Array:
		return c.Len() == 0
	}
	return false
}

// Planned reports whether the query is evaluated by planeval, and if not,
// why. It plans the query if no evaluation has yet.
func (q *Query) Planned() (bool, string) {
	if _, err := q.program(); err != nil {
		return false, err.Error()
	}
	return true, ""
}
