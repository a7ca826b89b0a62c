package scalerspec

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/policies"
)

func scaler(query string, abort ...string) *qnv1alpha1.HorizontalQNScaler {
	s := &qnv1alpha1.HorizontalQNScaler{
		TypeMeta:   metav1.TypeMeta{APIVersion: "qn.dev/v1alpha1", Kind: qnv1alpha1.ScalerKind},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: qnv1alpha1.HorizontalQNScalerSpec{
			ScaleTargetRef: qnv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MaxReplicas:    10,
			QNMetric:       qnv1alpha1.QNMetric{Query: query},
			Thresholds:     qnv1alpha1.Thresholds{Upper: resource.MustParse("15"), Lower: resource.MustParse("5")},
		},
	}
	if len(abort) > 0 {
		stage := qnv1alpha1.Stage{Percent: 50, ObserveSeconds: 60}
		for _, q := range abort {
			stage.AbortWhen = append(stage.AbortWhen, qnv1alpha1.AbortCondition{Name: "c", Query: q, Operator: ">", Threshold: resource.MustParse("1")})
		}
		s.Spec.Stages = []qnv1alpha1.Stage{stage}
	}
	return s
}

func input(t *testing.T, op admissionv1.Operation, obj, old *qnv1alpha1.HorizontalQNScaler) *policies.Input {
	t.Helper()
	raw := func(o *qnv1alpha1.HorizontalQNScaler) runtime.RawExtension {
		if o == nil {
			return runtime.RawExtension{}
		}
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	return &policies.Input{Request: &admissionv1.AdmissionRequest{Operation: op, Object: raw(obj), OldObject: raw(old)}}
}

func TestQueriesMustParse(t *testing.T) {
	tests := map[string]struct {
		op       admissionv1.Operation
		obj, old *qnv1alpha1.HorizontalQNScaler
		want     string // empty: admitted
	}{
		"a query that parses is admitted": {op: "CREATE", obj: scaler(`sum(rate(http_requests_total{job="web"}[5m]))`)},
		"an experimental function is admitted (the server decides whether it runs)": {
			op: "CREATE", obj: scaler(`limitk(1, queue_depth)`)},
		"an unclosed parenthesis is refused with the parser's position": {op: "CREATE", obj: scaler(`sum(rate(x[5m])`),
			want: "HorizontalQNScaler web is invalid: spec.qnMetric.query: 1:16: parse error: unclosed left parenthesis"},
		"an unknown function is refused": {op: "CREATE", obj: scaler(`summ(x)`),
			want: `spec.qnMetric.query: 1:1: parse error: unknown function with name "summ"`},
		"a bad abort condition is refused with its path": {op: "CREATE", obj: scaler(`x`, `ok`, `rate(x[5m]`),
			want: "spec.stages[0].abortWhen[1].query: 1:11: parse error: unclosed left parenthesis"},
		"every bad query is named": {op: "CREATE", obj: scaler(`x +`, `y{`),
			want: "spec.qnMetric.query: 1:4: parse error: unexpected end of input; spec.stages[0].abortWhen[0].query: 1:3: parse error: unexpected end of input inside braces"},
		"an update that brings a bad query is refused": {op: "UPDATE", obj: scaler(`x +`), old: scaler(`x`),
			want: "spec.qnMetric.query: 1:4: parse error"},
		"an update that keeps a stored bad query is admitted (the scaler can still be paused or fixed)": {
			op: "UPDATE", obj: scaler(`x +`), old: scaler(`x +`)},
		"a delete is admitted whatever it holds": {op: "DELETE", old: scaler(`x +`)},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			d := Validator{}.Validate(context.Background(), input(t, tt.op, tt.obj, tt.old))
			if tt.want == "" {
				if !d.Allowed {
					t.Fatalf("refused: %s", d.Message)
				}
				return
			}
			if d.Allowed || d.Code != http.StatusUnprocessableEntity || d.Reason != metav1.StatusReasonInvalid {
				t.Fatalf("decision %+v, want 422 Invalid", d)
			}
			if !strings.Contains(d.Message, tt.want) {
				t.Errorf("message %q\ndoes not contain %q", d.Message, tt.want)
			}
		})
	}
}

func TestAnObjectThatIsNotAScalerIsABadRequest(t *testing.T) {
	in := &policies.Input{Request: &admissionv1.AdmissionRequest{Operation: "CREATE", Object: runtime.RawExtension{Raw: []byte(`{"spec": "no"}`)}}}
	d := Validator{}.Validate(context.Background(), in)
	if d.Allowed || d.Code != http.StatusBadRequest || !strings.Contains(d.Message, "request.object is not a HorizontalQNScaler") {
		t.Errorf("decision %+v", d)
	}
}

func TestMutateNeverPatches(t *testing.T) {
	d := Validator{}.Mutate(context.Background(), input(t, "CREATE", scaler(`x +`), nil))
	if !d.Allowed || d.Patch != nil {
		t.Errorf("decision %+v", d)
	}
}
