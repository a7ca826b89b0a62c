package policies

import (
	"context"

	"github.com/open-policy-agent/opa/v1/ast"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/quantumnode/qn-admission/internal/tracing"
	"github.com/quantumnode/qn-admission/rego"
)

// evalQuery evaluates the role's query; when the evaluation span is being
// recorded it times each package (rego.Query.EvalTimed) into a child span
// of its own, stamped with the package's real start and end. Unrecorded
// requests take the plain Eval.
func evalQuery(ctx context.Context, span trace.Span, q *rego.Query, value ast.Value) (rego.Result, error) {
	if span == nil {
		return q.Eval(ctx, value)
	}
	res, times, err := q.EvalTimed(ctx, value)
	tracer := span.TracerProvider().Tracer(tracing.Scope)
	for _, pt := range times {
		_, s := tracer.Start(ctx, "policy "+pt.Package, trace.WithTimestamp(pt.Start),
			trace.WithAttributes(attribute.String("qn.policy.package", pt.Package)))
		s.End(trace.WithTimestamp(pt.End))
	}
	return res, err
}
