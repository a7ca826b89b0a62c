package webhook

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/internal/decisionlog"
	"github.com/quantumnode/qn-admission/policies/window"
)

// BenchmarkDecisionLine is one refused realtime request's decision line,
// through slog's JSON handler and written directly.
func BenchmarkDecisionLine(b *testing.B) {
	l := decisionlog.Admission{Webhook: "validate", Allowed: false, Decision: "denied", Code: 403,
		Request: &decisionlog.Request{UID: "3f1c0c4e-6a7b-4d7e-9a52-000000000001", User: "qnload-user-17",
			Groups: []string{"edge-ops", "system:authenticated"}, Operation: "CREATE", Kind: "qn.dev/QuantumNode", Namespace: "edge", Name: "edge-sh-1"},
		Role: "realtime", Revision: "sha256:5f2c0d7e4b1a", Reasons: []string{`spec.services[1] (metrics) uses port 9100, which role "realtime" does not allow`},
		WindowStore: &decisionlog.WindowStore{OnStoreError: string(window.FailOpen), Latency: 212 * time.Microsecond},
		Latency:     431 * time.Microsecond, Remote: "10.0.0.7:51234"}
	b.Run("slog", func(b *testing.B) {
		h := slog.NewJSONHandler(io.Discard, nil)
		b.ReportAllocs()
		for b.Loop() {
			r := slog.NewRecord(time.Now(), slog.LevelInfo, decisionlog.AdmissionMessage, 0)
			r.AddAttrs(l.Attrs()...)
			_ = h.Handle(context.Background(), r)
		}
	})
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.Write(io.Discard, time.Now())
		}
	})
}
