package scaler

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// Reading is the outcome of one instant query.
type Reading struct {
	// Value is the sample's value; meaningful only when Err is nil.
	Value float64
	// Text is the value as status and reasons show it (FormatNumber).
	Text string
	// Err says why there is no value (the query failed, returned no
	// sample, several samples, or NaN/Inf).
	Err error
}

// Read returns a Reading of v, as a test or qnctl would give one.
func Read(v float64) Reading { return Reading{Value: v, Text: FormatNumber(v)} }

// ConditionReading is one abort condition of the current stage, read.
type ConditionReading struct {
	Condition qnv1alpha1.AbortCondition
	Reading
}

// Input is everything one decision depends on. Decide reads nothing else:
// no clock, no client, no Prometheus.
type Input struct {
	// Spec is the rule, defaults applied (WithDefaults).
	Spec *qnv1alpha1.HorizontalQNScalerSpec
	// Status is the stored status: the scaler's memory of earlier
	// decisions (scale times, stabilization start, failures, stage).
	Status *qnv1alpha1.HorizontalQNScalerStatus
	// Now is the time of the decision.
	Now time.Time
	// Replicas is the target's spec.replicas as /scale reports it.
	Replicas int32
	// Paused is true when an annotation pauses the scaler; Metric and
	// Abort are then not read.
	Paused bool
	// Metric is this poll's reading of spec.qnMetric.query.
	Metric Reading
	// Abort are the current stage's abort conditions, read; empty when no
	// staged scale-up is in progress (StageConditions says which to read).
	Abort []ConditionReading
}

// Limit names why the rule's replicas were held at a bound.
type Limit string

// The bounds a decision can meet, named as the HorizontalPodAutoscaler's
// ScalingLimited reasons.
const (
	LimitNone    Limit = ""
	LimitTooMany Limit = qnv1alpha1.ScalerReasonTooManyReplicas
	LimitTooFew  Limit = qnv1alpha1.ScalerReasonTooFewReplicas
)

// Memory is the part of the status a decision changes: what the next
// decision must remember.
type Memory struct {
	LastScaleTime   *metav1.Time                  `json:"lastScaleTime,omitempty"`
	LastScaleUpTime *metav1.Time                  `json:"lastScaleUpTime,omitempty"`
	BelowLowerSince *metav1.Time                  `json:"belowLowerSince,omitempty"`
	MetricFailures  int32                         `json:"metricFailures,omitempty"`
	Stage           *qnv1alpha1.ScalerStageStatus `json:"stage,omitempty"`
}

// Decision is what the rule asks for, and why.
type Decision struct {
	// Action is what the decision does.
	Action qnv1alpha1.ScalerAction
	// Replicas is what the target should have; equal to Input.Replicas
	// when nothing is to be written.
	Replicas int32
	// Reason explains the decision in a sentence.
	Reason string
	// Limit is set when the rule's replicas were held at min or max;
	// LimitMessage says so in a sentence.
	Limit        Limit
	LimitMessage string
	// Disabled is set when the scaler does not scale at all (paused, the
	// target at 0 replicas): ScalingActive is False with this reason.
	Disabled string
	// Next is the memory to store once the decision is carried out (the
	// write succeeded, or none was needed).
	Next Memory
	// Observed is the memory to store when the write could not be made
	// (or a dry run skipped it): only what this poll observed changes.
	Observed Memory
	// Aborted names the abort condition that held, for the event.
	Aborted string
}

// Write reports whether the decision changes the target's replicas.
func (d Decision) Write(current int32) bool { return d.Replicas != current }

// WithDefaults returns a copy of spec with the CRD's defaults filled in,
// for objects that did not pass through the API server (qnctl) and so
// that Decide never divides by a zero step.
func WithDefaults(spec *qnv1alpha1.HorizontalQNScalerSpec) *qnv1alpha1.HorizontalQNScalerSpec {
	s := spec.DeepCopy()
	if s.MinReplicas == 0 {
		s.MinReplicas = 1
	}
	if s.ScaleUpStep == 0 {
		s.ScaleUpStep = 2
	}
	if s.ScaleDownStep == 0 {
		s.ScaleDownStep = 1
	}
	if s.ScaleUpCooldownSeconds == nil {
		s.ScaleUpCooldownSeconds = ptr(int32(60))
	}
	if s.StabilizationWindowSeconds == nil {
		s.StabilizationWindowSeconds = ptr(int32(300))
	}
	if s.PollingIntervalSeconds == 0 {
		s.PollingIntervalSeconds = 15
	}
	if s.Fallback != nil && s.Fallback.FailureThreshold == 0 {
		s.Fallback.FailureThreshold = 3
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// PollingInterval is the time between two polls of the scaler.
func PollingInterval(spec *qnv1alpha1.HorizontalQNScalerSpec) time.Duration {
	return time.Duration(max(spec.PollingIntervalSeconds, 1)) * time.Second
}

// StageConditions returns the abort conditions to read this poll: those of
// the stage in progress, or none.
func StageConditions(spec *qnv1alpha1.HorizontalQNScalerSpec, status *qnv1alpha1.HorizontalQNScalerStatus) []qnv1alpha1.AbortCondition {
	if status.Stage == nil {
		return nil
	}
	i := int(status.Stage.Index) - 1
	if i < 0 || i >= len(spec.Stages) {
		return nil
	}
	return spec.Stages[i].AbortWhen
}

// Decide applies the rule. It is a pure function of its input, so every
// rule is pinned by a table test and qnctl explains a scaler offline with
// the very code the controller runs. It goes by phases: a paused scaler
// decides nothing; then what this poll observed is noted (observe); a
// target without replicas, a metric gone long enough for the fallback, a
// staged scale-up in progress and a metric unavailable are answered before
// the rule (beforeTheRule); a target outside its bounds is brought inside
// (bounds); then the thresholds decide (rule).
func Decide(in Input) Decision {
	st := in.Status
	p := &poll{in: in, spec: in.Spec, cur: in.Replicas, now: metav1.NewTime(in.Now), prev: Memory{
		LastScaleTime: st.LastScaleTime, LastScaleUpTime: st.LastScaleUpTime,
		BelowLowerSince: st.BelowLowerSince, MetricFailures: st.MetricFailures, Stage: st.Stage,
	}}
	if in.Paused {
		d := p.holdRemembering(p.prev, fmt.Sprintf("paused by annotation (%s or %s): the target keeps %d replicas", qnv1alpha1.PausedAnnotation, qnv1alpha1.KEDAPausedAnnotation, p.cur))
		d.Action, d.Disabled = qnv1alpha1.ActionNone, qnv1alpha1.ScalerReasonPaused
		return d
	}
	p.observed = p.observe()
	if d, decided := p.beforeTheRule(); decided {
		return d
	}
	if d, decided := p.bounds(); decided {
		return d
	}
	return p.rule()
}

// poll is one Decide call: its input, what the scaler remembered from the
// polls before (prev) and what this poll observed, whatever is decided.
type poll struct {
	in             Input
	spec           *qnv1alpha1.HorizontalQNScalerSpec
	cur            int32
	now            metav1.Time
	prev, observed Memory
}

// observe is the memory this poll leaves, whatever is decided: the
// metric's failures in a row, and since when it is below the lower
// threshold.
func (p *poll) observe() Memory {
	observed := p.prev
	if p.in.Metric.Err != nil {
		observed.MetricFailures = p.prev.MetricFailures + 1
		observed.BelowLowerSince = nil
		return observed
	}
	observed.MetricFailures = 0
	switch {
	case p.in.Metric.Value >= p.spec.Thresholds.Lower.AsApproximateFloat64():
		observed.BelowLowerSince = nil
	case p.prev.BelowLowerSince == nil:
		observed.BelowLowerSince = &p.now
	}
	return observed
}

// hold keeps the replicas, remembering what this poll observed.
func (p *poll) hold(reason string) Decision {
	return p.holdRemembering(p.observed, reason)
}

func (p *poll) holdRemembering(m Memory, reason string) Decision {
	return Decision{Action: qnv1alpha1.ActionHold, Replicas: p.cur, Reason: reason, Next: m, Observed: m}
}

// scaled is the memory after a write to replicas.
func (p *poll) scaled(replicas int32, stage *qnv1alpha1.ScalerStageStatus) Memory {
	m := p.observed
	m.Stage = stage
	if replicas != p.cur {
		m.LastScaleTime = &p.now
		if replicas > p.cur {
			m.LastScaleUpTime = &p.now
		}
	}
	return m
}

// beforeTheRule answers what the thresholds cannot judge: a target with
// no replicas, a metric unavailable (long enough for the fallback, or
// not), and a staged scale-up in progress, which decideStage follows.
func (p *poll) beforeTheRule() (Decision, bool) {
	spec, cur, err := p.spec, p.cur, p.in.Metric.Err
	if cur == 0 {
		d := p.hold("the target has 0 replicas: scaling is off, as for the HorizontalPodAutoscaler, until it has at least 1")
		d.Action, d.Disabled = qnv1alpha1.ActionNone, qnv1alpha1.ScalerReasonScalingDisabled
		d.Next.Stage, d.Observed.Stage = nil, nil
		return d, true
	}
	if err != nil && spec.Fallback != nil && p.observed.MetricFailures >= spec.Fallback.FailureThreshold {
		to := spec.Fallback.Replicas
		reason := fmt.Sprintf("%s unavailable for %d polls in a row (%v): fallback to %d replicas (%s)",
			MetricNoun(spec), p.observed.MetricFailures, err, to, arrow(cur, to))
		if p.in.Status.Stage != nil {
			reason += "; the staged scale-up in progress is dropped"
		}
		return Decision{Action: qnv1alpha1.ActionFallback, Replicas: to, Reason: reason, Next: p.scaled(to, nil), Observed: p.observed}, true
	}
	if p.in.Status.Stage != nil {
		return decideStage(p.in, p.observed, p.scaled, p.hold), true
	}
	if err != nil {
		if spec.Fallback != nil {
			return p.hold(fmt.Sprintf("%s unavailable (%v): holding %d replicas; fallback to %d after %d failed polls in a row (%d so far)",
				MetricNoun(spec), err, cur, spec.Fallback.Replicas, spec.Fallback.FailureThreshold, p.observed.MetricFailures)), true
		}
		return p.hold(fmt.Sprintf("%s unavailable (%v): holding %d replicas (no fallback set)", MetricNoun(spec), err, cur)), true
	}
	return Decision{}, false
}

// bounds brings a target outside [minReplicas, maxReplicas] inside at
// once, before the rule.
func (p *poll) bounds() (Decision, bool) {
	spec, cur := p.spec, p.cur
	if cur < spec.MinReplicas {
		to := spec.MinReplicas
		return Decision{Action: qnv1alpha1.ActionScaleUp, Replicas: to,
			Reason: fmt.Sprintf("%d replicas is below minReplicas %d: %s", cur, to, arrow(cur, to)), Next: p.scaled(to, nil), Observed: p.observed}, true
	}
	if cur > spec.MaxReplicas {
		to := spec.MaxReplicas
		return Decision{Action: qnv1alpha1.ActionScaleDown, Replicas: to,
			Reason: fmt.Sprintf("%d replicas is above maxReplicas %d: %s", cur, to, arrow(cur, to)), Next: p.scaled(to, nil), Observed: p.observed}, true
	}
	return Decision{}, false
}

// rule compares the value with the thresholds: above the upper one a
// scale-up (staged when stages are set), below the lower one a scale-down
// once the stabilization window has passed, between them a hold.
func (p *poll) rule() Decision {
	upper := p.spec.Thresholds.Upper.AsApproximateFloat64()
	lower := p.spec.Thresholds.Lower.AsApproximateFloat64()
	value := p.in.Metric.Text
	if value == "" {
		value = FormatNumber(p.in.Metric.Value)
	}
	value = figure(p.spec) + " " + value
	switch {
	case p.in.Metric.Value > upper:
		return p.above(fmt.Sprintf("%s > upper %s", value, FormatNumber(upper)))
	case p.in.Metric.Value < lower:
		return p.below(fmt.Sprintf("%s < lower %s", value, FormatNumber(lower)))
	}
	return p.hold(fmt.Sprintf("%s within [lower %s, upper %s]: holding %d replicas", value, FormatNumber(lower), FormatNumber(upper), p.cur))
}

// above decides for a value over the upper threshold (said by above):
// held at maxReplicas or in the scale-up cooldown, else up by one step,
// in stages when the spec has them.
func (p *poll) above(above string) Decision {
	spec, cur := p.spec, p.cur
	if cur >= spec.MaxReplicas {
		d := p.hold(fmt.Sprintf("%s, but the target is at maxReplicas %d", above, spec.MaxReplicas))
		d.Limit, d.LimitMessage = LimitTooMany, fmt.Sprintf("the rule asks for more than maxReplicas %d", spec.MaxReplicas)
		return d
	}
	if until, waiting := cooldownEnds(p.prev.LastScaleUpTime, *spec.ScaleUpCooldownSeconds, p.in.Now); waiting {
		return p.hold(fmt.Sprintf("%s, but the scale-up cooldown of %ds runs until %s (%s left): holding %d replicas",
			above, *spec.ScaleUpCooldownSeconds, until.UTC().Format(time.RFC3339), seconds(until.Sub(p.in.Now)), cur))
	}
	want := cur + spec.ScaleUpStep
	to := min(want, spec.MaxReplicas)
	d := Decision{Action: qnv1alpha1.ActionScaleUp, Replicas: to, Observed: p.observed}
	if to < want {
		d.Limit, d.LimitMessage = LimitTooMany, fmt.Sprintf("+%d would pass maxReplicas %d", spec.ScaleUpStep, spec.MaxReplicas)
	}
	plan := stagePlan(spec.Stages, cur, to)
	if len(plan) == 0 {
		d.Reason = fmt.Sprintf("%s: %s (%s)", above, plusReplicas(to-cur), arrow(cur, to))
		if d.Limit != LimitNone {
			d.Reason += fmt.Sprintf(", held at maxReplicas %d", spec.MaxReplicas)
		}
		d.Next = p.scaled(to, nil)
		return d
	}
	first := plan[0]
	stage := &qnv1alpha1.ScalerStageStatus{Index: 1, Count: int32(len(plan)), BaseReplicas: cur, TargetReplicas: to, Replicas: first, StartTime: p.now}
	d.Replicas = first
	d.Reason = fmt.Sprintf("%s: %s in stages (%s); stage 1 of %d: %s, observed %ds",
		above, plusReplicas(to-cur), arrow(cur, to), len(plan), arrow(cur, first), spec.Stages[0].ObserveSeconds)
	d.Next = p.scaled(first, stage)
	return d
}

// below decides for a value under the lower threshold (said by below):
// held at minReplicas or until the stabilization window has passed since
// it went below (or since the last scaling, if later), else down by one
// step.
func (p *poll) below(below string) Decision {
	spec, cur := p.spec, p.cur
	if cur <= spec.MinReplicas {
		d := p.hold(fmt.Sprintf("%s, but the target is at minReplicas %d", below, spec.MinReplicas))
		d.Limit, d.LimitMessage = LimitTooFew, fmt.Sprintf("the rule asks for fewer than minReplicas %d", spec.MinReplicas)
		return d
	}
	window := time.Duration(*spec.StabilizationWindowSeconds) * time.Second
	since := p.observed.BelowLowerSince.Time
	if p.prev.LastScaleTime != nil && p.prev.LastScaleTime.After(since) {
		since = p.prev.LastScaleTime.Time
	}
	if waited := p.in.Now.Sub(since); waited < window {
		counted := "since it went below"
		if since != p.observed.BelowLowerSince.Time {
			counted = "since the last scaling"
		}
		return p.hold(fmt.Sprintf("%s for %s %s; a scale-down waits for the %ds stabilization window (%s left): holding %d replicas",
			below, seconds(waited), counted, *spec.StabilizationWindowSeconds, seconds(window-waited), cur))
	}
	want := cur - spec.ScaleDownStep
	to := max(want, spec.MinReplicas)
	d := Decision{Action: qnv1alpha1.ActionScaleDown, Replicas: to, Observed: p.observed, Next: p.scaled(to, nil),
		Reason: fmt.Sprintf("%s for %s: %s (%s)", below, seconds(p.in.Now.Sub(p.observed.BelowLowerSince.Time)), minusReplicas(cur-to), arrow(cur, to))}
	if to > want {
		d.Limit, d.LimitMessage = LimitTooFew, fmt.Sprintf("-%d would pass minReplicas %d", spec.ScaleDownStep, spec.MinReplicas)
		d.Reason += fmt.Sprintf(", held at minReplicas %d", spec.MinReplicas)
	}
	return d
}

// figure is what reasons call the value: qnMetric.name, else "value".
func figure(spec *qnv1alpha1.HorizontalQNScalerSpec) string {
	if spec.QNMetric.Name != "" {
		return spec.QNMetric.Name
	}
	return "value"
}

// MetricNoun is what messages call the metric: "metric" and its
// qnMetric.name when it has one.
func MetricNoun(spec *qnv1alpha1.HorizontalQNScalerSpec) string {
	if spec.QNMetric.Name != "" {
		return "metric " + spec.QNMetric.Name
	}
	return "metric"
}

// decideStage moves a staged scale-up on: abandoned when someone else
// changed the replicas, rolled back when an abort condition holds, held
// while the stage is observed, and advanced once it passed.
func decideStage(in Input, observed Memory, scaled func(int32, *qnv1alpha1.ScalerStageStatus) Memory, hold func(string) Decision) Decision {
	spec, s, cur := in.Spec, in.Status.Stage, in.Replicas
	label := fmt.Sprintf("stage %d of %d", s.Index, s.Count)
	if cur != s.Replicas {
		d := hold(fmt.Sprintf("the target's replicas changed to %d outside the scaler during %s (it set %d): the staged scale-up is abandoned", cur, label, s.Replicas))
		d.Next.Stage, d.Observed.Stage = nil, nil
		return d
	}
	var readings []string
	var unreadable []string
	for _, c := range in.Abort {
		if c.Err != nil {
			unreadable = append(unreadable, fmt.Sprintf("%s (%v)", c.Condition.Name, c.Err))
			continue
		}
		threshold := c.Condition.Threshold.AsApproximateFloat64()
		text := c.Text
		if text == "" {
			text = FormatNumber(c.Value)
		}
		if holds(c.Value, c.Condition.Operator, threshold) {
			to := s.BaseReplicas
			m := scaled(to, nil)
			// The rollback starts the scale-up cooldown, whichever way it went.
			now := metav1.NewTime(in.Now)
			m.LastScaleUpTime, m.LastScaleTime = &now, &now
			return Decision{Action: qnv1alpha1.ActionStageAbort, Replicas: to, Aborted: c.Condition.Name, Next: m, Observed: observed,
				Reason: fmt.Sprintf("%s aborted: %s %s %s %s; back to the %d replicas before the scale-up (%s)",
					label, c.Condition.Name, text, c.Condition.Operator, FormatNumber(threshold), to, arrow(cur, to))}
		}
		readings = append(readings, fmt.Sprintf("%s %s %s %s", c.Condition.Name, text, negate(c.Condition.Operator), FormatNumber(threshold)))
	}
	observe := time.Duration(0)
	if i := int(s.Index) - 1; i < len(spec.Stages) {
		observe = time.Duration(spec.Stages[i].ObserveSeconds) * time.Second
	}
	elapsed := in.Now.Sub(s.StartTime.Time)
	passing := ""
	if len(readings) > 0 {
		passing = "; " + strings.Join(readings, ", ")
	}
	if elapsed < observe {
		return hold(fmt.Sprintf("%s observing %d replicas: %s of %s%s", label, cur, seconds(elapsed), seconds(observe), passing))
	}
	if len(unreadable) > 0 {
		return hold(fmt.Sprintf("%s observed for %s, but abort conditions cannot be read: %s; it advances once they read", label, seconds(elapsed), strings.Join(unreadable, ", ")))
	}
	plan := stagePlan(spec.Stages, s.BaseReplicas, s.TargetReplicas)
	next := int(s.Index) // 0-based index of the next stage
	if next < len(plan) && plan[next] > cur {
		to := min(plan[next], max(spec.MaxReplicas, cur))
		stage := &qnv1alpha1.ScalerStageStatus{Index: int32(next + 1), Count: s.Count, BaseReplicas: s.BaseReplicas,
			TargetReplicas: s.TargetReplicas, Replicas: to, StartTime: metav1.NewTime(in.Now)}
		return Decision{Action: qnv1alpha1.ActionStageAdvance, Replicas: to, Next: scaled(to, stage), Observed: observed,
			Reason: fmt.Sprintf("%s passed (%s observed%s): stage %d of %d: %s", label, seconds(elapsed), passing, next+1, s.Count, arrow(cur, to))}
	}
	to := min(s.TargetReplicas, max(spec.MaxReplicas, cur))
	if to <= cur {
		d := hold(fmt.Sprintf("%s passed (%s observed%s): the staged scale-up is complete at %d replicas", label, seconds(elapsed), passing, cur))
		d.Action = qnv1alpha1.ActionStageAdvance
		d.Next.Stage = nil
		return d
	}
	return Decision{Action: qnv1alpha1.ActionStageAdvance, Replicas: to, Next: scaled(to, nil), Observed: observed,
		Reason: fmt.Sprintf("%s passed (%s observed%s): the rest at once, %s; the staged scale-up is complete", label, seconds(elapsed), passing, arrow(cur, to))}
}

// stagePlan returns the replicas at the end of each stage of a scale-up
// from base to target: each stage's cumulative percent of the added
// replicas, rounded up, at least one more than the stage before. Stages
// that would reach the target end the plan there; the rest (if any) is
// added after the last stage. Empty when there are no stages or nothing
// to add.
func stagePlan(stages []qnv1alpha1.Stage, base, target int32) []int32 {
	add := target - base
	if add <= 0 {
		return nil
	}
	var plan []int32
	prev := int32(0)
	for _, s := range stages {
		n := int32(math.Ceil(float64(add) * float64(s.Percent) / 100))
		n = min(max(n, prev+1), add)
		plan = append(plan, base+n)
		prev = n
		if n == add {
			break
		}
	}
	return plan
}

// cooldownEnds reports when a cooldown that started at last ends, and
// whether now is before that.
func cooldownEnds(last *metav1.Time, cooldownSeconds int32, now time.Time) (time.Time, bool) {
	if last == nil || cooldownSeconds <= 0 {
		return time.Time{}, false
	}
	until := last.Add(time.Duration(cooldownSeconds) * time.Second)
	return until, now.Before(until)
}

func holds(v float64, op qnv1alpha1.AbortOperator, threshold float64) bool {
	switch op {
	case qnv1alpha1.AbortAbove:
		return v > threshold
	case qnv1alpha1.AbortAboveOrEqual:
		return v >= threshold
	case qnv1alpha1.AbortBelow:
		return v < threshold
	case qnv1alpha1.AbortBelowOrEqual:
		return v <= threshold
	}
	return false
}

// negate writes the comparison that holds when op does not.
func negate(op qnv1alpha1.AbortOperator) string {
	switch op {
	case qnv1alpha1.AbortAbove:
		return "≤"
	case qnv1alpha1.AbortAboveOrEqual:
		return "<"
	case qnv1alpha1.AbortBelow:
		return "≥"
	case qnv1alpha1.AbortBelowOrEqual:
		return ">"
	}
	return "?"
}

// FormatNumber writes v to 12 significant digits, the shortest way, in
// plain decimals unless it is very large or very small: binary floating
// point's noise (a rate of 0.1+0.2 is 0.30000000000000004) is not shown,
// a figure's real digits are.
func FormatNumber(v float64) string {
	if r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64); err == nil {
		v = r
	}
	if a := math.Abs(v); a != 0 && (a < 1e-4 || a >= 1e15) {
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func arrow(from, to int32) string { return fmt.Sprintf("%d → %d", from, to) }

func plusReplicas(n int32) string {
	if n == 1 {
		return "+1 replica"
	}
	return fmt.Sprintf("+%d replicas", n)
}

func minusReplicas(n int32) string {
	if n == 1 {
		return "-1 replica"
	}
	return fmt.Sprintf("-%d replicas", n)
}

// seconds writes a duration in whole seconds, rounded up, as the spec
// counts them.
func seconds(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return fmt.Sprintf("%ds", int64(math.Ceil(d.Seconds())))
}
