package scaler

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// What a status write waits for (the refresh) and what it does not.
func TestWhichStatusChangesAreWrittenAtOnce(t *testing.T) {
	base := func(value, reason string) *qnv1alpha1.HorizontalQNScalerStatus {
		return &qnv1alpha1.HorizontalQNScalerStatus{
			CurrentValue: value, CurrentReplicas: 4, DesiredReplicas: 4, MetricFailures: 0,
			LastDecision: &qnv1alpha1.ScalerDecision{Time: *at(0), Value: value, Action: qnv1alpha1.ActionHold, FromReplicas: 4, ToReplicas: 4, Reason: reason},
		}
	}
	fallback := &qnv1alpha1.Fallback{FailureThreshold: 3, Replicas: 5}
	tests := map[string]struct {
		before, after *qnv1alpha1.HorizontalQNScalerStatus
		fallback      *qnv1alpha1.Fallback
		atOnce        bool
	}{
		"the value moved inside the band: waits": {
			before: base("12.5", "value 12.5 within [lower 10, upper 15]: holding 4 replicas"),
			after:  base("13", "value 13 within [lower 10, upper 15]: holding 4 replicas"),
		},
		"the time left of a window counts down: waits": {
			before: base("3", "value 3 < lower 10 for 40s since it went below; a scale-down waits for the 300s stabilization window (260s left): holding 4 replicas"),
			after:  base("2", "value 2 < lower 10 for 55s since it went below; a scale-down waits for the 300s stabilization window (245s left): holding 4 replicas"),
		},
		"a hold of another kind (within the band, then the cooldown): at once": {
			before: base("12", "value 12 within [lower 10, upper 15]: holding 4 replicas"),
			after:  base("50", "value 50 > upper 15, but the scale-up cooldown of 60s runs until 2026-03-01T12:01:00Z (30s left): holding 4 replicas"),
			atOnce: true,
		},
		"a failure counted toward the fallback: at once": {
			before: base("", "x"), after: func() *qnv1alpha1.HorizontalQNScalerStatus { s := base("", "x"); s.MetricFailures = 2; return s }(),
			fallback: fallback, atOnce: true,
		},
		"failures past the fallback's threshold: waits": {
			before:   func() *qnv1alpha1.HorizontalQNScalerStatus { s := base("", "x"); s.MetricFailures = 3; return s }(),
			after:    func() *qnv1alpha1.HorizontalQNScalerStatus { s := base("", "x"); s.MetricFailures = 9; return s }(),
			fallback: fallback,
		},
		"a condition changed: at once": {
			before: base("1", "x"),
			after: func() *qnv1alpha1.HorizontalQNScalerStatus {
				s := base("1", "x")
				s.Conditions = []metav1.Condition{{Type: qnv1alpha1.ScalerMetricAvailable, Status: metav1.ConditionFalse}}
				return s
			}(),
			atOnce: true,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			same := equality.Semantic.DeepEqual(settled(tt.before, tt.fallback), settled(tt.after, tt.fallback))
			if same == tt.atOnce {
				t.Errorf("written at once = %v, want %v", !same, tt.atOnce)
			}
		})
	}
}
