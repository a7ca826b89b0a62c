package scaler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	testharness "github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/promtest"
)

// These scenarios run the scaler against a real Prometheus scraping an
// exporter the test sets, a real kube-apiserver and etcd, and the real
// kube-controller-manager, so every replica count asserted is one the
// Deployment controller carried into a ReplicaSet.

func int32p(v int32) *int32 { return &v }

func TestAboveUpperScalesUpByTheStepWithinTwoPollingIntervals(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	s.startTarget(17.2, 4)

	const poll = 3 * time.Second
	created := time.Now()
	s.create(s.scaler(func(sc *qnv1alpha1.HorizontalQNScaler) {
		sc.Spec.PollingIntervalSeconds = 3
		sc.Spec.ScaleUpStep = 2
		sc.Spec.ScaleUpCooldownSeconds = int32p(600) // one scale-up, then the cooldown
	}))
	scaled := s.waitForReplicas("web", 6, 30*time.Second)
	t.Logf("6 replicas in the Deployment and its ReplicaSet %s after the scaler was created", scaled.Sub(created).Round(time.Millisecond))

	sc := s.waitForCondition("web", qnv1alpha1.ScalerAbleToScale, metav1.ConditionTrue, qnv1alpha1.ScalerReasonReadyForNewScale, 10*time.Second)
	// When the scaler wrote /scale, by its own status (whole seconds, so
	// one more), however long the Deployment controller took after it.
	if sc.Status.LastScaleTime == nil {
		t.Fatal("no lastScaleTime after the scale-up")
	}
	if took := sc.Status.LastScaleTime.Sub(sc.CreationTimestamp.Time); took > 2*poll+time.Second {
		t.Errorf("the scale-up was written %s after the scaler was created, more than two polling intervals (%s)", took, 2*poll)
	}
	d := sc.Status.LastDecision
	if d == nil || d.Action != qnv1alpha1.ActionScaleUp || d.Reason != "value 17.2 > upper 15: +2 replicas (4 → 6)" {
		t.Errorf("lastDecision = %+v, want the scale-up explained", d)
	}
	if sc.Status.CurrentValue != "17.2" || sc.Status.CurrentReplicas != 6 || sc.Status.DesiredReplicas != 6 || sc.Status.LastScaleTime == nil {
		t.Errorf("status = %+v", sc.Status)
	}
	if sc.Status.ObservedGeneration != sc.Generation {
		t.Errorf("observedGeneration %d, generation %d", sc.Status.ObservedGeneration, sc.Generation)
	}
	testharness.WaitFor(t, 10*time.Second, "a ScaledUp event", func() error {
		if ev := s.events("web"); !slices.Contains(ev, "ScaledUp: value 17.2 > upper 15: +2 replicas (4 → 6)") {
			return fmt.Errorf("events %q", ev)
		}
		return nil
	})
	if got := testutil.ToFloat64(h.reconciler.metrics.desired.WithLabelValues(s.ns, "web")); got != 6 {
		t.Errorf("qn_scaler_desired_replicas = %v, want 6", got)
	}
	if got := testutil.ToFloat64(h.reconciler.metrics.value.WithLabelValues(s.ns, "web", "")); got != 17.2 {
		t.Errorf("qn_scaler_value = %v, want 17.2", got)
	}
}

func TestInsideTheBandNothingIsWrittenForAMinute(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	s.startTarget(10, 3)
	before := &appsv1.Deployment{}
	if err := h.client.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: "web"}, before); err != nil {
		t.Fatal(err)
	}
	s.create(s.scaler(func(sc *qnv1alpha1.HorizontalQNScaler) { sc.Spec.PollingIntervalSeconds = 2 }))
	s.waitForCondition("web", qnv1alpha1.ScalerScalingActive, metav1.ConditionTrue, qnv1alpha1.ScalerReasonValidMetricFound, 10*time.Second)
	start := time.Now()
	time.Sleep(time.Minute)
	if n := h.scales.of(s.ns, "web"); n != 0 {
		t.Errorf("%d /scale writes in a minute inside the band, want none", n)
	}
	after := &appsv1.Deployment{}
	if err := h.client.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: "web"}, after); err != nil {
		t.Fatal(err)
	}
	if after.Generation != before.Generation || *after.Spec.Replicas != 3 {
		t.Errorf("the Deployment changed: generation %d → %d, replicas %d", before.Generation, after.Generation, *after.Spec.Replicas)
	}
	sc := s.get("web")
	if d := sc.Status.LastDecision; d == nil || d.Action != qnv1alpha1.ActionHold || !strings.Contains(d.Reason, "value 10 within [lower 5, upper 15]: holding 3 replicas") {
		t.Errorf("lastDecision = %+v", d)
	}
	if sc.Status.LastDecision.Time.Time.Before(start.Add(-time.Second)) {
		t.Errorf("the status was not refreshed within the minute (last decision at %s)", sc.Status.LastDecision.Time)
	}
}

func TestBelowLowerScalesDownOnlyAfterTheStabilizationWindow(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	s.startTarget(2, 4)
	const window = 20 * time.Second
	s.create(s.scaler(func(sc *qnv1alpha1.HorizontalQNScaler) {
		sc.Spec.StabilizationWindowSeconds = int32p(int32(window / time.Second))
	}))
	var since time.Time
	testharness.WaitFor(t, 10*time.Second, "the scaler records when the value went below lower", func() error {
		sc := s.get("web")
		if sc.Status.BelowLowerSince == nil {
			return fmt.Errorf("status %+v", sc.Status)
		}
		since = sc.Status.BelowLowerSince.Time
		return nil
	})
	// Through most of the window the replicas stay.
	for time.Until(since.Add(window-2*time.Second)) > 0 {
		if d, _, err := s.replicas("web"); err != nil || d != 4 {
			t.Fatalf("the Deployment has %d replicas (%v) %s after the value went below lower, inside the %s window", d, err, time.Since(since).Round(time.Second), window)
		}
		time.Sleep(500 * time.Millisecond)
	}
	scaled := s.waitForReplicas("web", 3, 10*time.Second)
	// Timestamps are whole seconds: allow one for the rounding of since.
	if waited := scaled.Sub(since); waited < window-time.Second {
		t.Errorf("scaled down %s after the value went below lower, before the %s window", waited, window)
	}
	// The scale is written before the status that records it.
	testharness.WaitFor(t, 10*time.Second, "the scale-down recorded as the last decision", func() error {
		if d := s.get("web").Status.LastDecision; d == nil || d.Action != qnv1alpha1.ActionScaleDown || !strings.Contains(d.Reason, "value 2 < lower 5 for ") || !strings.HasSuffix(d.Reason, "-1 replica (4 → 3)") {
			return fmt.Errorf("lastDecision = %+v", d)
		}
		return nil
	})
	testharness.WaitFor(t, 10*time.Second, "a ScaledDown event", func() error {
		ev := s.events("web")
		if !slices.ContainsFunc(ev, func(e string) bool {
			return strings.HasPrefix(e, "ScaledDown: value 2 < lower 5 for ") && strings.HasSuffix(e, "-1 replica (4 → 3)")
		}) {
			return fmt.Errorf("events %q", ev)
		}
		return nil
	})
	// The next step waits a whole window again.
	time.Sleep(5 * time.Second)
	if d, _, _ := s.replicas("web"); d != 3 {
		t.Errorf("a second scale-down %s after the first, inside the window: %d replicas", 5*time.Second, d)
	}
	if n := h.scales.of(s.ns, "web"); n != 1 {
		t.Errorf("%d /scale writes, want 1", n)
	}
}

func TestABurstThatCrossesUpperAndBackWithinTheCooldownScalesUpOnce(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	s.startTarget(10, 2)
	s.create(s.scaler(func(sc *qnv1alpha1.HorizontalQNScaler) { sc.Spec.ScaleUpCooldownSeconds = int32p(60) }))
	s.waitForCondition("web", qnv1alpha1.ScalerScalingActive, metav1.ConditionTrue, qnv1alpha1.ScalerReasonValidMetricFound, 10*time.Second)

	burstStart := time.Now()
	s.setQueue(40)
	s.waitForReplicas("web", 4, 10*time.Second)
	for _, v := range []float64{10, 1, 30, 12, 50} {
		s.setQueue(v)
		time.Sleep(3 * time.Second) // three polls at each value
	}
	if elapsed := time.Since(burstStart); elapsed > 55*time.Second {
		t.Fatalf("the burst took %s, longer than the cooldown: the test proves nothing", elapsed)
	}
	if d, rs, _ := s.replicas("web"); d != 4 || rs != 4 {
		t.Errorf("after the burst: Deployment %d, ReplicaSet %d replicas; want 4 (one scale-up of 2)", d, rs)
	}
	if n := h.scales.of(s.ns, "web"); n != 1 {
		t.Errorf("%d /scale writes during the burst, want 1", n)
	}
	testharness.WaitFor(t, 10*time.Second, "the last decision names the cooldown", func() error {
		if d := s.get("web").Status.LastDecision; d == nil || !strings.Contains(d.Reason, "scale-up cooldown of 60s runs until") {
			return fmt.Errorf("lastDecision = %+v", d)
		}
		return nil
	})
}

// The status is the scaler's memory: a status write the API server
// refuses with a conflict (someone labelled the scaler between the poll's
// read and its write) must not lose the time of the scale-up it records,
// or the next poll would scale up again inside the cooldown.
func TestAStatusWriteThatMeetsAConflictKeepsTheCooldown(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	h.faults.once(s.ns, faultConflict)
	s.scaleUpOnceInALongCooldown()
	if !h.faults.happened(s.ns) {
		t.Fatal("the status write after the scale-up met no conflict: the test proves nothing")
	}
	s.stillOneScaleUp()
	sc := s.get("web")
	if sc.Labels["touched"] != "true" || sc.Status.LastScaleUpTime == nil {
		t.Errorf("labels %v, lastScaleUpTime %v: want the label and the scale-up's time both kept", sc.Labels, sc.Status.LastScaleUpTime)
	}
}

// A status write that fails for a moment (the API server unavailable) is
// tried again: the scale-up's time is not lost with it.
func TestAStatusWriteThatFailsForAMomentKeepsTheCooldown(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	h.faults.once(s.ns, faultUnavailable)
	s.scaleUpOnceInALongCooldown()
	if !h.faults.happened(s.ns) {
		t.Fatal("the status write after the scale-up did not fail: the test proves nothing")
	}
	s.stillOneScaleUp()
	if sc := s.get("web"); sc.Status.LastScaleUpTime == nil {
		t.Errorf("no lastScaleUpTime: status %+v", sc.Status)
	}
}

// A status write that fails past its retries (the API server refusing
// for several polls) must not cost the cooldown either: the controller
// decides on the status it could not write until one lands, and then
// writes it.
func TestAStatusWriteThatFailsForSeveralPollsKeepsTheCooldown(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	h.faults.failFor(s.ns, 6*time.Second)
	s.scaleUpOnceInALongCooldown()
	s.stillOneScaleUp()
	// One poll tries a write 5 times (retry.DefaultBackoff, about 0.3 s).
	if n := h.faults.refused(s.ns); n <= 5 {
		t.Fatalf("%d status writes refused: the outage did not outlast one poll's retries, the test proves nothing", n)
	}
	testharness.WaitFor(t, 20*time.Second, "the status records the scale-up once writes land again", func() error {
		if sc := s.get("web"); sc.Status.LastScaleUpTime == nil {
			return errors.New("no lastScaleUpTime yet")
		}
		return nil
	})
	s.stillOneScaleUp()
}

// The scaler reads itself from the informer's cache, which can lag behind
// the status it just wrote (a loaded API server, a slow watch): a poll
// must not decide on the older status, which lacks the scale-up it made.
func TestACacheBehindTheLastStatusWriteDoesNotScaleTwice(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	h.faults.lagOnce(s.ns)
	s.scaleUpOnceInALongCooldown()
	testharness.WaitFor(t, 10*time.Second, "a poll read the scaler as it was before its scale-up", func() error {
		if !h.faults.lagged(s.ns) {
			return errors.New("not yet")
		}
		return nil
	})
	s.stillOneScaleUp()
}

// scaleUpOnceInALongCooldown has a scaler take the scenario's Deployment
// from 2 to 4 replicas on a value that stays above upper, with a
// scale-up cooldown of 600s.
func (s *scenario) scaleUpOnceInALongCooldown() {
	s.t.Helper()
	s.startTarget(50, 2)
	s.create(s.scaler(func(sc *qnv1alpha1.HorizontalQNScaler) { sc.Spec.ScaleUpCooldownSeconds = int32p(600) }))
	s.waitForReplicas("web", 4, 15*time.Second)
}

// stillOneScaleUp lets five more polls pass and checks that the scale-up
// of scaleUpOnceInALongCooldown stayed the only write.
func (s *scenario) stillOneScaleUp() {
	s.t.Helper()
	time.Sleep(5 * time.Second)
	if d, _, _ := s.replicas("web"); d != 4 {
		s.t.Errorf("%d replicas five polls after the scale-up to 4, inside its 600s cooldown", d)
	}
	if n := s.h.scales.of(s.ns, "web"); n != 1 {
		s.t.Errorf("%d /scale writes, want 1", n)
	}
}

func TestPrometheusStoppedReportsTheMetricThenAppliesTheFallback(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	prom, err := promtest.Start(promtest.Binary(t), promtest.Options{Dir: t.TempDir(), Targets: []string{h.exporter.Target()}})
	if err != nil {
		t.Fatal(err)
	}
	defer prom.Stop()
	h.exporter.Set(queueMetric, s.name, 10)
	waitForValue(t, NewPrometheus(2*time.Second, 1), Server{URL: prom.URL}, s.query(), 10)
	s.create(h.createDeploymentObject(s.ns, "web", 2))
	s.waitForReplicas("web", 2, 30*time.Second)
	s.create(s.scaler(func(sc *qnv1alpha1.HorizontalQNScaler) {
		sc.Spec.QNMetric.ServerAddress = prom.URL
		sc.Spec.Fallback = &qnv1alpha1.Fallback{FailureThreshold: 3, Replicas: 5}
		sc.Spec.PollingIntervalSeconds = 2
	}))
	s.waitForCondition("web", qnv1alpha1.ScalerMetricAvailable, metav1.ConditionTrue, qnv1alpha1.ScalerReasonQuerySucceeded, 10*time.Second)

	prom.Stop()
	stopped := time.Now()
	sc := s.waitForCondition("web", qnv1alpha1.ScalerMetricAvailable, metav1.ConditionFalse, string(QueryUnreachable), 10*time.Second)
	if c := meta.FindStatusCondition(sc.Status.Conditions, qnv1alpha1.ScalerMetricAvailable); !strings.Contains(c.Message, "connection refused") {
		t.Errorf("MetricAvailable message %q does not say why", c.Message)
	}
	if d, _, _ := s.replicas("web"); d != 2 {
		t.Errorf("%d replicas after the first failed poll, want 2 until the threshold", d)
	}
	s.waitForReplicas("web", 5, 20*time.Second)
	if took := time.Since(stopped); took < 4*time.Second {
		t.Errorf("the fallback applied %s after Prometheus stopped, before three polls of 2s failed", took)
	}
	sc = s.waitForCondition("web", qnv1alpha1.ScalerScalingActive, metav1.ConditionFalse, qnv1alpha1.ScalerReasonFallbackApplied, 10*time.Second)
	if d := sc.Status.LastDecision; d == nil || d.Action != qnv1alpha1.ActionFallback || !strings.Contains(d.Reason, "fallback to 5 replicas (2 → 5)") {
		t.Errorf("lastDecision = %+v", d)
	}
	testharness.WaitFor(t, 10*time.Second, "MetricUnavailable and FallbackApplied events", func() error {
		ev := strings.Join(s.events("web"), "\n")
		if !strings.Contains(ev, "MetricUnavailable: query Prometheus at "+prom.URL) || !strings.Contains(ev, "FallbackApplied: metric unavailable for 3 polls in a row") {
			return fmt.Errorf("events:\n%s", ev)
		}
		return nil
	})
	if got := testutil.ToFloat64(h.reconciler.metrics.metricAvailable.WithLabelValues(s.ns, "web")); got != 0 {
		t.Errorf("qn_scaler_metric_available = %v, want 0", got)
	}
	if got := testutil.ToFloat64(h.reconciler.metrics.queryErrors.WithLabelValues(s.ns, "web", string(QueryUnreachable))); got < 3 {
		t.Errorf("qn_scaler_query_errors_total{reason=PrometheusUnreachable} = %v, want at least 3", got)
	}
}

func TestAStagedScaleUpWhoseConditionFailsReturnsToThePreviousReplicas(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	s.setQueue(10)
	s.setErrorRatio(0.001)
	s.create(h.createDeploymentObject(s.ns, "web", 2))
	s.waitForReplicas("web", 2, 30*time.Second)
	s.create(s.scaler(func(sc *qnv1alpha1.HorizontalQNScaler) {
		sc.Spec.MaxReplicas = 20
		sc.Spec.ScaleUpStep = 8 // 2 → 10: stage 1 (50 %) takes it to 6
		sc.Spec.ScaleUpCooldownSeconds = int32p(600)
		sc.Spec.Stages = []qnv1alpha1.Stage{
			{Percent: 50, ObserveSeconds: 120, AbortWhen: []qnv1alpha1.AbortCondition{{
				Name: "error-ratio", Query: s.errorQuery(), Operator: qnv1alpha1.AbortAbove, Threshold: resource.MustParse("0.005"),
			}}},
			{Percent: 75, ObserveSeconds: 120},
		}
	}))
	s.waitForCondition("web", qnv1alpha1.ScalerScalingActive, metav1.ConditionTrue, qnv1alpha1.ScalerReasonValidMetricFound, 10*time.Second)
	s.setQueue(30)
	s.waitForReplicas("web", 6, 10*time.Second)
	// The scale is written before the status that records it.
	testharness.WaitFor(t, 10*time.Second, "stage 1 of 2 recorded", func() error {
		if st := s.get("web").Status.Stage; st == nil || st.Index != 1 || st.Count != 2 || st.BaseReplicas != 2 || st.TargetReplicas != 10 || st.Replicas != 6 {
			return fmt.Errorf("stage = %+v, want stage 1 of 2 at 6 on the way from 2 to 10", st)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // observed, conditions passing
	if d, _, _ := s.replicas("web"); d != 6 {
		t.Fatalf("%d replicas while stage 1 is observed and passing, want 6", d)
	}

	s.setErrorRatio(0.02)
	s.waitForReplicas("web", 2, 10*time.Second)
	want := "stage 1 of 2 aborted: error-ratio 0.02 > 0.005; back to the 2 replicas before the scale-up (6 → 2)"
	testharness.WaitFor(t, 10*time.Second, "the abort recorded", func() error {
		sc := s.get("web")
		if sc.Status.Stage != nil {
			return fmt.Errorf("stage = %+v after the abort, want none", sc.Status.Stage)
		}
		if d := sc.Status.LastDecision; d == nil || d.Action != qnv1alpha1.ActionStageAbort || d.Reason != want {
			return fmt.Errorf("lastDecision = %+v, want %q", d, want)
		}
		return nil
	})
	testharness.WaitFor(t, 10*time.Second, "a StageAborted event", func() error {
		if ev := s.events("web"); !slices.Contains(ev, "StageAborted: "+want) {
			return fmt.Errorf("events %q", ev)
		}
		return nil
	})
	// The abort started the cooldown: the high value does not scale up again.
	s.setErrorRatio(0)
	time.Sleep(5 * time.Second)
	if d, _, _ := s.replicas("web"); d != 2 {
		t.Errorf("%d replicas within the cooldown after the abort, want 2", d)
	}
	if n := h.scales.of(s.ns, "web"); n != 2 {
		t.Errorf("%d /scale writes, want 2 (stage 1, the rollback)", n)
	}
}

func TestAPausedScalerNeverWrites(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	s.startTarget(50, 2)
	sc := s.scaler(func(sc *qnv1alpha1.HorizontalQNScaler) {
		sc.Annotations = map[string]string{qnv1alpha1.KEDAPausedAnnotation: "true"}
	})
	s.create(sc)
	s.waitForCondition("web", qnv1alpha1.ScalerScalingActive, metav1.ConditionFalse, qnv1alpha1.ScalerReasonPaused, 10*time.Second)
	time.Sleep(8 * time.Second) // eight polls
	if n := h.scales.of(s.ns, "web"); n != 0 {
		t.Fatalf("%d /scale writes while paused, want none", n)
	}
	if d, _, _ := s.replicas("web"); d != 2 {
		t.Fatalf("%d replicas while paused, want 2", d)
	}
	if c := meta.FindStatusCondition(s.get("web").Status.Conditions, qnv1alpha1.ScalerMetricAvailable); c == nil || c.Reason != qnv1alpha1.ScalerReasonNotQueried {
		t.Errorf("MetricAvailable = %+v, want NotQueried while paused", c)
	}
	// The pause was what held it: lifting it scales at once.
	s.update(sc, func() { delete(sc.Annotations, qnv1alpha1.KEDAPausedAnnotation) })
	s.waitForReplicas("web", 4, 15*time.Second)
}

func TestADryRunDecidesAndReportsButNeverWrites(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	s.startTarget(50, 2)
	s.create(s.scaler(func(sc *qnv1alpha1.HorizontalQNScaler) { sc.Spec.DryRun = true }))
	sc := s.waitForCondition("web", qnv1alpha1.ScalerAbleToScale, metav1.ConditionTrue, qnv1alpha1.ScalerReasonDryRun, 10*time.Second)
	if d := sc.Status.LastDecision; d == nil || d.Reason != "dry run, not written: value 50 > upper 15: +2 replicas (2 → 4)" || sc.Status.DesiredReplicas != 4 {
		t.Errorf("lastDecision = %+v, desired %d", d, sc.Status.DesiredReplicas)
	}
	time.Sleep(4 * time.Second)
	if n := h.scales.of(s.ns, "web"); n != 0 {
		t.Errorf("%d /scale writes in a dry run, want none", n)
	}
	if got := testutil.ToFloat64(h.reconciler.metrics.desired.WithLabelValues(s.ns, "web")); got != 4 {
		t.Errorf("qn_scaler_desired_replicas = %v, want the dry run's 4", got)
	}
}

func TestDeletingTheTargetGivesAConditionNotACrashLoop(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	s.setQueue(10)
	dep := h.createDeploymentObject(s.ns, "web", 2)
	s.create(dep)
	s.create(s.scaler())
	s.waitForCondition("web", qnv1alpha1.ScalerAbleToScale, metav1.ConditionTrue, qnv1alpha1.ScalerReasonReadyForNewScale, 10*time.Second)

	if err := h.client.Delete(context.Background(), dep); err != nil {
		t.Fatal(err)
	}
	sc := s.waitForCondition("web", qnv1alpha1.ScalerAbleToScale, metav1.ConditionFalse, qnv1alpha1.ScalerReasonTargetNotFound, 10*time.Second)
	if c := meta.FindStatusCondition(sc.Status.Conditions, qnv1alpha1.ScalerAbleToScale); c.Message != "Deployment web not found in namespace "+s.ns+": create it or fix scaleTargetRef; the scaler retries every poll" {
		t.Errorf("AbleToScale message %q", c.Message)
	}
	// Polled every second, without errors (no backoff, no error log per poll).
	errorsOf := h.reconciler.metrics.errors.WithLabelValues(s.ns, "web")
	errorsBefore := testutil.ToFloat64(errorsOf)
	time.Sleep(5 * time.Second)
	if d := testutil.ToFloat64(errorsOf) - errorsBefore; d > 0 {
		t.Errorf("%v failed reconciles of the scaler in 5 s without a target: a crash loop", d)
	}
	// The target back: scaling resumes.
	s.create(h.createDeploymentObject(s.ns, "web", 2))
	s.waitForCondition("web", qnv1alpha1.ScalerAbleToScale, metav1.ConditionTrue, qnv1alpha1.ScalerReasonReadyForNewScale, 10*time.Second)
}

func TestATargetThatCannotScaleIsNamed(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	s.setQueue(10)
	for name, tt := range map[string]struct {
		ref        qnv1alpha1.ScaleTargetRef
		wantReason string
		wantMsg    string
	}{
		"misspelt-kind": {ref: qnv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deploymnt", Name: "web"}, wantReason: qnv1alpha1.ScalerReasonInvalidTarget,
			wantMsg: "the API server serves no kind Deploymnt in apps/v1 (scaleTargetRef)"},
		"no-scale": {ref: qnv1alpha1.ScaleTargetRef{APIVersion: "v1", Kind: "ConfigMap", Name: "web"}, wantReason: qnv1alpha1.ScalerReasonInvalidTarget,
			wantMsg: "ConfigMap web has no /scale subresource: only kinds that serve /scale can be scaled"},
	} {
		s.create(s.scaler(func(sc *qnv1alpha1.HorizontalQNScaler) { sc.Name, sc.Spec.ScaleTargetRef = name, tt.ref }))
		sc := s.waitForCondition(name, qnv1alpha1.ScalerAbleToScale, metav1.ConditionFalse, tt.wantReason, 10*time.Second)
		if c := meta.FindStatusCondition(sc.Status.Conditions, qnv1alpha1.ScalerAbleToScale); !strings.Contains(c.Message, tt.wantMsg) {
			t.Errorf("%s: message %q, want %q", name, c.Message, tt.wantMsg)
		}
	}
}

func TestAnotherAutoscalerOfTheTargetIsReportedNotFought(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	s.startTarget(50, 2)
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "web-cpu"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MinReplicas:    int32p(1), MaxReplicas: 5,
		},
	}
	s.create(hpa)
	s.create(s.scaler())
	sc := s.waitForCondition("web", qnv1alpha1.ScalerAbleToScale, metav1.ConditionFalse, qnv1alpha1.ScalerReasonConflictingScaler, 10*time.Second)
	if c := meta.FindStatusCondition(sc.Status.Conditions, qnv1alpha1.ScalerAbleToScale); !strings.Contains(c.Message, "HorizontalPodAutoscaler web-cpu also scale Deployment web") {
		t.Errorf("AbleToScale message %q", c.Message)
	}
	if d := sc.Status.LastDecision; d == nil || !strings.HasPrefix(d.Reason, "not written: another scaler owns the target; value 50 > upper 15") {
		t.Errorf("lastDecision %+v", d)
	}
	// A second HorizontalQNScaler of the same target yields to the first.
	time.Sleep(time.Second) // a later creationTimestamp (whole seconds)
	s.create(s.scaler(func(sc *qnv1alpha1.HorizontalQNScaler) { sc.Name = "web-second" }))
	sc = s.waitForCondition("web-second", qnv1alpha1.ScalerAbleToScale, metav1.ConditionFalse, qnv1alpha1.ScalerReasonConflictingScaler, 10*time.Second)
	if c := meta.FindStatusCondition(sc.Status.Conditions, qnv1alpha1.ScalerAbleToScale); !strings.Contains(c.Message, "HorizontalQNScaler web (older), HorizontalPodAutoscaler web-cpu also scale") {
		t.Errorf("the second scaler's message %q", c.Message)
	}
	time.Sleep(3 * time.Second)
	if n := h.scales.of(s.ns, "web"); n != 0 {
		t.Fatalf("%d /scale writes while an HPA scales the target", n)
	}
	// The HPA gone, the older scaler scales; the newer still yields to it.
	if err := h.client.Delete(context.Background(), hpa); err != nil {
		t.Fatal(err)
	}
	s.waitForReplicas("web", 4, 10*time.Second)
	s.waitForCondition("web", qnv1alpha1.ScalerAbleToScale, metav1.ConditionTrue, qnv1alpha1.ScalerReasonReadyForNewScale, 10*time.Second)
	testharness.WaitFor(t, 10*time.Second, "the second scaler yields to the first alone", func() error {
		c := meta.FindStatusCondition(s.get("web-second").Status.Conditions, qnv1alpha1.ScalerAbleToScale)
		if c == nil || c.Reason != qnv1alpha1.ScalerReasonConflictingScaler || !strings.HasPrefix(c.Message, "HorizontalQNScaler web (older) also scale") {
			return fmt.Errorf("AbleToScale %+v", c)
		}
		return nil
	})
}

// A KEDA ScaledObject of the target (its scaleTargetRef names only the
// Deployment, as KEDA's defaults allow) holds the scaler back until it is
// gone.
func TestAKEDAScaledObjectOfTheTargetIsReportedNotFought(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	s.startTarget(50, 2)
	scaledObject := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": ScaledObjectGVK.GroupVersion().String(), "kind": ScaledObjectGVK.Kind,
		"metadata": map[string]any{"namespace": s.ns, "name": "web-keda"},
		"spec":     map[string]any{"scaleTargetRef": map[string]any{"name": "web"}, "maxReplicaCount": int64(5)},
	}}
	s.create(scaledObject)
	s.create(s.scaler())
	sc := s.waitForCondition("web", qnv1alpha1.ScalerAbleToScale, metav1.ConditionFalse, qnv1alpha1.ScalerReasonConflictingScaler, 10*time.Second)
	if c := meta.FindStatusCondition(sc.Status.Conditions, qnv1alpha1.ScalerAbleToScale); !strings.HasPrefix(c.Message, "ScaledObject web-keda also scale Deployment web") {
		t.Errorf("AbleToScale message %q", c.Message)
	}
	testharness.WaitFor(t, 10*time.Second, "a ConflictingScaler event", func() error {
		ev := s.events("web")
		if !slices.ContainsFunc(ev, func(e string) bool {
			return strings.HasPrefix(e, "ConflictingScaler: ScaledObject web-keda also scale")
		}) {
			return fmt.Errorf("events %q", ev)
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	if n := h.scales.of(s.ns, "web"); n != 0 {
		t.Fatalf("%d /scale writes while a ScaledObject scales the target", n)
	}
	if err := h.client.Delete(context.Background(), scaledObject); err != nil {
		t.Fatal(err)
	}
	s.waitForReplicas("web", 4, 15*time.Second)
}

// KEDA installed after qn-controller started: the scaler watches its
// ScaledObjects once the cluster serves them, without a restart, and a
// ScaledObject of the target then holds the scaler back as one there from
// the start does.
func TestKEDAInstalledAfterTheControllerStartedIsSeen(t *testing.T) {
	t.Parallel()
	h := startControlPlaneWithoutKEDA(t)
	if h.reconciler.scaledObjects.Load() != nil {
		t.Fatal("ScaledObjects are watched before KEDA is installed: the test proves nothing")
	}
	s := h.scenario(t)
	s.startTarget(10, 2) // inside the band: the scaler holds
	s.create(s.scaler())
	s.waitForCondition("web", qnv1alpha1.ScalerAbleToScale, metav1.ConditionTrue, qnv1alpha1.ScalerReasonReadyForNewScale, 10*time.Second)

	if _, err := envtest.InstallCRDs(h.cfg, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{scaledObjectCRD()}}); err != nil {
		t.Fatalf("install KEDA's ScaledObject: %v", err)
	}
	testharness.WaitFor(t, 15*time.Second, "the scaler watches ScaledObjects", func() error {
		if h.reconciler.scaledObjects.Load() == nil {
			return errors.New("not yet")
		}
		return nil
	})
	s.create(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": ScaledObjectGVK.GroupVersion().String(), "kind": ScaledObjectGVK.Kind,
		"metadata": map[string]any{"namespace": s.ns, "name": "web-keda"},
		"spec":     map[string]any{"scaleTargetRef": map[string]any{"name": "web"}},
	}})
	sc := s.waitForCondition("web", qnv1alpha1.ScalerAbleToScale, metav1.ConditionFalse, qnv1alpha1.ScalerReasonConflictingScaler, 10*time.Second)
	if c := meta.FindStatusCondition(sc.Status.Conditions, qnv1alpha1.ScalerAbleToScale); !strings.HasPrefix(c.Message, "ScaledObject web-keda also scale Deployment web") {
		t.Errorf("AbleToScale message %q", c.Message)
	}
}

// A bad spec is refused by the API server itself, naming the field, through
// the CRD's schema and CEL rules.
func TestABadSpecIsRefusedWithTheFieldNamed(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	tests := map[string]struct {
		change func(*qnv1alpha1.HorizontalQNScaler)
		want   string
	}{
		"upper not above lower": {change: func(sc *qnv1alpha1.HorizontalQNScaler) { sc.Spec.Thresholds.Upper = resource.MustParse("5") },
			want: "spec.thresholds.upper: Invalid value: upper must be greater than lower"},
		"upper below lower in other units": {change: func(sc *qnv1alpha1.HorizontalQNScaler) {
			sc.Spec.Thresholds.Upper, sc.Spec.Thresholds.Lower = resource.MustParse("900m"), resource.MustParse("1")
		}, want: "spec.thresholds.upper: Invalid value: upper must be greater than lower"},
		"a negative step": {change: func(sc *qnv1alpha1.HorizontalQNScaler) { sc.Spec.ScaleDownStep = -1 },
			want: "spec.scaleDownStep: Invalid value: -1: spec.scaleDownStep in body should be greater than or equal to 1"},
		"minReplicas above maxReplicas": {change: func(sc *qnv1alpha1.HorizontalQNScaler) { sc.Spec.MinReplicas = 11 },
			want: "spec.minReplicas: Invalid value: minReplicas must not exceed maxReplicas"},
		"maxReplicas past the cap": {change: func(sc *qnv1alpha1.HorizontalQNScaler) { sc.Spec.MaxReplicas = 10001 },
			want: "spec.maxReplicas: Invalid value: 10001: spec.maxReplicas in body should be less than or equal to 10000"},
		"stage percents out of order": {change: func(sc *qnv1alpha1.HorizontalQNScaler) {
			sc.Spec.Stages = []qnv1alpha1.Stage{{Percent: 50, ObserveSeconds: 10}, {Percent: 20, ObserveSeconds: 10}}
		}, want: "spec.stages: Invalid value: stage percents must strictly increase"},
		"fallback outside the bounds": {change: func(sc *qnv1alpha1.HorizontalQNScaler) {
			sc.Spec.Fallback = &qnv1alpha1.Fallback{Replicas: 11}
		}, want: "spec.fallback.replicas: Invalid value: fallback.replicas must lie within minReplicas and maxReplicas"},
		"a serverAddress that is not http": {change: func(sc *qnv1alpha1.HorizontalQNScaler) {
			sc.Spec.QNMetric.ServerAddress = "prometheus:9090"
		}, want: "spec.qnMetric.serverAddress: Invalid value: \"prometheus:9090\": must be an http or https URL without a query"},
		"an abort condition with an unknown operator": {change: func(sc *qnv1alpha1.HorizontalQNScaler) {
			sc.Spec.Stages = []qnv1alpha1.Stage{{Percent: 50, ObserveSeconds: 10, AbortWhen: []qnv1alpha1.AbortCondition{{Name: "errors", Query: "x", Operator: "=>", Threshold: resource.MustParse("1")}}}}
		}, want: "spec.stages[0].abortWhen[0].operator: Unsupported value: \"=>\""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			sc := s.scaler(tt.change)
			sc.Name = strings.ReplaceAll(strings.ToLower(name), " ", "-")
			err := h.client.Create(context.Background(), sc)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create: %v, want 422 Invalid", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\ndoes not contain %q", err, tt.want)
			}
		})
	}
}

// A scaler that names its figure (qnMetric.name) is told in that name:
// its decision's reason, its event and qn_scaler_value's metric label.
func TestANamedFigureIsCalledByItsNameInStatusEventsAndMetrics(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	s.startTarget(17.2, 4)
	s.create(s.scaler(func(sc *qnv1alpha1.HorizontalQNScaler) {
		sc.Spec.QNMetric.Name = "http_queue_length"
		sc.Spec.PollingIntervalSeconds = 3
		sc.Spec.ScaleUpCooldownSeconds = int32p(600)
	}))
	s.waitForReplicas("web", 6, 30*time.Second)
	const reason = "http_queue_length 17.2 > upper 15: +2 replicas (4 → 6)"
	sc := s.waitForCondition("web", qnv1alpha1.ScalerMetricAvailable, metav1.ConditionTrue, qnv1alpha1.ScalerReasonQuerySucceeded, 10*time.Second)
	if d := sc.Status.LastDecision; d == nil || d.Reason != reason {
		t.Errorf("lastDecision = %+v, want the reason %q", d, reason)
	}
	if c := meta.FindStatusCondition(sc.Status.Conditions, qnv1alpha1.ScalerMetricAvailable); c == nil || !strings.HasPrefix(c.Message, "http_queue_length: ") {
		t.Errorf("MetricAvailable = %+v, want its message to name the figure", c)
	}
	testharness.WaitFor(t, 10*time.Second, "a ScaledUp event naming the figure", func() error {
		if ev := s.events("web"); !slices.Contains(ev, "ScaledUp: "+reason) {
			return fmt.Errorf("events %q", ev)
		}
		return nil
	})
	if got := testutil.ToFloat64(h.reconciler.metrics.value.WithLabelValues(s.ns, "web", "http_queue_length")); got != 17.2 {
		t.Errorf("qn_scaler_value{metric=\"http_queue_length\"} = %v, want 17.2", got)
	}
}
