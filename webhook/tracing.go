package webhook

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/quantumnode/qn-admission/internal/tracing"
	"github.com/quantumnode/qn-admission/policies"
)

// traceContext continues the caller's trace: the API server sends a W3C
// traceparent header when its own tracing is on.
var traceContext propagation.TraceContext

// requestTrace is the root span of one admission request. With tracing off
// (no Tracer) it is empty and every method returns at once.
type requestTrace struct {
	ctx  context.Context
	span trace.Span
}

// startTrace starts the request's root span, "admission.validate" or
// "admission.mutate", as a child of the caller's trace context when the
// request carries one. Its context carries the span to the engine, whose
// steps (role, window, policy evaluation, each package) become children.
func (h *handler) startTrace(r *http.Request, webhook string) requestTrace {
	if h.opts.Tracer == nil {
		return requestTrace{ctx: r.Context()}
	}
	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := h.opts.Tracer.Start(ctx, "admission."+webhook, trace.WithSpanKind(trace.SpanKindServer))
	if !span.IsRecording() {
		// Not sampled: the engine sees no recording span and adds none.
		return requestTrace{ctx: ctx, span: span}
	}
	span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path))
	return requestTrace{ctx: ctx, span: span}
}

// step starts a child span of the root for one of the webhook's own steps
// (decode, encode); nil when the request is not recorded.
func (t requestTrace) step(name string) trace.Span {
	if t.span == nil || !t.span.IsRecording() {
		return nil
	}
	_, s := t.span.TracerProvider().Tracer(tracing.Scope).Start(t.ctx, name)
	return s
}

// end ends the root span with what was asked and what was answered.
func (t requestTrace) end(in *policies.Input, d policies.Decision, status int) {
	if t.span == nil {
		return
	}
	if t.span.IsRecording() {
		attrs := []attribute.KeyValue{
			attribute.Int("http.response.status_code", status),
			attribute.Bool("qn.allowed", d.Allowed),
			attribute.Int("qn.code", int(d.Code)),
			attribute.String("qn.decision", outcome(d)),
			attribute.String("qn.role", field(d.Role)),
			attribute.String("qn.policy.revision", d.Revision),
		}
		if in != nil && in.Request != nil {
			r := in.Request
			attrs = append(attrs,
				attribute.String("k8s.admission.uid", field(string(r.UID))),
				attribute.String("k8s.admission.operation", field(string(r.Operation))),
				attribute.String("k8s.admission.kind", field(r.Kind.Group+"/"+r.Kind.Kind)),
				attribute.String("k8s.namespace.name", field(r.Namespace)),
			)
		}
		t.span.SetAttributes(attrs...)
	}
	t.span.End()
}

func endStep(s trace.Span) {
	if s != nil {
		s.End()
	}
}
