package health

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/internal/words"
)

// Signals are the facts about one QuantumNode, as observed.
type Signals struct {
	Node NodeSignal
	// Ports has one entry per declared service, in spec order.
	Ports []PortSignal
}

// NodeSignal is the Node the QuantumNode runs on.
type NodeSignal struct {
	// Name is the Node's name ("" when the node is bound by a label and no
	// Node carries it).
	Name  string
	Found bool
	Ready bool
	// NotReadySince is when Ready stopped being True (the condition's
	// lastTransitionTime); zero when unknown.
	NotReadySince time.Time
	// Why is the kubelet's reason and message, for the condition message.
	Why string
}

// PortSignal is one declared service's endpoints and active check.
type PortSignal struct {
	Name string
	Port int32
	// ReadyEndpoints counts ready endpoints serving the port in the
	// Service's EndpointSlices.
	ReadyEndpoints int
	// ProbeFailures counts failed checks in a row; -1 while the port has
	// not been checked yet, or is not checked.
	ProbeFailures int
	// ProbeError is the last failure.
	ProbeError string
	// ProbeTarget is the address checked, for messages.
	ProbeTarget string
}

// Guard is what the policy's guards say about starting a step now.
// Computing it reads every node of the policy, so Next asks for it only
// when it is about to start one.
type Guard struct {
	// Paused is the reason of a pause annotation, "" when not paused.
	Paused string
	// TooManyUnhealthy says why maxUnhealthy stops remediation; "" when it
	// does not.
	TooManyUnhealthy string
	// NoSlot says maxInFlight steps are already running; "" when a slot is
	// free.
	NoSlot string
}

func (g Guard) blocks() string {
	switch {
	case g.Paused != "":
		return g.Paused
	case g.TooManyUnhealthy != "":
		return g.TooManyUnhealthy
	}
	return g.NoSlot
}

// Input is everything Next decides from.
type Input struct {
	Now      time.Time
	Settings Settings
	Signals  Signals
	// State is status.health so far ("" for a node not judged yet).
	State qnv1alpha1.HealthState
	// Reason is the Healthy condition's reason so far.
	Reason string
	// UnhealthySince is when the Healthy condition turned False; zero when
	// it is True or unset.
	UnhealthySince time.Time
	// Current is status.remediation; History is status.remediationHistory.
	Current *qnv1alpha1.RemediationStatus
	History []qnv1alpha1.RemediationStatus
	// Guard is asked for only when a step is about to start; nil means no
	// guard stops it.
	Guard func() Guard
}

// Outcome is what Next decided.
type Outcome struct {
	State qnv1alpha1.HealthState
	// Reason and Message of the Healthy condition.
	Reason, Message string
	// Conclude, when set, ends the step in progress with this result and
	// message (before Start, when both are set).
	Conclude *Conclusion
	// Start, when set, is the step to start now.
	Start *Start
	// Blocked says why a step was due and did not start (a guard); a
	// blocked node is looked at again after RequeueAfter.
	Blocked string
	// RequeueAfter is when the decision could change by time alone: a
	// threshold or a timeout passing. 0 means only a new observation can.
	RequeueAfter time.Duration
}

// Conclusion ends the step in progress.
type Conclusion struct {
	Result  qnv1alpha1.RemediationResult
	Message string
}

// Start is a step to start.
type Start struct {
	Action  qnv1alpha1.RemediationAction
	Attempt int
	// DryRun: record it, do nothing.
	DryRun bool
}

// blockedRetry is how soon a step held back by a guard is looked at
// again; the guards also change with events that requeue the node.
const blockedRetry = 10 * time.Second

// Next is the state machine: from the signals, the status so far and the
// policy, the new health state, the Healthy condition and the step to end
// or start. docs/controller.md's transitions table is its specification;
// machine_test.go tests it row by row.
func Next(in Input) Outcome {
	a := assess(in)
	out := Outcome{State: a.state, Reason: a.reason, Message: a.message, RequeueAfter: a.requeue}
	current := in.Current
	if current != nil && current.FinishedAt != nil {
		current = nil
	}
	ladder := in.Settings.Ladder

	if a.state == qnv1alpha1.HealthHealthy {
		if current != nil {
			out.Conclude = &Conclusion{Result: qnv1alpha1.ResultSucceeded, Message: fmt.Sprintf("%s attempt %d: the node is Healthy again", current.Action, current.Attempt)}
			if current.Result == qnv1alpha1.ResultDryRun {
				out.Conclude = &Conclusion{Result: qnv1alpha1.ResultDryRun, Message: fmt.Sprintf("dry run of %s attempt %d: the node became Healthy without it", current.Action, current.Attempt)}
			}
		}
		return out
	}
	if in.State == qnv1alpha1.HealthIsolated {
		out.State, out.Reason, out.Message = isolatedStill(in, a)
		out.RequeueAfter = 0
		if current != nil {
			out.Conclude = &Conclusion{Result: qnv1alpha1.ResultAbandoned, Message: "the node is Isolated"}
		}
		return out
	}
	if current != nil {
		step, known := ladder.step(current.Action)
		if !known {
			// The policy no longer has this step (or no ladder at all).
			out.Conclude = &Conclusion{Result: qnv1alpha1.ResultAbandoned, Message: fmt.Sprintf("the policy no longer has a %s step", current.Action)}
			current = nil
		} else if deadline := current.StartedAt.Add(step.Timeout); in.Now.Before(deadline) {
			out.RequeueAfter = controller.Earliest(out.RequeueAfter, deadline.Sub(in.Now))
			return out
		} else {
			result := qnv1alpha1.ResultFailed
			msg := fmt.Sprintf("%s attempt %d: the node was not Healthy within %s (%s)", current.Action, current.Attempt, step.Timeout, a.reason)
			if current.Result == qnv1alpha1.ResultDryRun {
				result = qnv1alpha1.ResultDryRun
				msg = "dry run: " + msg
			}
			out.Conclude = &Conclusion{Result: result, Message: msg}
			// The history as it will be once the conclusion is written:
			// the step's entry (the newest, when status holds it) ended.
			ended := *current
			ended.Result, ended.Message = result, msg
			ended.FinishedAt = timePtr(in.Now)
			in.History = withEnded(in.History, ended)
			current = nil
		}
	}
	if a.state != qnv1alpha1.HealthFailed || !ladder.Remediates() {
		return out
	}

	// Failed, no step running: isolate, or climb.
	if !ladder.DryRun {
		if n := failedRestarts(in.History, in.Now, ladder.IsolationWindow); n >= ladder.FailedRestarts && ladder.FailedRestarts > 0 {
			out.State, out.Reason = qnv1alpha1.HealthIsolated, qnv1alpha1.ReasonRestartsFailing
			out.Message = fmt.Sprintf("%d restarts failed within %s; remediation stopped until the node is Healthy again (%s)", n, ladder.IsolationWindow, a.message)
			out.RequeueAfter = 0
			return out
		}
	}
	next, ok := nextStep(ladder, in.History, episodeStart(in))
	if !ok {
		if ladder.DryRun {
			out.Message = fmt.Sprintf("%s; dry run: every step was recorded and the node would now be Isolated", a.message)
			out.RequeueAfter = 0
			return out
		}
		out.State, out.Reason = qnv1alpha1.HealthIsolated, qnv1alpha1.ReasonLadderExhausted
		out.Message = fmt.Sprintf("every remediation step (%s) was tried and the node is not Healthy; remediation stopped until it is (%s)", stepNames(ladder), a.message)
		out.RequeueAfter = 0
		return out
	}
	if in.Guard != nil {
		if why := in.Guard().blocks(); why != "" {
			out.Blocked = fmt.Sprintf("%s attempt %d not started: %s", next.Action, next.Attempt, why)
			out.RequeueAfter = controller.Earliest(out.RequeueAfter, blockedRetry)
			return out
		}
	}
	next.DryRun = ladder.DryRun
	out.Start = &next
	if step, ok := ladder.step(next.Action); ok {
		out.RequeueAfter = controller.Earliest(out.RequeueAfter, step.Timeout)
	}
	return out
}

// withEnded returns history with the step ended replacing its running
// entry, or in front when history does not hold it yet.
func withEnded(history []qnv1alpha1.RemediationStatus, ended qnv1alpha1.RemediationStatus) []qnv1alpha1.RemediationStatus {
	out := make([]qnv1alpha1.RemediationStatus, 0, len(history)+1)
	out = append(out, ended)
	for i, h := range history {
		if i == 0 && h.Action == ended.Action && h.StartedAt.Equal(&ended.StartedAt) {
			continue
		}
		out = append(out, h)
	}
	return out
}

// isolatedStill keeps an Isolated node Isolated while any signal is bad,
// with the reason it was isolated for, and the current problem.
func isolatedStill(in Input, a assessment) (qnv1alpha1.HealthState, string, string) {
	reason := in.Reason
	if reason != qnv1alpha1.ReasonRestartsFailing {
		reason = qnv1alpha1.ReasonLadderExhausted
	}
	return qnv1alpha1.HealthIsolated, reason, fmt.Sprintf("isolated: no remediation until the node is Healthy again (%s)", a.message)
}

// episodeStart is when the current unhealthy episode began: steps started
// before it belong to an earlier climb.
func episodeStart(in Input) time.Time {
	if in.UnhealthySince.IsZero() {
		return in.Now
	}
	return in.UnhealthySince
}

// nextStep is the first rung with attempts left in this episode.
func nextStep(l Ladder, history []qnv1alpha1.RemediationStatus, since time.Time) (Start, bool) {
	used := map[qnv1alpha1.RemediationAction]int{}
	for _, h := range history {
		if !h.StartedAt.Time.Before(since) && h.Result != qnv1alpha1.ResultAbandoned {
			used[h.Action]++
		}
	}
	for _, s := range l.Steps {
		if used[s.Action] < s.Attempts {
			return Start{Action: s.Action, Attempt: used[s.Action] + 1}, true
		}
	}
	return Start{}, false
}

// failedRestarts counts Restart steps that failed within window before now.
func failedRestarts(history []qnv1alpha1.RemediationStatus, now time.Time, window time.Duration) int {
	n := 0
	for _, h := range history {
		if h.Action != qnv1alpha1.ActionRestart || h.Result != qnv1alpha1.ResultFailed || h.FinishedAt == nil {
			continue
		}
		if now.Sub(h.FinishedAt.Time) <= window {
			n++
		}
	}
	return n
}

func stepNames(l Ladder) string {
	names := make([]string, len(l.Steps))
	for i, s := range l.Steps {
		names[i] = string(s.Action)
	}
	return strings.Join(names, ", ")
}

// assessment is the state the signals alone give, before the ladder.
type assessment struct {
	state           qnv1alpha1.HealthState
	reason, message string
	requeue         time.Duration
}

// severity orders the states the signals can give.
func severity(s qnv1alpha1.HealthState) int {
	switch s {
	case qnv1alpha1.HealthDegraded:
		return 1
	case qnv1alpha1.HealthFailed:
		return 2
	}
	return 0
}

// assess judges each signal and keeps the worst; among equals, the first
// in the order Node, probes, endpoints, which is the order of what a
// person should look at first.
func assess(in Input) assessment {
	s := in.Settings
	since := episodeStart(in)
	worst := assessment{state: qnv1alpha1.HealthHealthy, reason: qnv1alpha1.ReasonAllSignalsGood}
	var requeue time.Duration
	consider := func(state qnv1alpha1.HealthState, reason, message string) {
		if severity(state) > severity(worst.state) {
			worst = assessment{state: state, reason: reason, message: message}
		}
	}
	// byDuration judges a signal bad since from by its two thresholds, and
	// notes when it will cross the next one.
	byDuration := func(from time.Time, degradedAfter, failedAfter time.Duration) qnv1alpha1.HealthState {
		bad := max(in.Now.Sub(from), 0)
		switch {
		case bad >= failedAfter:
			return qnv1alpha1.HealthFailed
		case bad >= degradedAfter:
			requeue = controller.Earliest(requeue, failedAfter-bad)
			return qnv1alpha1.HealthDegraded
		}
		requeue = controller.Earliest(requeue, degradedAfter-bad)
		return qnv1alpha1.HealthHealthy
	}

	n := in.Signals.Node
	switch {
	case !n.Found:
		state := byDuration(since, s.NodeDegradedAfter, s.NodeFailedAfter)
		what := "no Node named " + n.Name
		if n.Name == "" {
			what = "no Node carries its " + qnv1alpha1.NodeLabel + " label"
		}
		consider(state, qnv1alpha1.ReasonNodeNotFound, fmt.Sprintf("%s since %s; Failed after %s", what, stamp(since), s.NodeFailedAfter))
	case !n.Ready:
		from := n.NotReadySince
		if from.IsZero() || from.After(in.Now) {
			from = since
		}
		state := byDuration(from, s.NodeDegradedAfter, s.NodeFailedAfter)
		consider(state, qnv1alpha1.ReasonNodeNotReady, fmt.Sprintf("node %s has not been Ready since %s%s; Degraded after %s, Failed after %s", n.Name, stamp(from), n.Why, s.NodeDegradedAfter, s.NodeFailedAfter))
	}
	if p := s.Probe; p != nil {
		for _, port := range in.Signals.Ports {
			if port.ProbeFailures <= 0 {
				continue
			}
			state := qnv1alpha1.HealthDegraded
			if port.ProbeFailures > p.MaxFailures {
				state = qnv1alpha1.HealthFailed
			}
			consider(state, qnv1alpha1.ReasonProbeFailing, fmt.Sprintf("port %s:%d on %s failed %s in a row (%s); Failed after more than %d",
				port.Name, port.Port, port.ProbeTarget, words.Count(port.ProbeFailures, "check"), port.ProbeError, p.MaxFailures))
		}
	}
	if e := s.Endpoints; e != nil {
		for _, port := range in.Signals.Ports {
			if port.ReadyEndpoints >= e.MinReady {
				continue
			}
			state := byDuration(since, e.DegradedAfter, e.FailedAfter)
			consider(state, qnv1alpha1.ReasonEndpointsNotReady, fmt.Sprintf("port %s:%d has %d ready endpoints (needs %d) since %s; Failed after %s",
				port.Name, port.Port, port.ReadyEndpoints, e.MinReady, stamp(since), e.FailedAfter))
		}
	}
	worst.requeue = requeue
	if worst.state == qnv1alpha1.HealthHealthy {
		worst.message = healthyMessage(in)
	}
	return worst
}

func healthyMessage(in Input) string {
	parts := []string{fmt.Sprintf("node %s is Ready", in.Signals.Node.Name)}
	if in.Settings.Probe != nil {
		parts = append(parts, "every port answers its check")
	}
	if e := in.Settings.Endpoints; e != nil {
		parts = append(parts, fmt.Sprintf("every port has at least %d ready endpoints", e.MinReady))
	}
	return strings.Join(parts, "; ")
}

// stamp renders a time for a condition message. Messages carry times, not
// durations, so that a message does not change, and cause a status write,
// on every reconcile.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func timePtr(t time.Time) *metav1.Time {
	v := metav1.NewTime(t)
	return &v
}
