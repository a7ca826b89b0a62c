package webhook

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/quantumnode/qn-admission/internal/tracing"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
)

// tracedHandler is the bundled policies behind a handler whose spans an
// in-memory recorder keeps.
func tracedHandler(t *testing.T, sampler sdktrace.Sampler) (http.Handler, *tracetest.SpanRecorder) {
	t.Helper()
	set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder), sdktrace.WithSampler(sampler))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	h := NewHandler(policies.NewEngine(set, policies.EngineOptions{}), HandlerOptions{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Tracer: provider.Tracer(tracing.Scope),
	})
	return h, recorder
}

func postReview(h http.Handler, body string, header http.Header) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/validate", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// tree renders recorded spans as "parent > child" lines, sorted, so a test
// can say which spans hang under which.
func tree(spans []sdktrace.ReadOnlySpan) []string {
	names := map[trace.SpanID]string{}
	for _, s := range spans {
		names[s.SpanContext().SpanID()] = s.Name()
	}
	var lines []string
	for _, s := range spans {
		parent := names[s.Parent().SpanID()]
		if !s.Parent().IsValid() || parent == "" {
			parent = "-"
		}
		lines = append(lines, parent+" > "+s.Name())
	}
	slices.Sort(lines)
	return lines
}

func attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// One realtime review records the whole path: the webhook's own steps, the
// engine's (role, the window's one call, the evaluation) and one span per
// policy package the validate query evaluates, each inside the evaluation
// (qn.mutate.managedby has only patch rules: the validate path skips it).
func TestOneReviewRecordsItsSpanTree(t *testing.T) {
	h, recorder := tracedHandler(t, sdktrace.AlwaysSample())
	rec := postReview(h, fmt.Sprintf(realtimeReview, 42), nil)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"allowed":true`) {
		t.Fatalf("the review is not admitted: %d %s", rec.Code, rec.Body.String())
	}
	spans := recorder.Ended()
	want := []string{
		"- > admission.validate",
		"admission.validate > decode",
		"admission.validate > encode",
		"admission.validate > input",
		"admission.validate > policy evaluation",
		"admission.validate > role",
		"admission.validate > window",
		"policy evaluation > policy qn.quantumnode",
		"policy evaluation > policy qn.roles.realtime",
		"policy evaluation > policy qn.window",
	}
	if got := tree(spans); !slices.Equal(got, want) {
		t.Fatalf("span tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var root, eval, win sdktrace.ReadOnlySpan
	for _, s := range spans {
		switch s.Name() {
		case "admission.validate":
			root = s
		case "policy evaluation":
			eval = s
		case "window":
			win = s
		}
	}
	// The slot is taken before the policies run, and that one call
	// answers the window they read.
	if op, _ := attr(win, "qn.window.op"); op.AsString() != "take" || win.EndTime().After(eval.StartTime()) {
		t.Errorf("the window span (op %q, ends %s) is not the take before the evaluation (starts %s)", op.AsString(), win.EndTime(), eval.StartTime())
	}
	for key, want := range map[string]string{"k8s.admission.uid": "42", "qn.role": "realtime", "qn.decision": "allowed", "k8s.admission.operation": "CREATE"} {
		if v, ok := attr(root, key); !ok || v.String() != want {
			t.Errorf("root span %s = %q, want %q", key, v.String(), want)
		}
	}
	if root.SpanKind() != trace.SpanKindServer {
		t.Errorf("root span kind %s, want server", root.SpanKind())
	}
	for _, s := range spans {
		if !strings.HasPrefix(s.Name(), "policy qn.") {
			continue
		}
		if s.StartTime().Before(eval.StartTime()) || s.EndTime().After(eval.EndTime()) || !s.EndTime().After(s.StartTime()) {
			t.Errorf("%s (%s–%s) is not timed within the evaluation (%s–%s)", s.Name(), s.StartTime(), s.EndTime(), eval.StartTime(), eval.EndTime())
		}
	}
}

// The API server's trace context is continued: the root span joins its
// trace under its span, and its "not sampled" is obeyed.
func TestTheCallersTraceIsContinued(t *testing.T) {
	h, recorder := tracedHandler(t, sdktrace.ParentBased(sdktrace.NeverSample()))
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	postReview(h, fmt.Sprintf(realtimeReview, 1), http.Header{"Traceparent": {"00-" + traceID + "-" + parentID + "-01"}})
	var root sdktrace.ReadOnlySpan
	for _, s := range recorder.Ended() {
		if s.Name() == "admission.validate" {
			root = s
		}
	}
	if root == nil {
		t.Fatalf("a sampled caller's request records no root span (spans: %v)", tree(recorder.Ended()))
	}
	if root.SpanContext().TraceID().String() != traceID || root.Parent().SpanID().String() != parentID || !root.Parent().IsRemote() {
		t.Errorf("root span in trace %s under %s (remote %v), want trace %s under the caller's span %s",
			root.SpanContext().TraceID(), root.Parent().SpanID(), root.Parent().IsRemote(), traceID, parentID)
	}
	before := len(recorder.Ended())
	postReview(h, fmt.Sprintf(realtimeReview, 2), http.Header{"Traceparent": {"00-" + traceID + "-" + parentID + "-00"}})
	if n := len(recorder.Ended()) - before; n != 0 {
		t.Errorf("a caller that did not sample got %d spans recorded", n)
	}
	postReview(h, fmt.Sprintf(realtimeReview, 3), nil)
	if n := len(recorder.Ended()) - before; n != 0 {
		t.Errorf("without a caller and with a sampler that never samples, %d spans were recorded", n)
	}
}

// A refused request (not an AdmissionReview) still ends its root span, with
// the status it was answered.
func TestARefusedRequestEndsItsSpan(t *testing.T) {
	h, recorder := tracedHandler(t, sdktrace.AlwaysSample())
	if rec := postReview(h, `{"apiVersion":`, nil); rec.Code != http.StatusBadRequest {
		t.Fatalf("a truncated body: %d", rec.Code)
	}
	spans := recorder.Ended()
	if got := tree(spans); !slices.Equal(got, []string{"- > admission.validate", "admission.validate > decode"}) {
		t.Fatalf("span tree %v", got)
	}
	for _, s := range spans {
		if s.Name() != "admission.validate" {
			continue
		}
		if v, _ := attr(s, "http.response.status_code"); v.AsInt64() != http.StatusBadRequest {
			t.Errorf("root span status code %d, want 400", v.AsInt64())
		}
	}
}

// The mutating path records its own root and the packages with patch rules.
func TestAMutationRecordsItsPatchPackage(t *testing.T) {
	h, recorder := tracedHandler(t, sdktrace.AlwaysSample())
	req := httptest.NewRequest(http.MethodPost, "/mutate", strings.NewReader(fmt.Sprintf(realtimeReview, 7)))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"patch"`) {
		t.Fatalf("the mutation proposes no patch: %d %s", rec.Code, rec.Body.String())
	}
	got := tree(recorder.Ended())
	for _, want := range []string{"- > admission.mutate", "policy evaluation > policy qn.mutate.managedby"} {
		if !slices.Contains(got, want) {
			t.Errorf("span tree lacks %q:\n%s", want, strings.Join(got, "\n"))
		}
	}
}
