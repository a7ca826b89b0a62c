package scaler

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// at is t0 plus some seconds, as a status time.
func at(sec int) *metav1.Time {
	t := metav1.NewTime(t0.Add(time.Duration(sec) * time.Second))
	return &t
}

// baseSpec: 1..10 replicas, thresholds 10 and 15, steps +2/-1, a 60 s
// scale-up cooldown and a 300 s stabilization window (the defaults).
func baseSpec() *qnv1alpha1.HorizontalQNScalerSpec {
	return WithDefaults(&qnv1alpha1.HorizontalQNScalerSpec{
		ScaleTargetRef: qnv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
		MaxReplicas:    10,
		QNMetric:       qnv1alpha1.QNMetric{Query: "queue"},
		Thresholds:     qnv1alpha1.Thresholds{Upper: resource.MustParse("15"), Lower: resource.MustParse("10")},
	})
}

var errDown = errors.New(`query "queue": connection refused`)

func stagedSpec() *qnv1alpha1.HorizontalQNScalerSpec {
	s := baseSpec()
	s.ScaleUpStep = 8
	s.MaxReplicas = 20
	s.Stages = []qnv1alpha1.Stage{
		{Percent: 25, ObserveSeconds: 120, AbortWhen: []qnv1alpha1.AbortCondition{
			{Name: "error-ratio", Query: "errors", Operator: qnv1alpha1.AbortAbove, Threshold: resource.MustParse("0.005")}}},
		{Percent: 50, ObserveSeconds: 180},
	}
	return s
}

func TestDecide(t *testing.T) {
	type want struct {
		action   qnv1alpha1.ScalerAction
		replicas int32
		reason   string // substring; exact when it starts with "="
		limit    Limit
		disabled string
		next     func(t *testing.T, m Memory)
	}
	tests := map[string]struct {
		spec     func(*qnv1alpha1.HorizontalQNScalerSpec)
		status   qnv1alpha1.HorizontalQNScalerStatus
		now      int // seconds after t0
		replicas int32
		metric   Reading
		abort    []ConditionReading
		paused   bool
		want     want
	}{
		// Hysteresis.
		"a value above upper adds scaleUpStep replicas, and says so in a sentence": {
			replicas: 4, metric: Reading{Value: 17.2, Text: "17.2"},
			want: want{action: qnv1alpha1.ActionScaleUp, replicas: 6, reason: "=value 17.2 > upper 15: +2 replicas (4 → 6)",
				next: func(t *testing.T, m Memory) {
					if !m.LastScaleTime.Equal(at(0)) || !m.LastScaleUpTime.Equal(at(0)) {
						t.Errorf("scale times = %v, %v; want both now", m.LastScaleTime, m.LastScaleUpTime)
					}
				}},
		},
		"a named figure is called by its qnMetric.name": {
			spec:     func(s *qnv1alpha1.HorizontalQNScalerSpec) { s.QNMetric.Name = "http_queue_length" },
			replicas: 4, metric: Read(17.2),
			want: want{action: qnv1alpha1.ActionScaleUp, replicas: 6, reason: "=http_queue_length 17.2 > upper 15: +2 replicas (4 → 6)"},
		},
		"a named figure that cannot be read is named": {
			spec:     func(s *qnv1alpha1.HorizontalQNScalerSpec) { s.QNMetric.Name = "http_queue_length" },
			replicas: 4, metric: Reading{Err: errDown},
			want: want{action: qnv1alpha1.ActionHold, replicas: 4, reason: "=metric http_queue_length unavailable (query \"queue\": connection refused): holding 4 replicas (no fallback set)"},
		},
		"float noise is not shown: 0.1+0.2 reads 0.3": {
			spec: func(s *qnv1alpha1.HorizontalQNScalerSpec) {
				s.Thresholds = qnv1alpha1.Thresholds{Upper: resource.MustParse("0.5"), Lower: resource.MustParse("0.2")}
			},
			replicas: 4, metric: Read(noisy(0.1, 0.2)),
			want: want{action: qnv1alpha1.ActionHold, replicas: 4, reason: "=value 0.3 within [lower 0.2, upper 0.5]: holding 4 replicas"},
		},
		"a value equal to upper holds: only above it scales up": {
			replicas: 4, metric: Read(15), want: want{action: qnv1alpha1.ActionHold, replicas: 4, reason: "=value 15 within [lower 10, upper 15]: holding 4 replicas"},
		},
		"a value inside the band holds": {
			replicas: 4, metric: Read(12.5), want: want{action: qnv1alpha1.ActionHold, replicas: 4, reason: "within [lower 10, upper 15]"},
		},
		"a value equal to lower holds: only below it scales down": {
			replicas: 4, metric: Read(10), status: qnv1alpha1.HorizontalQNScalerStatus{BelowLowerSince: at(-1000)},
			want: want{action: qnv1alpha1.ActionHold, replicas: 4, next: func(t *testing.T, m Memory) {
				if m.BelowLowerSince != nil {
					t.Errorf("belowLowerSince = %v, want cleared once the value is back at lower", m.BelowLowerSince)
				}
			}},
		},

		// Steps and bounds.
		"scaleUpStep sets the size of a scale-up": {
			spec: func(s *qnv1alpha1.HorizontalQNScalerSpec) { s.ScaleUpStep = 3 }, replicas: 4, metric: Read(100),
			want: want{action: qnv1alpha1.ActionScaleUp, replicas: 7, reason: "+3 replicas (4 → 7)"},
		},
		"a scale-up that would pass maxReplicas stops there and reports the limit": {
			replicas: 9, metric: Read(100),
			want: want{action: qnv1alpha1.ActionScaleUp, replicas: 10, limit: LimitTooMany, reason: "+1 replica (9 → 10), held at maxReplicas 10"},
		},
		"at maxReplicas a high value holds and reports the limit": {
			replicas: 10, metric: Read(100),
			want: want{action: qnv1alpha1.ActionHold, replicas: 10, limit: LimitTooMany, reason: "at maxReplicas 10"},
		},
		"at minReplicas a low value holds and reports the limit": {
			spec: func(s *qnv1alpha1.HorizontalQNScalerSpec) { s.MinReplicas = 2 }, replicas: 2, metric: Read(1),
			status: qnv1alpha1.HorizontalQNScalerStatus{BelowLowerSince: at(-1000)},
			want:   want{action: qnv1alpha1.ActionHold, replicas: 2, limit: LimitTooFew, reason: "at minReplicas 2"},
		},
		"a scale-down that would pass minReplicas stops there": {
			spec:     func(s *qnv1alpha1.HorizontalQNScalerSpec) { s.MinReplicas = 2; s.ScaleDownStep = 3 },
			replicas: 4, metric: Read(1), status: qnv1alpha1.HorizontalQNScalerStatus{BelowLowerSince: at(-1000)},
			want: want{action: qnv1alpha1.ActionScaleDown, replicas: 2, limit: LimitTooFew, reason: "-2 replicas (4 → 2), held at minReplicas 2"},
		},
		"a target below minReplicas is raised to it at once, whatever the value": {
			spec: func(s *qnv1alpha1.HorizontalQNScalerSpec) { s.MinReplicas = 3 }, replicas: 1, metric: Read(1),
			status: qnv1alpha1.HorizontalQNScalerStatus{LastScaleUpTime: at(-1)},
			want:   want{action: qnv1alpha1.ActionScaleUp, replicas: 3, reason: "=1 replicas is below minReplicas 3: 1 → 3"},
		},
		"a target above maxReplicas is lowered to it at once, without waiting for a window": {
			replicas: 14, metric: Read(12), status: qnv1alpha1.HorizontalQNScalerStatus{LastScaleTime: at(-1)},
			want: want{action: qnv1alpha1.ActionScaleDown, replicas: 10, reason: "14 replicas is above maxReplicas 10: 14 → 10"},
		},

		// Scale-up cooldown.
		"within the scale-up cooldown a high value holds and says until when": {
			replicas: 6, now: 30, metric: Read(20), status: qnv1alpha1.HorizontalQNScalerStatus{LastScaleUpTime: at(0), LastScaleTime: at(0)},
			want: want{action: qnv1alpha1.ActionHold, replicas: 6, reason: "scale-up cooldown of 60s runs until 2026-03-01T12:01:00Z (30s left)"},
		},
		"once the cooldown has passed the next scale-up happens": {
			replicas: 6, now: 60, metric: Read(20), status: qnv1alpha1.HorizontalQNScalerStatus{LastScaleUpTime: at(0), LastScaleTime: at(0)},
			want: want{action: qnv1alpha1.ActionScaleUp, replicas: 8},
		},
		"a cooldown of 0 scales up at every poll": {
			spec:     func(s *qnv1alpha1.HorizontalQNScalerSpec) { s.ScaleUpCooldownSeconds = ptr(int32(0)) },
			replicas: 6, now: 1, metric: Read(20), status: qnv1alpha1.HorizontalQNScalerStatus{LastScaleUpTime: at(0)},
			want: want{action: qnv1alpha1.ActionScaleUp, replicas: 8},
		},
		"a recent scale-down does not delay a scale-up": {
			replicas: 4, now: 5, metric: Read(20), status: qnv1alpha1.HorizontalQNScalerStatus{LastScaleTime: at(0), LastScaleUpTime: at(-500)},
			want: want{action: qnv1alpha1.ActionScaleUp, replicas: 6},
		},

		// Scale-down stabilization.
		"the first poll below lower starts the stabilization window and holds": {
			replicas: 4, now: 0, metric: Read(3),
			want: want{action: qnv1alpha1.ActionHold, replicas: 4, reason: "value 3 < lower 10 for 0s since it went below; a scale-down waits for the 300s stabilization window (300s left)",
				next: func(t *testing.T, m Memory) {
					if !m.BelowLowerSince.Equal(at(0)) {
						t.Errorf("belowLowerSince = %v, want now", m.BelowLowerSince)
					}
				}},
		},
		"below lower for less than the window holds": {
			replicas: 4, now: 299, metric: Read(3), status: qnv1alpha1.HorizontalQNScalerStatus{BelowLowerSince: at(0)},
			want: want{action: qnv1alpha1.ActionHold, replicas: 4, reason: "(1s left)", next: func(t *testing.T, m Memory) {
				if !m.BelowLowerSince.Equal(at(0)) {
					t.Errorf("belowLowerSince = %v, want it kept from the first poll below", m.BelowLowerSince)
				}
			}},
		},
		"below lower for the whole window removes scaleDownStep replicas": {
			replicas: 4, now: 300, metric: Read(3), status: qnv1alpha1.HorizontalQNScalerStatus{BelowLowerSince: at(0)},
			want: want{action: qnv1alpha1.ActionScaleDown, replicas: 3, reason: "=value 3 < lower 10 for 300s: -1 replica (4 → 3)",
				next: func(t *testing.T, m Memory) {
					if !m.LastScaleTime.Equal(at(300)) || m.LastScaleUpTime != nil {
						t.Errorf("scale times = %v, %v; want a scale time, no scale-up time", m.LastScaleTime, m.LastScaleUpTime)
					}
				}},
		},
		"after a scale-down the next one waits a whole window again": {
			replicas: 3, now: 400, metric: Read(3), status: qnv1alpha1.HorizontalQNScalerStatus{BelowLowerSince: at(0), LastScaleTime: at(300)},
			want: want{action: qnv1alpha1.ActionHold, replicas: 3, reason: "for 100s since the last scaling; a scale-down waits for the 300s stabilization window (200s left)"},
		},
		"a scale-up restarts the window for scale-downs (the window holds at every replica count)": {
			replicas: 6, now: 100, metric: Read(3), status: qnv1alpha1.HorizontalQNScalerStatus{BelowLowerSince: at(-1000), LastScaleTime: at(0), LastScaleUpTime: at(0)},
			want: want{action: qnv1alpha1.ActionHold, replicas: 6, reason: "(200s left)"},
		},
		"a value back above lower resets the window": {
			replicas: 4, now: 290, metric: Read(11), status: qnv1alpha1.HorizontalQNScalerStatus{BelowLowerSince: at(0)},
			want: want{action: qnv1alpha1.ActionHold, replicas: 4, next: func(t *testing.T, m Memory) {
				if m.BelowLowerSince != nil {
					t.Errorf("belowLowerSince = %v, want cleared", m.BelowLowerSince)
				}
			}},
		},
		"a window of 0 scales down at the first poll below lower": {
			spec:     func(s *qnv1alpha1.HorizontalQNScalerSpec) { s.StabilizationWindowSeconds = ptr(int32(0)) },
			replicas: 4, metric: Read(3), want: want{action: qnv1alpha1.ActionScaleDown, replicas: 3},
		},
		"scaleDownStep sets the size of a scale-down": {
			spec:     func(s *qnv1alpha1.HorizontalQNScalerSpec) { s.ScaleDownStep = 2 },
			replicas: 6, now: 300, metric: Read(3), status: qnv1alpha1.HorizontalQNScalerStatus{BelowLowerSince: at(0)},
			want: want{action: qnv1alpha1.ActionScaleDown, replicas: 4, reason: "-2 replicas (6 → 4)"},
		},

		// An unreadable metric, and the fallback.
		"an unreadable metric without a fallback holds and counts the failure": {
			replicas: 4, metric: Reading{Err: errDown}, status: qnv1alpha1.HorizontalQNScalerStatus{MetricFailures: 7, BelowLowerSince: at(-5)},
			want: want{action: qnv1alpha1.ActionHold, replicas: 4, reason: "metric unavailable (query \"queue\": connection refused): holding 4 replicas (no fallback set)",
				next: func(t *testing.T, m Memory) {
					if m.MetricFailures != 8 || m.BelowLowerSince != nil {
						t.Errorf("failures %d, belowLowerSince %v; want 8 and cleared", m.MetricFailures, m.BelowLowerSince)
					}
				}},
		},
		"an unreadable metric below the failure threshold holds and says when the fallback comes": {
			spec: func(s *qnv1alpha1.HorizontalQNScalerSpec) {
				s.Fallback = &qnv1alpha1.Fallback{FailureThreshold: 3, Replicas: 5}
			},
			replicas: 4, metric: Reading{Err: errDown}, status: qnv1alpha1.HorizontalQNScalerStatus{MetricFailures: 1},
			want: want{action: qnv1alpha1.ActionHold, replicas: 4, reason: "fallback to 5 after 3 failed polls in a row (2 so far)"},
		},
		"the failure that reaches the threshold applies the fallback replicas at once": {
			spec: func(s *qnv1alpha1.HorizontalQNScalerSpec) {
				s.Fallback = &qnv1alpha1.Fallback{FailureThreshold: 3, Replicas: 5}
			},
			replicas: 8, metric: Reading{Err: errDown}, status: qnv1alpha1.HorizontalQNScalerStatus{MetricFailures: 2, LastScaleTime: at(-1)},
			want: want{action: qnv1alpha1.ActionFallback, replicas: 5, reason: "metric unavailable for 3 polls in a row (query \"queue\": connection refused): fallback to 5 replicas (8 → 5)"},
		},
		"a fallback already in place is not written again": {
			spec: func(s *qnv1alpha1.HorizontalQNScalerSpec) {
				s.Fallback = &qnv1alpha1.Fallback{FailureThreshold: 3, Replicas: 5}
			},
			replicas: 5, metric: Reading{Err: errDown}, status: qnv1alpha1.HorizontalQNScalerStatus{MetricFailures: 9, LastScaleTime: at(-100)},
			want: want{action: qnv1alpha1.ActionFallback, replicas: 5, next: func(t *testing.T, m Memory) {
				if !m.LastScaleTime.Equal(at(-100)) {
					t.Errorf("lastScaleTime = %v, want unchanged without a write", m.LastScaleTime)
				}
			}},
		},
		"a readable metric after failures resets the count and decides again": {
			spec: func(s *qnv1alpha1.HorizontalQNScalerSpec) {
				s.Fallback = &qnv1alpha1.Fallback{FailureThreshold: 3, Replicas: 5}
			},
			replicas: 5, metric: Read(20), status: qnv1alpha1.HorizontalQNScalerStatus{MetricFailures: 9},
			want: want{action: qnv1alpha1.ActionScaleUp, replicas: 7, next: func(t *testing.T, m Memory) {
				if m.MetricFailures != 0 {
					t.Errorf("failures = %d, want 0", m.MetricFailures)
				}
			}},
		},

		// Pause and a target at zero.
		"a paused scaler decides nothing and remembers nothing new": {
			paused: true, replicas: 4, metric: Read(100), status: qnv1alpha1.HorizontalQNScalerStatus{MetricFailures: 2, BelowLowerSince: at(-3)},
			want: want{action: qnv1alpha1.ActionNone, replicas: 4, disabled: qnv1alpha1.ScalerReasonPaused, reason: "paused by annotation", next: func(t *testing.T, m Memory) {
				if m.MetricFailures != 2 || !m.BelowLowerSince.Equal(at(-3)) {
					t.Errorf("memory changed while paused: %+v", m)
				}
			}},
		},
		"a target at 0 replicas is left alone, as the HorizontalPodAutoscaler does": {
			replicas: 0, metric: Read(100),
			want: want{action: qnv1alpha1.ActionNone, replicas: 0, disabled: "ScalingDisabled", reason: "the target has 0 replicas"},
		},

		// Staged scale-ups: 4 → 12 in stages of 25 % (6) and 50 % (8), then the rest.
		"a staged scale-up starts with its first stage": {
			spec: func(s *qnv1alpha1.HorizontalQNScalerSpec) { *s = *stagedSpec() }, replicas: 4, metric: Read(20),
			want: want{action: qnv1alpha1.ActionScaleUp, replicas: 6, reason: "=value 20 > upper 15: +8 replicas in stages (4 → 12); stage 1 of 2: 4 → 6, observed 120s",
				next: func(t *testing.T, m Memory) {
					want := qnv1alpha1.ScalerStageStatus{Index: 1, Count: 2, BaseReplicas: 4, TargetReplicas: 12, Replicas: 6, StartTime: *at(0)}
					if m.Stage == nil || *m.Stage != want {
						t.Errorf("stage = %+v, want %+v", m.Stage, want)
					}
				}},
		},
		"a stage is observed for its time while its conditions pass": {
			spec:     func(s *qnv1alpha1.HorizontalQNScalerSpec) { *s = *stagedSpec() },
			status:   qnv1alpha1.HorizontalQNScalerStatus{Stage: &qnv1alpha1.ScalerStageStatus{Index: 1, Count: 2, BaseReplicas: 4, TargetReplicas: 12, Replicas: 6, StartTime: *at(0)}},
			replicas: 6, now: 60, metric: Read(20), abort: []ConditionReading{errorRatio(0.001)},
			want: want{action: qnv1alpha1.ActionHold, replicas: 6, reason: "=stage 1 of 2 observing 6 replicas: 60s of 120s; error-ratio 0.001 ≤ 0.005"},
		},
		"an abort condition that holds returns the target to the replicas before the scale-up and starts the cooldown": {
			spec:     func(s *qnv1alpha1.HorizontalQNScalerSpec) { *s = *stagedSpec() },
			status:   qnv1alpha1.HorizontalQNScalerStatus{Stage: &qnv1alpha1.ScalerStageStatus{Index: 1, Count: 2, BaseReplicas: 4, TargetReplicas: 12, Replicas: 6, StartTime: *at(0)}, LastScaleUpTime: at(0)},
			replicas: 6, now: 30, metric: Read(20), abort: []ConditionReading{errorRatio(0.0071)},
			want: want{action: qnv1alpha1.ActionStageAbort, replicas: 4,
				reason: "=stage 1 of 2 aborted: error-ratio 0.0071 > 0.005; back to the 4 replicas before the scale-up (6 → 4)",
				next: func(t *testing.T, m Memory) {
					if m.Stage != nil || !m.LastScaleUpTime.Equal(at(30)) || !m.LastScaleTime.Equal(at(30)) {
						t.Errorf("after an abort: stage %v, lastScaleUpTime %v, lastScaleTime %v; want no stage and both now", m.Stage, m.LastScaleUpTime, m.LastScaleTime)
					}
				}},
		},
		"a stage that passed its observation advances to the next": {
			spec:     func(s *qnv1alpha1.HorizontalQNScalerSpec) { *s = *stagedSpec() },
			status:   qnv1alpha1.HorizontalQNScalerStatus{Stage: &qnv1alpha1.ScalerStageStatus{Index: 1, Count: 2, BaseReplicas: 4, TargetReplicas: 12, Replicas: 6, StartTime: *at(0)}},
			replicas: 6, now: 120, metric: Read(20), abort: []ConditionReading{errorRatio(0.001)},
			want: want{action: qnv1alpha1.ActionStageAdvance, replicas: 8, reason: "=stage 1 of 2 passed (120s observed; error-ratio 0.001 ≤ 0.005): stage 2 of 2: 6 → 8",
				next: func(t *testing.T, m Memory) {
					if m.Stage == nil || m.Stage.Index != 2 || m.Stage.Replicas != 8 || !m.Stage.StartTime.Equal(at(120)) {
						t.Errorf("stage = %+v, want stage 2 at 8 replicas from now", m.Stage)
					}
				}},
		},
		"after the last stage the rest is added at once and the scale-up completes": {
			spec:     func(s *qnv1alpha1.HorizontalQNScalerSpec) { *s = *stagedSpec() },
			status:   qnv1alpha1.HorizontalQNScalerStatus{Stage: &qnv1alpha1.ScalerStageStatus{Index: 2, Count: 2, BaseReplicas: 4, TargetReplicas: 12, Replicas: 8, StartTime: *at(120)}},
			replicas: 8, now: 300, metric: Read(3),
			want: want{action: qnv1alpha1.ActionStageAdvance, replicas: 12, reason: "the rest at once, 8 → 12; the staged scale-up is complete",
				next: func(t *testing.T, m Memory) {
					if m.Stage != nil || !m.LastScaleUpTime.Equal(at(300)) {
						t.Errorf("stage %v, lastScaleUpTime %v; want no stage and the cooldown from now", m.Stage, m.LastScaleUpTime)
					}
				}},
		},
		"an abort condition that cannot be read holds the stage past its time": {
			spec:     func(s *qnv1alpha1.HorizontalQNScalerSpec) { *s = *stagedSpec() },
			status:   qnv1alpha1.HorizontalQNScalerStatus{Stage: &qnv1alpha1.ScalerStageStatus{Index: 1, Count: 2, BaseReplicas: 4, TargetReplicas: 12, Replicas: 6, StartTime: *at(0)}},
			replicas: 6, now: 500, metric: Read(20), abort: []ConditionReading{{Condition: stagedSpec().Stages[0].AbortWhen[0], Reading: Reading{Err: errDown}}},
			want: want{action: qnv1alpha1.ActionHold, replicas: 6, reason: "abort conditions cannot be read: error-ratio (query \"queue\": connection refused)"},
		},
		"replicas changed by someone else during a stage abandon it without a write": {
			spec:     func(s *qnv1alpha1.HorizontalQNScalerSpec) { *s = *stagedSpec() },
			status:   qnv1alpha1.HorizontalQNScalerStatus{Stage: &qnv1alpha1.ScalerStageStatus{Index: 1, Count: 2, BaseReplicas: 4, TargetReplicas: 12, Replicas: 6, StartTime: *at(0)}},
			replicas: 9, now: 10, metric: Read(20), abort: []ConditionReading{errorRatio(0.5)},
			want: want{action: qnv1alpha1.ActionHold, replicas: 9, reason: "changed to 9 outside the scaler during stage 1 of 2 (it set 6)", next: func(t *testing.T, m Memory) {
				if m.Stage != nil {
					t.Errorf("stage = %+v, want abandoned", m.Stage)
				}
			}},
		},
		"the fallback overrides a stage in progress": {
			spec: func(s *qnv1alpha1.HorizontalQNScalerSpec) {
				*s = *stagedSpec()
				s.Fallback = &qnv1alpha1.Fallback{FailureThreshold: 1, Replicas: 5}
			},
			status:   qnv1alpha1.HorizontalQNScalerStatus{Stage: &qnv1alpha1.ScalerStageStatus{Index: 1, Count: 2, BaseReplicas: 4, TargetReplicas: 12, Replicas: 6, StartTime: *at(0)}},
			replicas: 6, now: 10, metric: Reading{Err: errDown},
			want: want{action: qnv1alpha1.ActionFallback, replicas: 5, reason: "the staged scale-up in progress is dropped"},
		},
		"a scale-up of one replica with stages is one stage that reaches the target": {
			spec: func(s *qnv1alpha1.HorizontalQNScalerSpec) {
				*s = *stagedSpec()
				s.ScaleUpStep = 1
			},
			replicas: 4, metric: Read(20),
			want: want{action: qnv1alpha1.ActionScaleUp, replicas: 5, reason: "stage 1 of 1: 4 → 5"},
		},
		"a stage that reached the target completes without a write": {
			spec:     func(s *qnv1alpha1.HorizontalQNScalerSpec) { *s = *stagedSpec() },
			status:   qnv1alpha1.HorizontalQNScalerStatus{Stage: &qnv1alpha1.ScalerStageStatus{Index: 1, Count: 1, BaseReplicas: 4, TargetReplicas: 5, Replicas: 5, StartTime: *at(0)}},
			replicas: 5, now: 120, metric: Read(20), abort: []ConditionReading{errorRatio(0)},
			want: want{action: qnv1alpha1.ActionStageAdvance, replicas: 5, reason: "the staged scale-up is complete at 5 replicas"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			spec := baseSpec()
			if tt.spec != nil {
				tt.spec(spec)
			}
			status := tt.status
			d := Decide(Input{Spec: spec, Status: &status, Now: t0.Add(time.Duration(tt.now) * time.Second),
				Replicas: tt.replicas, Metric: tt.metric, Abort: tt.abort, Paused: tt.paused})
			if d.Action != tt.want.action || d.Replicas != tt.want.replicas {
				t.Errorf("decision %s to %d replicas, want %s to %d (reason: %s)", d.Action, d.Replicas, tt.want.action, tt.want.replicas, d.Reason)
			}
			if exact, ok := strings.CutPrefix(tt.want.reason, "="); ok {
				if d.Reason != exact {
					t.Errorf("reason\n got %q\nwant %q", d.Reason, exact)
				}
			} else if !strings.Contains(d.Reason, tt.want.reason) {
				t.Errorf("reason %q does not contain %q", d.Reason, tt.want.reason)
			}
			if d.Limit != tt.want.limit {
				t.Errorf("limit = %q, want %q", d.Limit, tt.want.limit)
			}
			if d.Disabled != tt.want.disabled {
				t.Errorf("disabled = %q, want %q", d.Disabled, tt.want.disabled)
			}
			if d.Replicas != tt.replicas && d.Observed.LastScaleTime != status.LastScaleTime {
				t.Errorf("the memory for a failed write moved lastScaleTime: %v", d.Observed.LastScaleTime)
			}
			if tt.want.next != nil {
				tt.want.next(t, d.Next)
			}
		})
	}
}

func errorRatio(v float64) ConditionReading {
	return ConditionReading{Condition: stagedSpec().Stages[0].AbortWhen[0], Reading: Read(v)}
}

// A burst that crosses upper and back within the cooldown scales up once:
// the whole sequence of polls, each decision fed the memory of the last.
func TestABurstWithinTheCooldownScalesUpOnce(t *testing.T) {
	spec := baseSpec()
	status := &qnv1alpha1.HorizontalQNScalerStatus{}
	replicas := int32(4)
	values := []float64{12, 20, 14, 25, 30, 12, 9, 22, 13} // one poll every 5 s, 45 s in all
	var ups []int
	for i, v := range values {
		d := Decide(Input{Spec: spec, Status: status, Now: t0.Add(time.Duration(5*i) * time.Second), Replicas: replicas, Metric: Read(v)})
		if d.Replicas > replicas {
			ups = append(ups, i)
		}
		if d.Replicas < replicas {
			t.Errorf("poll %d (value %v) scaled down within the stabilization window: %s", i, v, d.Reason)
		}
		replicas = d.Replicas
		status.LastScaleTime, status.LastScaleUpTime, status.BelowLowerSince, status.MetricFailures, status.Stage =
			d.Next.LastScaleTime, d.Next.LastScaleUpTime, d.Next.BelowLowerSince, d.Next.MetricFailures, d.Next.Stage
	}
	if !slices.Equal(ups, []int{1}) || replicas != 6 {
		t.Errorf("scale-ups at polls %v ending at %d replicas, want one at poll 1 ending at 6", ups, replicas)
	}
}

func TestStagePlan(t *testing.T) {
	stages := func(percents ...int32) []qnv1alpha1.Stage {
		out := make([]qnv1alpha1.Stage, len(percents))
		for i, p := range percents {
			out[i] = qnv1alpha1.Stage{Percent: p, ObserveSeconds: 1}
		}
		return out
	}
	tests := map[string]struct {
		stages       []qnv1alpha1.Stage
		base, target int32
		want         []int32
	}{
		"no stages: no plan":                      {base: 4, target: 12},
		"nothing to add: no plan":                 {stages: stages(50), base: 4, target: 4},
		"5 % and 15 % of 100 added replicas":      {stages: stages(5, 15), base: 100, target: 200, want: []int32{105, 115}},
		"percents round up":                       {stages: stages(5, 15), base: 10, target: 30, want: []int32{11, 13}},
		"each stage adds at least one replica":    {stages: stages(5, 15), base: 4, target: 6, want: []int32{5, 6}},
		"stages past the target are left out":     {stages: stages(50, 60, 70), base: 4, target: 5, want: []int32{5}},
		"a stage of 99 % leaves one for the rest": {stages: stages(99), base: 0, target: 1000, want: []int32{990}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := stagePlan(tt.stages, tt.base, tt.target); !slices.Equal(got, tt.want) {
				t.Errorf("plan = %v, want %v", got, tt.want)
			}
		})
	}
}

// noisy adds at run time, so the sum keeps binary floating point's noise
// (a constant expression would be exact).
func noisy(a, b float64) float64 { return a + b }

func TestFormatNumber(t *testing.T) {
	for v, want := range map[float64]string{17.2: "17.2", 1000: "1000", 0.005: "0.005", 0: "0", -3.5: "-3.5", 1e-7: "1e-07", 2e15: "2e+15", 123456789: "123456789",
		0.30000000000000004: "0.3", 1.0000000000000002: "1", 123456.789012: "123456.789012", 2.9999999999999996e-07: "3e-07"} {
		if got := FormatNumber(v); got != want {
			t.Errorf("FormatNumber(%v) = %q, want %q", v, got, want)
		}
	}
}
