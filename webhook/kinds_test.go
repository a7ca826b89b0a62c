package webhook

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
)

const scalerObject = `{"apiVersion":"qn.dev/v1alpha1","kind":"HorizontalQNScaler","metadata":{"name":"web","namespace":"edge"},"spec":{"qnMetric":{"query":"x"}}}`

func scalerReview(object string) string {
	r := strings.Replace(reviewBody("CREATE", object), `"kind":"QuantumNode"},`, `"kind":"HorizontalQNScaler"},`, 1)
	return strings.Replace(r, `"resource":"quantumnodes"`, `"resource":"horizontalqnscalers"`, 1)
}

// ByKind sends each kind to its judge, and a request cannot choose its
// judge by naming a kind its resource or object does not have.
func TestByKindRoutesEachKindToItsDecider(t *testing.T) {
	set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var scalerCalls int
	scalers := fakeDecider{validate: func(_ context.Context, in *policies.Input) policies.Decision {
		scalerCalls++
		return policies.Deny(422, "Invalid", "judged as a scaler: "+in.Facts.Name)
	}}
	h := NewHandler(ByKind{Default: policies.NewEngine(set, policies.EngineOptions{}), Kinds: map[schema.GroupKind]Decider{
		{Group: "qn.dev", Kind: "HorizontalQNScaler"}: scalers,
	}}, HandlerOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})

	tests := map[string]struct {
		body        string
		wantCode    int32
		wantMessage string
		wantCalls   int
	}{
		"a HorizontalQNScaler goes to its decider": {body: scalerReview(scalerObject), wantCode: 422, wantMessage: "judged as a scaler: edge-1", wantCalls: 1},
		"a QuantumNode goes to the policy engine": {
			body:     reviewBody("CREATE", strings.Replace(validObject, `[{"name":"mqtt","port":8883}]`, `[{"name":"a","port":8883},{"name":"b","port":8883}]`, 1)),
			wantCode: 403, wantMessage: "port 8883 is declared 2 times"},
		"a QuantumNode object sent as a HorizontalQNScaler is refused before any judge": {
			body: scalerReview(validObject), wantCode: 400,
			wantMessage: `request.object is apiVersion "qn.dev/v1alpha1" kind "QuantumNode", but request.kind says qn.dev/v1alpha1 HorizontalQNScaler`},
		"a HorizontalQNScaler object sent as a QuantumNode is refused before any judge": {
			body: reviewBody("CREATE", scalerObject), wantCode: 400,
			wantMessage: `request.object is apiVersion "qn.dev/v1alpha1" kind "HorizontalQNScaler", but request.kind says qn.dev/v1alpha1 QuantumNode`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			scalerCalls = 0
			a := post(t, h, "POST", "/validate", "application/json", tt.body)
			r := a.review.Response
			if r.Result == nil || r.Result.Code != tt.wantCode || !strings.Contains(r.Result.Message, tt.wantMessage) {
				t.Errorf("answer %s, want code %d with %q", a.raw, tt.wantCode, tt.wantMessage)
			}
			if scalerCalls != tt.wantCalls {
				t.Errorf("the scaler decider was called %d times, want %d", scalerCalls, tt.wantCalls)
			}
		})
	}
}

func TestByKindKeepsTheEnginesRolesKnown(t *testing.T) {
	set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	known := knownRoleOf(ByKind{Default: policies.NewEngine(set, policies.EngineOptions{})})
	if !known("realtime") || known("made-up") {
		t.Error("the role label of a ByKind handler does not follow the engine's role table")
	}
}
