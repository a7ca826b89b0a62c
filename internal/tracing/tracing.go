// Package tracing holds the two helpers every traced step uses: a child
// span that exists only while its parent is recorded, and its end. With
// tracing off (no span in the context, or one not sampled) a step costs
// one context lookup and allocates nothing.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of qn-admission's spans.
const Scope = "github.com/quantumnode/qn-admission"

// Child starts a span under the span in ctx, from that span's own
// provider, only when that span is being recorded; otherwise it returns
// ctx and a nil span. End it with End. Attributes are set by the caller
// under `if span != nil`: a variadic argument here would be allocated on
// every call, traced or not.
func Child(ctx context.Context, name string) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, nil
	}
	return parent.TracerProvider().Tracer(Scope).Start(ctx, name)
}

// End ends s (nil: not traced), recording err as its status.
func End(s trace.Span, err error) {
	if s == nil {
		return
	}
	if err != nil {
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}
