package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/window"
)

// The direct decision line is the line slog's JSON handler writes for the
// same attributes, byte for byte: whoever reads the decision log cannot
// tell which path wrote it.
func TestDecisionLineIsSlogJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	texts := []string{"", "validate", "a<b>&c", "\b\f\n\r\t\x01\x1f\x7f", "\xff\xfe", "\u2028\u2029", "é ✓ 😀",
		`"quoted" \back\slash`, strings.Repeat("long message ", 40), "realtime", "10.0.0.7:51234"}
	text := func() string { return texts[rng.IntN(len(texts))] }
	list := func() []string {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return []string{}
		}
		out := make([]string, 1+rng.IntN(3))
		for i := range out {
			out[i] = text()
		}
		return out
	}
	zones := []*time.Location{time.UTC, time.FixedZone("east", 8*3600), time.FixedZone("west", -(3*3600 + 30*60))}
	for i := range 2000 {
		l := decisionLine{webhook: text(), allowed: rng.IntN(2) == 0, outcome: text(), code: rng.IntN(600) - 50,
			role: text(), revision: text(), patchOps: rng.IntN(10), latency: time.Duration(rng.Int64N(int64(10 * time.Second))), remote: text()}
		if rng.IntN(2) == 0 {
			l.exempt = text()
		}
		if rng.IntN(4) > 0 {
			l.request = &policies.RequestLogFields{UID: text(), User: text(), Groups: list(), Operation: text(), Kind: text(),
				Namespace: text(), Name: text(), DryRun: rng.IntN(2) == 0}
		}
		l.reasons, l.wouldDeny, l.warnings = list(), list(), list()
		if rng.IntN(2) == 0 {
			l.window = &policies.WindowState{Key: text(), Count: rng.IntN(200), Limit: rng.IntN(200)}
		}
		if rng.IntN(2) == 0 {
			l.store = &policies.WindowStoreReport{OnStoreError: window.OnStoreError(text()), Latency: time.Duration(rng.Int64N(int64(time.Second)))}
			if rng.IntN(2) == 0 {
				l.store.Error, l.store.CountedLocally = text(), rng.IntN(2) == 0
			}
		}
		at := time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))])
		if i%7 == 0 {
			at = at.Truncate(time.Second) // no fraction: RFC3339Nano drops it
		}

		var want bytes.Buffer
		r := slog.NewRecord(at, slog.LevelInfo, decisionMessage, 0)
		r.AddAttrs(l.attrs()...)
		if err := slog.NewJSONHandler(&want, nil).Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if got := l.appendJSON(nil, at); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("line %d:\ndirect %s\nslog   %s", i, got, want.Bytes())
		}
	}
}

// Numbers with a fraction are written as json.Marshal writes them, which
// is what slog calls for them.
func TestSlogFloatIsJSONMarshal(t *testing.T) {
	for _, v := range []float64{0, 1, -1, 0.001, 123.456, 1e-6, 9.99e-7, 1e-7, 2.5e-9, -3e-12, 1e20, 1e21, 1.5e300, 5e-324, math.MaxFloat64} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		o := jsonObject{quote: slogStrings}
		o.float("x", v)
		if got := string(o.end()); got != `{"x":`+string(want)+`}` {
			t.Errorf("%v: %s, want %s", v, got, want)
		}
	}
}

// BenchmarkDecisionLine is one refused realtime request's decision line,
// through slog's JSON handler and written directly.
func BenchmarkDecisionLine(b *testing.B) {
	l := decisionLine{webhook: "validate", allowed: false, outcome: "denied", code: 403,
		request: &policies.RequestLogFields{UID: "3f1c0c4e-6a7b-4d7e-9a52-000000000001", User: "qnload-user-17",
			Groups: []string{"edge-ops", "system:authenticated"}, Operation: "CREATE", Kind: "qn.dev/QuantumNode", Namespace: "edge", Name: "edge-sh-1"},
		role: "realtime", revision: "sha256:5f2c0d7e4b1a", reasons: []string{`spec.services[1] (metrics) uses port 9100, which role "realtime" does not allow`},
		store:   &policies.WindowStoreReport{OnStoreError: window.FailOpen, Latency: 212 * time.Microsecond},
		latency: 431 * time.Microsecond, remote: "10.0.0.7:51234"}
	b.Run("slog", func(b *testing.B) {
		h := slog.NewJSONHandler(io.Discard, nil)
		b.ReportAllocs()
		for b.Loop() {
			r := slog.NewRecord(time.Now(), slog.LevelInfo, decisionMessage, 0)
			r.AddAttrs(l.attrs()...)
			_ = h.Handle(context.Background(), r)
		}
	})
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			writeDecisionLine(io.Discard, &l, time.Now())
		}
	})
}
