package decisionlog

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// The direct decision line is the line slog's JSON handler writes for the
// same attributes, byte for byte: whoever reads the decision log cannot
// tell which path wrote it.
func TestAdmissionIsSlogJSON(t *testing.T) {
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
		l := Admission{Webhook: text(), Allowed: rng.IntN(2) == 0, Decision: text(), Code: rng.IntN(600) - 50,
			Role: text(), Revision: text(), PatchOps: rng.IntN(10), Latency: time.Duration(rng.Int64N(int64(10 * time.Second))), Remote: text()}
		if rng.IntN(2) == 0 {
			l.Exempt = text()
		}
		if rng.IntN(4) > 0 {
			l.Request = &Request{UID: text(), User: text(), Groups: list(), Operation: text(), Kind: text(),
				Namespace: text(), Name: text(), DryRun: rng.IntN(2) == 0}
		}
		l.Reasons, l.WouldDeny, l.Warnings = list(), list(), list()
		if rng.IntN(2) == 0 {
			l.Window = &Window{Key: text(), Count: rng.IntN(200), Limit: rng.IntN(200)}
		}
		if rng.IntN(2) == 0 {
			l.WindowStore = &WindowStore{OnStoreError: text(), Latency: time.Duration(rng.Int64N(int64(time.Second)))}
			if rng.IntN(2) == 0 {
				l.WindowStore.Error, l.WindowStore.CountedLocally = text(), rng.IntN(2) == 0
			}
		}
		at := time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))])
		if i%7 == 0 {
			at = at.Truncate(time.Second) // no fraction: RFC3339Nano drops it
		}

		var want bytes.Buffer
		r := slog.NewRecord(at, slog.LevelInfo, AdmissionMessage, 0)
		r.AddAttrs(l.Attrs()...)
		if err := slog.NewJSONHandler(&want, nil).Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if got := l.AppendJSON(nil, at); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("line %d:\ndirect %s\nslog   %s", i, got, want.Bytes())
		}
	}
}

// A disagreement reads back as it was written, through slog's JSON
// handler.
func TestDisagreementReadsBack(t *testing.T) {
	d := Disagreement{Webhook: "validate", Request: Request{UID: "u1", User: "alice", Groups: []string{"edge"}, Operation: "CREATE",
		Kind: "qn.dev/QuantumNode", Namespace: "edge", Name: "ssh-1"}, RequestTime: "2026-01-02T03:04:05.5Z", From: "allowed", To: "denied",
		Served: Answer{Allowed: true, Code: 200, Revision: "git:1"},
		Shadow: Answer{Code: 403, Revision: "git:2", Message: "no", Denials: []Finding{{Source: "qn.ssh", Message: "no", Enforcement: "deny"}}}}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).LogAttrs(context.Background(), slog.LevelInfo, ShadowMessage, d.Attrs()...)
	e, ok := Read(buf.Bytes())
	if !ok || e.Msg != ShadowMessage {
		t.Fatalf("read %v %+v from %s", ok, e, buf.Bytes())
	}
	if e.Disagreement.Webhook != d.Webhook || e.Name != d.Name || e.Groups[0] != "edge" || e.Shadow.Denials[0] != d.Shadow.Denials[0] || e.Served.Revision != "git:1" {
		t.Errorf("read %+v, wrote %+v", e.Disagreement, d)
	}
	if want := time.Date(2026, 1, 2, 3, 4, 5, 5e8, time.UTC); !e.RequestAt().Equal(want) {
		t.Errorf("RequestAt %v, want %v", e.RequestAt(), want)
	}
	if _, ok := Read([]byte(`{"level":"INFO"}`)); ok {
		t.Error("a line without msg read as a decision line")
	}
}
