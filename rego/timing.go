package rego

import (
	"context"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// PackageTime is when one package's rules were evaluated within a query.
type PackageTime struct {
	Package    string
	Start, End time.Time
}

// EvalTimed is Eval that also says how long each package took: the query
// binds each package's rules in turn ("d0 := data.<pkg>.deny; ..."), so a
// package's time runs from its first top-level expression to the next
// package's. It evaluates through a topdown tracer, which costs more than
// Eval: meant for requests whose trace is recorded, never the default path.
// The answer is Eval's.
func (q *Query) EvalTimed(ctx context.Context, input ast.Value) (Result, []PackageTime, error) {
	ctx, bounds := q.guarded(ctx)
	defer bounds.done()
	timer := &packageTimer{}
	bindings, err := q.evalDirect(ctx, input, timer)
	timer.close(time.Now())
	if err != nil {
		return Result{}, timer.times, q.failure(ctx, err, bounds)
	}
	res, err := q.result(bindings)
	return res, timer.times, err
}

// packageTimer is a topdown tracer that stamps the top-level expressions
// of the root query with the package their rule reference names.
type packageTimer struct {
	root    uint64
	started bool
	times   []PackageTime
}

func (t *packageTimer) Enabled() bool { return true }

func (t *packageTimer) Config() topdown.TraceConfig { return topdown.TraceConfig{} }

func (t *packageTimer) TraceEvent(e topdown.Event) {
	if !t.started {
		// The first event enters the root query.
		t.root, t.started = e.QueryID, true
	}
	if e.Op != topdown.EvalOp || e.QueryID != t.root {
		return
	}
	expr, ok := e.Node.(*ast.Expr)
	if !ok {
		return
	}
	pkg := boundPackage(expr)
	if pkg == "" {
		return
	}
	now := time.Now()
	if n := len(t.times); n > 0 {
		if t.times[n-1].Package == pkg {
			return
		}
		t.times[n-1].End = now
	}
	t.times = append(t.times, PackageTime{Package: pkg, Start: now})
}

// close ends the last package's time at the end of the evaluation.
func (t *packageTimer) close(end time.Time) {
	if n := len(t.times); n > 0 && t.times[n-1].End.IsZero() {
		t.times[n-1].End = end
	}
}

// boundPackage returns <pkg> of an expression "v = data.<pkg>.<rule>", or "".
func boundPackage(expr *ast.Expr) string {
	terms, ok := expr.Terms.([]*ast.Term)
	if !ok || len(terms) != 3 {
		return ""
	}
	ref, ok := terms[2].Value.(ast.Ref)
	if !ok || len(ref) < 3 || !ref[0].Equal(ast.DefaultRootDocument) {
		return ""
	}
	parts := make([]string, 0, len(ref)-2)
	for _, t := range ref[1 : len(ref)-1] {
		s, ok := t.Value.(ast.String)
		if !ok {
			return ""
		}
		parts = append(parts, string(s))
	}
	return strings.Join(parts, ".")
}
