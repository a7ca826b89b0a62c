package rego

import (
	"context"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	oparego "github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// Firing is one rule that held during a traced evaluation, with what it
// produced. It lets a person see which rule, at which file and line, put an
// entry into a deny, warn or patch set.
type Firing struct {
	// Package is the rule's package as written in roles.yaml ("qn.quantumnode").
	Package string
	// Rule is the rule's name ("deny", "violation", "judged").
	Rule string
	// File and Line locate the rule's head in its module.
	File string
	Line int
	// Entry is true for a rule that contributes one entry to a set
	// (deny contains msg if ...); Value is then the entry.
	Entry bool
	// Function is true for a rule with arguments (dns_label(name)); its
	// Value is not recorded.
	Function bool
	// Value is the entry or the rule's value, as JSON-like Go values; nil
	// for functions and for values that were not ground.
	Value any
}

// Location is "file:line" of the rule.
func (f Firing) Location() string { return fmt.Sprintf("%s:%d", f.File, f.Line) }

// EvalTraced is Eval with a tracer: the same prepared query and the same
// input, plus every event of the evaluation. It is slower than Eval and
// meant for explanations, never for the serving path.
func (q *Query) EvalTraced(ctx context.Context, input ast.Value) (Result, []*topdown.Event, error) {
	buf := topdown.NewBufferTracer()
	res, err := q.Eval(ctx, input, oparego.EvalQueryTracer(buf))
	return res, *buf, err
}

// Firings lists, in evaluation order, every rule that held in the events
// of a traced evaluation (each rule and value once).
func Firings(events []*topdown.Event) []Firing {
	var out []Firing
	seen := map[string]bool{}
	for _, e := range events {
		if e.Op != topdown.ExitOp {
			continue
		}
		r, ok := e.Node.(*ast.Rule)
		if !ok || r.Module == nil || r.Location == nil {
			continue
		}
		f := Firing{
			Package:  PackageName(r.Module),
			Rule:     r.Head.Ref().String(),
			File:     r.Location.File,
			Line:     r.Location.Row,
			Function: len(r.Head.Args) > 0,
		}
		var term *ast.Term
		switch {
		case f.Function:
		case r.Head.Key != nil && r.Head.Value == nil:
			f.Entry, term = true, r.Head.Key
		default:
			term = r.Head.Value
		}
		key := f.Location() + "\x00" + f.Rule
		if term != nil {
			if v := plug(term, e.Locals); v != nil {
				key += "\x00" + v.String()
				f.Value, _ = ast.JSON(v)
			}
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, f)
	}
	return out
}

// plug replaces the variables of a rule head with their bindings at the
// rule's exit; nil when the result is not ground.
func plug(term *ast.Term, locals *ast.ValueMap) ast.Value {
	if locals == nil {
		if term.IsGround() {
			return term.Value
		}
		return nil
	}
	v, err := ast.TransformVars(term.Value, func(x ast.Var) (ast.Value, error) {
		if b := locals.Get(x); b != nil {
			return b, nil
		}
		return x, nil
	})
	if err != nil {
		return nil
	}
	val, ok := v.(ast.Value)
	if !ok || !ast.IsConstant(val) {
		return nil
	}
	return val
}
