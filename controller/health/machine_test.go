package health

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// policy is the settings every row starts from: Node degraded after 30s
// and failed after 5m, endpoints checked (failed after 5m), probes with 3
// tolerated failures, and a ladder Restart (2m, 1 attempt), Reschedule
// (5m), Rebuild (10m) isolating after 2 failed restarts in 5m.
func policy() Settings {
	one := int32(1)
	s, problems := Resolve(&qnv1alpha1.QuantumNodeHealthPolicySpec{
		Endpoints: &qnv1alpha1.EndpointsCheck{MinReady: &one},
		Probe:     &qnv1alpha1.ProbeCheck{},
		Remediation: &qnv1alpha1.RemediationPolicy{
			Restart:    &qnv1alpha1.RestartStep{},
			Reschedule: &qnv1alpha1.RescheduleStep{},
			Rebuild:    &qnv1alpha1.RebuildStep{},
		},
	})
	if len(problems) > 0 {
		panic(problems)
	}
	return s
}

// good are signals with nothing wrong: Node Ready, one port with an
// endpoint that answers its check.
func good() Signals {
	return Signals{
		Node:  NodeSignal{Name: "worker-1", Found: true, Ready: true},
		Ports: []PortSignal{{Name: "grpc", Port: 9090, ReadyEndpoints: 1, ProbeFailures: 0, ProbeTarget: "10.0.0.1:9090"}},
	}
}

func notReadySince(d time.Duration) func(*Input) {
	return func(in *Input) {
		in.Signals.Node.Ready = false
		in.Signals.Node.NotReadySince = t0.Add(-d)
		in.Signals.Node.Why = " (KubeletNotReady: runtime down)"
	}
}

func unhealthyFor(d time.Duration, state qnv1alpha1.HealthState) func(*Input) {
	return func(in *Input) { in.State, in.UnhealthySince = state, t0.Add(-d) }
}

func step(action qnv1alpha1.RemediationAction, attempt int32, startedAgo time.Duration, result qnv1alpha1.RemediationResult, finishedAgo ...time.Duration) qnv1alpha1.RemediationStatus {
	s := qnv1alpha1.RemediationStatus{Action: action, Attempt: attempt, StartedAt: metav1.NewTime(t0.Add(-startedAgo)), Result: result}
	if len(finishedAgo) > 0 {
		f := metav1.NewTime(t0.Add(-finishedAgo[0]))
		s.FinishedAt = &f
	}
	return s
}

// running makes s the step in progress.
func running(s qnv1alpha1.RemediationStatus) func(*Input) {
	return func(in *Input) { in.Current = &s }
}

func history(h ...qnv1alpha1.RemediationStatus) func(*Input) {
	return func(in *Input) {
		in.History = h
		if len(h) > 0 {
			in.Current = &h[0]
		}
	}
}

func guard(g Guard) func(*Input) { return func(in *Input) { in.Guard = func() Guard { return g } } }

type want struct {
	state    qnv1alpha1.HealthState
	reason   string
	start    *Start
	conclude qnv1alpha1.RemediationResult
	blocked  bool
	requeue  time.Duration
}

// transitions are the rows of docs/controller.md's transitions table, by
// their id; TestEveryTransitionIsDocumented holds the two equal.
var transitions = map[string]struct {
	change []func(*Input)
	want   want
}{
	"H1 a node not judged yet, every signal good, is Healthy": {
		want: want{state: qnv1alpha1.HealthHealthy, reason: qnv1alpha1.ReasonAllSignalsGood},
	},
	"H2 a Node not Ready for less than node.degradedAfter leaves the node Healthy, looked at again when it would be Degraded": {
		change: []func(*Input){unhealthyFor(0, qnv1alpha1.HealthHealthy), notReadySince(10 * time.Second)},
		want:   want{state: qnv1alpha1.HealthHealthy, reason: qnv1alpha1.ReasonAllSignalsGood, requeue: 20 * time.Second},
	},
	"H3 a Node not Ready for node.degradedAfter makes a Healthy node Degraded": {
		change: []func(*Input){notReadySince(30 * time.Second)},
		want:   want{state: qnv1alpha1.HealthDegraded, reason: qnv1alpha1.ReasonNodeNotReady, requeue: 4*time.Minute + 30*time.Second},
	},
	"H4 a port failing its check up to maxConsecutiveFailures times in a row makes a Healthy node Degraded": {
		change: []func(*Input){func(in *Input) {
			in.Signals.Ports[0].ProbeFailures, in.Signals.Ports[0].ProbeError = 3, "no answer within 1s"
		}},
		want: want{state: qnv1alpha1.HealthDegraded, reason: qnv1alpha1.ReasonProbeFailing},
	},
	"H5 a port with fewer than endpoints.minReady ready endpoints makes a Healthy node Degraded": {
		change: []func(*Input){func(in *Input) { in.Signals.Ports[0].ReadyEndpoints = 0 }},
		want:   want{state: qnv1alpha1.HealthDegraded, reason: qnv1alpha1.ReasonEndpointsNotReady, requeue: 5 * time.Minute},
	},
	"H6 a Node not found for node.degradedAfter makes the node Degraded": {
		change: []func(*Input){unhealthyFor(0, qnv1alpha1.HealthHealthy), func(in *Input) {
			in.Settings.NodeDegradedAfter = 0
			in.Signals.Node = NodeSignal{Name: "worker-1"}
		}},
		want: want{state: qnv1alpha1.HealthDegraded, reason: qnv1alpha1.ReasonNodeNotFound, requeue: 5 * time.Minute},
	},
	"H7 a Node not Ready for node.failedAfter makes a Degraded node Failed and starts Restart": {
		change: []func(*Input){unhealthyFor(5*time.Minute, qnv1alpha1.HealthDegraded), notReadySince(5 * time.Minute)},
		want:   want{state: qnv1alpha1.HealthFailed, reason: qnv1alpha1.ReasonNodeNotReady, start: &Start{Action: qnv1alpha1.ActionRestart, Attempt: 1}, requeue: 2 * time.Minute},
	},
	"H8 a port failing more than maxConsecutiveFailures checks in a row makes the node Failed and starts Restart": {
		change: []func(*Input){unhealthyFor(30*time.Second, qnv1alpha1.HealthDegraded), func(in *Input) { in.Signals.Ports[0].ProbeFailures = 4 }},
		want:   want{state: qnv1alpha1.HealthFailed, reason: qnv1alpha1.ReasonProbeFailing, start: &Start{Action: qnv1alpha1.ActionRestart, Attempt: 1}, requeue: 2 * time.Minute},
	},
	"H9 a port without enough ready endpoints for endpoints.failedAfter makes the node Failed and starts Restart": {
		change: []func(*Input){unhealthyFor(5*time.Minute, qnv1alpha1.HealthDegraded), func(in *Input) { in.Signals.Ports[0].ReadyEndpoints = 0 }},
		want:   want{state: qnv1alpha1.HealthFailed, reason: qnv1alpha1.ReasonEndpointsNotReady, start: &Start{Action: qnv1alpha1.ActionRestart, Attempt: 1}, requeue: 2 * time.Minute},
	},
	"H10 a node first judged with a Node down for longer than node.failedAfter goes straight to Failed and starts Restart": {
		change: []func(*Input){notReadySince(time.Hour)},
		want:   want{state: qnv1alpha1.HealthFailed, reason: qnv1alpha1.ReasonNodeNotReady, start: &Start{Action: qnv1alpha1.ActionRestart, Attempt: 1}, requeue: 2 * time.Minute},
	},
	"H11 every signal good again makes a Degraded node Healthy": {
		change: []func(*Input){unhealthyFor(time.Minute, qnv1alpha1.HealthDegraded)},
		want:   want{state: qnv1alpha1.HealthHealthy, reason: qnv1alpha1.ReasonAllSignalsGood},
	},
	"H12 a step within its timeout is waited for until the timeout": {
		change: []func(*Input){unhealthyFor(6*time.Minute, qnv1alpha1.HealthFailed), notReadySince(6 * time.Minute),
			running(step(qnv1alpha1.ActionRestart, 1, 30*time.Second, qnv1alpha1.ResultInProgress))},
		want: want{state: qnv1alpha1.HealthFailed, reason: qnv1alpha1.ReasonNodeNotReady, requeue: 90 * time.Second},
	},
	"H13 every signal good while a step runs makes the node Healthy and the step Succeeded": {
		change: []func(*Input){unhealthyFor(6*time.Minute, qnv1alpha1.HealthFailed),
			running(step(qnv1alpha1.ActionRestart, 1, 30*time.Second, qnv1alpha1.ResultInProgress))},
		want: want{state: qnv1alpha1.HealthHealthy, reason: qnv1alpha1.ReasonAllSignalsGood, conclude: qnv1alpha1.ResultSucceeded},
	},
	"H14 a step past its timeout with attempts left fails and starts its next attempt": {
		change: []func(*Input){unhealthyFor(10*time.Minute, qnv1alpha1.HealthFailed), notReadySince(10 * time.Minute),
			func(in *Input) { in.Settings.Ladder.Steps[0].Attempts = 2 },
			// As status holds it: the running step is also the newest entry.
			history(step(qnv1alpha1.ActionRestart, 1, 2*time.Minute, qnv1alpha1.ResultInProgress))},
		want: want{state: qnv1alpha1.HealthFailed, reason: qnv1alpha1.ReasonNodeNotReady, conclude: qnv1alpha1.ResultFailed, start: &Start{Action: qnv1alpha1.ActionRestart, Attempt: 2}, requeue: 2 * time.Minute},
	},
	"H15 a step past its timeout with no attempt left fails and the next step starts": {
		change: []func(*Input){unhealthyFor(10*time.Minute, qnv1alpha1.HealthFailed), notReadySince(10 * time.Minute),
			history(step(qnv1alpha1.ActionRestart, 1, 2*time.Minute, qnv1alpha1.ResultInProgress))},
		want: want{state: qnv1alpha1.HealthFailed, reason: qnv1alpha1.ReasonNodeNotReady, conclude: qnv1alpha1.ResultFailed, start: &Start{Action: qnv1alpha1.ActionReschedule, Attempt: 1}, requeue: 5 * time.Minute},
	},
	"H16 failedRestarts restarts failed within the isolation window make the node Isolated and stop the ladder": {
		change: []func(*Input){unhealthyFor(10*time.Minute, qnv1alpha1.HealthFailed), notReadySince(10 * time.Minute),
			func(in *Input) { in.Settings.Ladder.Steps[0].Attempts = 2 },
			history(step(qnv1alpha1.ActionRestart, 2, 2*time.Minute, qnv1alpha1.ResultInProgress),
				step(qnv1alpha1.ActionRestart, 1, 4*time.Minute, qnv1alpha1.ResultFailed, 2*time.Minute))},
		want: want{state: qnv1alpha1.HealthIsolated, reason: qnv1alpha1.ReasonRestartsFailing, conclude: qnv1alpha1.ResultFailed},
	},
	"H17 restarts that failed longer ago than the isolation window do not isolate": {
		change: []func(*Input){unhealthyFor(10*time.Minute, qnv1alpha1.HealthFailed), notReadySince(10 * time.Minute),
			func(in *Input) { in.Settings.Ladder.Steps[0].Attempts = 3 },
			history(step(qnv1alpha1.ActionRestart, 2, 8*time.Minute, qnv1alpha1.ResultFailed, 6*time.Minute),
				step(qnv1alpha1.ActionRestart, 1, 10*time.Minute, qnv1alpha1.ResultFailed, 8*time.Minute))},
		want: want{state: qnv1alpha1.HealthFailed, reason: qnv1alpha1.ReasonNodeNotReady, start: &Start{Action: qnv1alpha1.ActionRestart, Attempt: 3}, requeue: 2 * time.Minute},
	},
	"H18 the last step past its timeout makes the node Isolated": {
		change: []func(*Input){unhealthyFor(time.Hour, qnv1alpha1.HealthFailed), notReadySince(time.Hour),
			history(step(qnv1alpha1.ActionRebuild, 1, 10*time.Minute, qnv1alpha1.ResultInProgress),
				step(qnv1alpha1.ActionReschedule, 1, 15*time.Minute, qnv1alpha1.ResultFailed, 10*time.Minute),
				step(qnv1alpha1.ActionRestart, 1, 17*time.Minute, qnv1alpha1.ResultFailed, 15*time.Minute))},
		want: want{state: qnv1alpha1.HealthIsolated, reason: qnv1alpha1.ReasonLadderExhausted, conclude: qnv1alpha1.ResultFailed},
	},
	"H19 more than maxUnhealthy unhealthy nodes stop a Failed node's step": {
		change: []func(*Input){unhealthyFor(5*time.Minute, qnv1alpha1.HealthDegraded), notReadySince(5 * time.Minute),
			guard(Guard{TooManyUnhealthy: "6 of 10 selected nodes are unhealthy, more than maxUnhealthy 40% (4)"})},
		want: want{state: qnv1alpha1.HealthFailed, reason: qnv1alpha1.ReasonNodeNotReady, blocked: true, requeue: blockedRetry},
	},
	"H20 a pause annotation stops a Failed node's step": {
		change: []func(*Input){unhealthyFor(5*time.Minute, qnv1alpha1.HealthDegraded), notReadySince(5 * time.Minute),
			guard(Guard{Paused: "paused by annotation qn.dev/pause-remediation: maintenance"})},
		want: want{state: qnv1alpha1.HealthFailed, reason: qnv1alpha1.ReasonNodeNotReady, blocked: true, requeue: blockedRetry},
	},
	"H21 maxInFlight steps already running hold a Failed node's step back": {
		change: []func(*Input){unhealthyFor(5*time.Minute, qnv1alpha1.HealthDegraded), notReadySince(5 * time.Minute),
			guard(Guard{NoSlot: "1 of maxInFlight 1 remediations is running"})},
		want: want{state: qnv1alpha1.HealthFailed, reason: qnv1alpha1.ReasonNodeNotReady, blocked: true, requeue: blockedRetry},
	},
	"H22 in dry run a Failed node's step is recorded, not done": {
		change: []func(*Input){unhealthyFor(5*time.Minute, qnv1alpha1.HealthDegraded), notReadySince(5 * time.Minute),
			func(in *Input) { in.Settings.Ladder.DryRun = true }},
		want: want{state: qnv1alpha1.HealthFailed, reason: qnv1alpha1.ReasonNodeNotReady, start: &Start{Action: qnv1alpha1.ActionRestart, Attempt: 1, DryRun: true}, requeue: 2 * time.Minute},
	},
	"H23 without remediation in the policy a Failed node is only reported": {
		change: []func(*Input){unhealthyFor(5*time.Minute, qnv1alpha1.HealthDegraded), notReadySince(5 * time.Minute),
			func(in *Input) { in.Settings.Ladder = Ladder{} }},
		want: want{state: qnv1alpha1.HealthFailed, reason: qnv1alpha1.ReasonNodeNotReady},
	},
	"H24 an Isolated node with a signal still bad stays Isolated and nothing is done": {
		change: []func(*Input){unhealthyFor(time.Hour, qnv1alpha1.HealthIsolated), notReadySince(time.Hour),
			func(in *Input) { in.Reason = qnv1alpha1.ReasonRestartsFailing }},
		want: want{state: qnv1alpha1.HealthIsolated, reason: qnv1alpha1.ReasonRestartsFailing},
	},
	"H25 every signal good again makes an Isolated node Healthy": {
		change: []func(*Input){unhealthyFor(time.Hour, qnv1alpha1.HealthIsolated)},
		want:   want{state: qnv1alpha1.HealthHealthy, reason: qnv1alpha1.ReasonAllSignalsGood},
	},
	"H26 a step the policy no longer has is abandoned and the ladder goes on": {
		change: []func(*Input){unhealthyFor(10*time.Minute, qnv1alpha1.HealthFailed), notReadySince(10 * time.Minute),
			func(in *Input) { in.Settings.Ladder.Steps = in.Settings.Ladder.Steps[1:] },
			running(step(qnv1alpha1.ActionRestart, 1, 30*time.Second, qnv1alpha1.ResultInProgress))},
		want: want{state: qnv1alpha1.HealthFailed, reason: qnv1alpha1.ReasonNodeNotReady, conclude: qnv1alpha1.ResultAbandoned, start: &Start{Action: qnv1alpha1.ActionReschedule, Attempt: 1}, requeue: 5 * time.Minute},
	},
	"H27 steps of an earlier unhealthy episode do not count: a new episode climbs from Restart": {
		change: []func(*Input){unhealthyFor(5*time.Minute, qnv1alpha1.HealthDegraded), notReadySince(5 * time.Minute),
			history(step(qnv1alpha1.ActionRestart, 1, 2*time.Hour, qnv1alpha1.ResultSucceeded, 119*time.Minute))},
		want: want{state: qnv1alpha1.HealthFailed, reason: qnv1alpha1.ReasonNodeNotReady, start: &Start{Action: qnv1alpha1.ActionRestart, Attempt: 1}, requeue: 2 * time.Minute},
	},
}

func TestTransitions(t *testing.T) {
	for name, tt := range transitions {
		t.Run(name, func(t *testing.T) {
			in := Input{Now: t0, Settings: policy(), Signals: good()}
			for _, c := range tt.change {
				c(&in)
			}
			got := Next(in)
			w := tt.want
			if got.State != w.state || got.Reason != w.reason {
				t.Errorf("state %s (%s), want %s (%s); message: %s", got.State, got.Reason, w.state, w.reason, got.Message)
			}
			switch {
			case w.start == nil && got.Start != nil:
				t.Errorf("starts %+v, want no step", *got.Start)
			case w.start != nil && (got.Start == nil || *got.Start != *w.start):
				t.Errorf("starts %+v, want %+v (blocked: %q)", got.Start, *w.start, got.Blocked)
			}
			var concluded qnv1alpha1.RemediationResult
			if got.Conclude != nil {
				concluded = got.Conclude.Result
			}
			if concluded != w.conclude {
				t.Errorf("concludes %q, want %q", concluded, w.conclude)
			}
			if (got.Blocked != "") != w.blocked {
				t.Errorf("blocked %q, want blocked %v", got.Blocked, w.blocked)
			}
			if got.RequeueAfter != w.requeue {
				t.Errorf("requeue after %s, want %s", got.RequeueAfter, w.requeue)
			}
			if got.Message == "" {
				t.Errorf("no message for the Healthy condition")
			}
		})
	}
}

// TestEveryTransitionIsDocumented holds the table in docs/controller.md and
// the rows above equal, id for id.
func TestEveryTransitionIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "controller.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| (H\d+) \|`)
	documented := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	tested := map[string]bool{}
	for name := range transitions {
		tested[strings.Fields(name)[0]] = true
	}
	for id := range documented {
		if !tested[id] {
			t.Errorf("docs/controller.md has transition %s; no test has it", id)
		}
	}
	for id := range tested {
		if !documented[id] {
			t.Errorf("transition %s is tested but not in docs/controller.md's table", id)
		}
	}
}

func TestMessagesDoNotChangeWithTimeAlone(t *testing.T) {
	// A message that moved with the clock would write status on every
	// reconcile.
	in := Input{Now: t0, Settings: policy(), Signals: good()}
	notReadySince(40 * time.Second)(&in)
	unhealthyFor(10*time.Second, qnv1alpha1.HealthDegraded)(&in)
	first := Next(in)
	in.Now = in.Now.Add(30 * time.Second)
	if second := Next(in); second.Message != first.Message {
		t.Errorf("the message changed with time alone:\n%s\n%s", first.Message, second.Message)
	}
}

func TestResolveDefaultsAndCorrections(t *testing.T) {
	short := metav1.Duration{Duration: time.Second}
	long := metav1.Duration{Duration: time.Minute}
	pct := intstr.FromString("ten percent")
	s, problems := Resolve(&qnv1alpha1.QuantumNodeHealthPolicySpec{
		Node:        qnv1alpha1.NodeReadyCheck{DegradedAfter: &long, FailedAfter: &short},
		Remediation: &qnv1alpha1.RemediationPolicy{MaxUnhealthy: &pct},
	})
	if s.NodeFailedAfter != time.Minute {
		t.Errorf("failedAfter %s, want raised to degradedAfter 1m", s.NodeFailedAfter)
	}
	if len(problems) != 2 {
		t.Errorf("problems %q, want the failedAfter and the maxUnhealthy one", problems)
	}
	if s.Ladder.Remediates() {
		t.Errorf("a remediation without steps remediates")
	}
	if got := s.Ladder.AllowedUnhealthy(10); got != 0 {
		t.Errorf("an unreadable maxUnhealthy allows %d, want 0", got)
	}
	d, _ := Resolve(&qnv1alpha1.QuantumNodeHealthPolicySpec{Remediation: &qnv1alpha1.RemediationPolicy{}})
	for selected, want := range map[int]int{10: 4, 3: 2, 1: 1, 0: 0} {
		if got := d.Ladder.AllowedUnhealthy(selected); got != want {
			t.Errorf("the default maxUnhealthy allows %d of %d, want %d (40%%, rounded up)", got, selected, want)
		}
	}
	if d.NodeDegradedAfter != DefaultNodeDegradedAfter || d.Ladder.MaxInFlight != 1 || d.Ladder.FailedRestarts != 2 || d.Ladder.IsolationWindow != 5*time.Minute {
		t.Errorf("defaults not applied: %+v", d)
	}
}
