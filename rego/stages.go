package rego

import (
	"context"
	"maps"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/quantumnode/qn-admission/rego/planeval"
)

// Stages is the query of Prepare split in two queries evaluated one after
// the other, the second on an input the first need not have had: the
// engine judges a windowed role's deny rules before it counts the change,
// and only the rules that read the window after. Their bindings together
// make the one query's Result, message for message and in the same order.
type Stages struct {
	// First and Second hold the rules Prepare would bind, split by the
	// predicate of PrepareStages; Second is nil when it keeps none.
	First, Second *Query
	// outputs are the one query's, in its order.
	outputs []output
}

// PrepareStages prepares the given rules of packages as Prepare does, in
// two stages: the rules second names (package, rule) are the second's, the
// others the first's.
func (c *Compiled) PrepareStages(ctx context.Context, packages []string, rules []string, second func(pkg, rule string) bool, timeout time.Duration) (*Stages, error) {
	if err := c.declared(packages); err != nil {
		return nil, err
	}
	s := &Stages{}
	_, s.outputs = c.bindingQuery(packages, rules, nil)
	query, outputs := c.bindingQuery(packages, rules, func(pkg, rule string) bool { return !second(pkg, rule) })
	var err error
	if s.First, err = c.prepareBindings(packages, query, outputs, timeout); err != nil {
		return nil, err
	}
	if query, outputs = c.bindingQuery(packages, rules, second); len(outputs) > 0 {
		if s.Second, err = c.prepareBindings(packages, query, outputs, timeout); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Partial is the first stage's evaluation.
type Partial struct {
	// Result is the first stage's rules' alone.
	Result   Result
	bindings map[string]any
}

// EvalFirst evaluates the first stage against input, as Query.Eval does.
func (s *Stages) EvalFirst(ctx context.Context, input ast.Value) (Partial, error) {
	bindings, err := s.First.evalBindings(ctx, input)
	if err != nil {
		return Partial{}, err
	}
	res, err := s.First.result(bindings)
	return Partial{Result: res, bindings: bindings}, err
}

// EvalSecond evaluates the second stage against input and returns the
// Result of both stages: the one query's, had it seen each rule's input.
func (s *Stages) EvalSecond(ctx context.Context, input ast.Value, first Partial) (Result, error) {
	if s.Second == nil {
		return first.Result, nil
	}
	bindings, err := s.Second.evalBindings(ctx, input)
	if err != nil {
		return Result{}, err
	}
	all := maps.Clone(first.bindings)
	maps.Copy(all, bindings)
	return resultOf(s.outputs, all)
}

// evalBindings is Eval without the Result: the bindings of one evaluation,
// planned when the query could be planned.
func (q *Query) evalBindings(ctx context.Context, input ast.Value) (map[string]any, error) {
	program, planErr := q.program()
	if planErr == nil && len(program.ContextBuiltins()) == 0 {
		return q.evalPlannedWithinBounds(ctx, program, input)
	}
	ctx, bounds := q.guarded(ctx)
	defer bounds.done()
	var bindings map[string]any
	var err error
	if planErr == nil {
		bindings, err = q.evalPlanned(ctx, program, input, planeval.Bounds{})
	} else {
		bindings, err = q.evalDirect(ctx, input, nil)
	}
	if err != nil {
		return nil, q.failure(ctx, err, bounds)
	}
	return bindings, nil
}
