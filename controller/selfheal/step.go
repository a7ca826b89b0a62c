// Package selfheal is self-healing's part of qn-controller: the health
// step of the QuantumNode reconcile (a node's health from its Node, its
// EndpointSlices and the active checks, the remediation ladder's next
// step under its policy's guards, and the step's effects once the status
// that records it is stored), and the controller that writes each
// QuantumNodeHealthPolicy's census and RemediationAllowed condition. The
// decisions are controller/health's (pure); the effects and the guards'
// books are controller/remediation's.
package selfheal

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/source"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/controller/health"
	"github.com/quantumnode/qn-admission/controller/remediation"
)

// historyLimit bounds status.remediationHistory.
const historyLimit = 10

// Step is self-healing's part of the QuantumNode reconcile: it judges a
// node's health into the status the reconcile is building, records the
// ladder's step there, and hands back the step's effects (evictions, a
// Node's isolation, a rebuild) and events, to run once that status is
// stored. Build it with New.
type Step struct {
	client   client.Client
	recorder events.EventRecorder
	prober   *health.Prober
	books    *remediation.Books
	effects  *remediation.Effects
	metrics  *metrics
	// results requeue the QuantumNodes whose active checks changed.
	results source.Source
}

// Result is what Assess decided beyond the status: the effects, and what
// the rollout needs to know of the node's health policy.
type Result struct {
	controller.Effects
	// Judged: a health policy selects the node.
	Judged bool
	// AutoRollback: that policy rolls back a change that missed its
	// progress deadline.
	AutoRollback bool
}

// heal is what the self-healing part of one reconcile decided so far.
type heal struct {
	policy   *qnv1alpha1.QuantumNodeHealthPolicy
	settings health.Settings
	fx       controller.Effects
}

// Assess computes health and the ladder's step into status and returns
// the effects to run after the status write.
func (s *Step) Assess(ctx context.Context, qn *qnv1alpha1.QuantumNode, node *corev1.Node, status *qnv1alpha1.QuantumNodeStatus, now time.Time) (Result, error) {
	h := &heal{}
	key := client.ObjectKeyFromObject(qn)
	policies, err := s.healthPolicies(ctx)
	if err != nil {
		return Result{}, err
	}
	h.policy = health.PolicyFor(qn, policies)
	if h.policy == nil {
		s.prober.Forget(key)
		s.reportOnly(qn, status, now, h)
	} else {
		h.settings, _ = health.Resolve(&h.policy.Spec)
		if err := s.assess(ctx, qn, node, status, now, policies, h); err != nil {
			return Result{}, err
		}
	}
	return Result{Effects: h.fx, Judged: h.policy != nil, AutoRollback: h.policy != nil && h.settings.AutoRollback}, nil
}

// Forget drops what the leader keeps in memory for a node that is gone
// or being deleted: its active checks and its remediation slot.
func (s *Step) Forget(key types.NamespacedName) {
	s.prober.Forget(key)
	s.books.Release(key)
}

// healthPolicies are every QuantumNodeHealthPolicy, compiled, first by name.
func (s *Step) healthPolicies(ctx context.Context) ([]health.Selector, error) {
	list := &qnv1alpha1.QuantumNodeHealthPolicyList{}
	if err := s.client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("list QuantumNodeHealthPolicies: %w", err)
	}
	return health.Compile(list.Items), nil
}

// reportOnly is the status of a node no policy selects: no health, no
// Healthy condition (as before self-healing existed); a step that was
// running is abandoned.
func (s *Step) reportOnly(qn *qnv1alpha1.QuantumNode, status *qnv1alpha1.QuantumNodeStatus, now time.Time, h *heal) {
	status.Health = ""
	meta.RemoveStatusCondition(&status.Conditions, qnv1alpha1.ConditionHealthy)
	if cur := status.Remediation; cur != nil && cur.FinishedAt == nil {
		s.conclude(status, health.Conclusion{Result: qnv1alpha1.ResultAbandoned, Message: "no QuantumNodeHealthPolicy selects the node any more"}, now, h)
	}
	s.books.Release(client.ObjectKeyFromObject(qn))
	h.fx.Urgent = h.fx.Urgent || qn.Status.Health != ""
}

// input gathers what the state machine judges: the node's signals (its
// Node, its Service's EndpointSlices, the active checks it keeps tracked
// or drops), and its health so far.
func (s *Step) input(ctx context.Context, qn *qnv1alpha1.QuantumNode, node *corev1.Node, status *qnv1alpha1.QuantumNodeStatus, now time.Time, set health.Settings) (health.Input, error) {
	key := client.ObjectKeyFromObject(qn)
	address := health.NodeAddress(node)
	if p := set.Probe; p != nil && node != nil {
		s.prober.Track(probeTarget(qn, key, address, p))
	} else {
		s.prober.Forget(key)
	}
	var slices []*discoveryv1.EndpointSlice
	if set.Endpoints != nil {
		list := &discoveryv1.EndpointSliceList{}
		if err := s.client.List(ctx, list, client.InNamespace(qn.Namespace), client.MatchingFields{endpointSliceIndex: qn.Name}); err != nil {
			return health.Input{}, fmt.Errorf("list the EndpointSlices of Service %s: %w", key, err)
		}
		for i := range list.Items {
			slices = append(slices, &list.Items[i])
		}
	}
	wantNode := qn.Spec.NodeName
	if b := status.Binding; b != nil {
		wantNode = b.NodeName
	}
	in := health.Input{
		Now:      now,
		Settings: set,
		Signals:  health.Signals{Node: health.NodeSignalOf(node, wantNode), Ports: health.PortSignals(qn, slices, s.prober.Results(key), address)},
		State:    qn.Status.Health,
		Current:  qn.Status.Remediation,
		History:  qn.Status.RemediationHistory,
	}
	if c := meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionHealthy); c != nil {
		in.Reason = c.Reason
		if c.Status == metav1.ConditionFalse {
			in.UnhealthySince = c.LastTransitionTime.Time
		}
	}
	return in, nil
}

// assess runs the state machine for a node its policy selects.
func (s *Step) assess(ctx context.Context, qn *qnv1alpha1.QuantumNode, node *corev1.Node, status *qnv1alpha1.QuantumNodeStatus, now time.Time, policies []health.Selector, h *heal) error {
	key := client.ObjectKeyFromObject(qn)
	set := h.settings
	in, err := s.input(ctx, qn, node, status, now, set)
	if err != nil {
		return err
	}
	var guardErr error
	in.Guard = func() health.Guard {
		g, err := s.guard(ctx, qn, h.policy, set.Ladder, policies)
		guardErr = err
		return g
	}
	out := health.Next(in)
	if guardErr != nil {
		return guardErr
	}
	h.fx.RequeueAfter = out.RequeueAfter

	status.Health = out.State
	message := out.Message
	if out.Blocked != "" {
		message += "; " + out.Blocked
	}
	cond := metav1.Condition{Type: qnv1alpha1.ConditionHealthy, Status: metav1.ConditionFalse, Reason: out.Reason, Message: controller.Clip(message), ObservedGeneration: qn.Generation, LastTransitionTime: metav1.NewTime(now)}
	if out.State == qnv1alpha1.HealthHealthy {
		cond.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	if c := out.Conclude; c != nil {
		s.conclude(status, *c, now, h)
	}
	if st := out.Start; st != nil {
		if err := s.start(ctx, qn, node, status, *st, now, h); err != nil {
			return err
		}
	}
	if cur := status.Remediation; cur == nil || cur.FinishedAt != nil {
		s.books.Release(key)
	} else if cur.Result == qnv1alpha1.ResultInProgress {
		// The step runs: ensure its effects after the write (a no-op once
		// done; a budget that refused an eviction is asked again).
		step := *cur
		binding := status.Binding.DeepCopy()
		h.fx.Then(func(ctx context.Context, qn *qnv1alpha1.QuantumNode) error {
			return s.act(ctx, qn, node, step, binding, h)
		})
	}

	h.fx.Urgent = h.fx.Urgent || status.Health != qn.Status.Health || !equality.Semantic.DeepEqual(status.Remediation, qn.Status.Remediation) ||
		!equality.Semantic.DeepEqual(status.Binding, qn.Status.Binding)
	before := meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionHealthy)
	from := qn.Status.Health
	h.fx.Then(func(_ context.Context, qn *qnv1alpha1.QuantumNode) error {
		s.recordHealth(qn, from, before, cond, out)
		return nil
	})
	return nil
}

// guard answers the policy's guards for a step about to start, and takes
// a slot when they let it.
func (s *Step) guard(ctx context.Context, qn *qnv1alpha1.QuantumNode, policy *qnv1alpha1.QuantumNodeHealthPolicy, l health.Ladder, policies []health.Selector) (health.Guard, error) {
	var g health.Guard
	if why, ok := policy.Annotations[qnv1alpha1.AnnotationPauseRemediation]; ok {
		g.Paused = fmt.Sprintf("policy %s is paused (%s: %q)", policy.Name, qnv1alpha1.AnnotationPauseRemediation, why)
		return g, nil
	}
	if why, ok := qn.Annotations[qnv1alpha1.AnnotationPauseRemediation]; ok {
		g.Paused = fmt.Sprintf("the node is paused (%s: %q)", qnv1alpha1.AnnotationPauseRemediation, why)
		return g, nil
	}
	census, err := s.books.Census(ctx, policy.Name, policies)
	if err != nil {
		return g, err
	}
	unhealthy := census.Unhealthy
	if qn.Status.Health == qnv1alpha1.HealthHealthy || qn.Status.Health == "" {
		unhealthy++ // this node, judged Failed a moment ago, is not stored so yet
	}
	if allowed := l.AllowedUnhealthy(census.Selected); unhealthy > allowed {
		g.TooManyUnhealthy = fmt.Sprintf("%d of %d nodes of policy %s are unhealthy, more than maxUnhealthy %s (%d)",
			unhealthy, census.Selected, policy.Name, l.MaxUnhealthy.String(), allowed)
		return g, nil
	}
	ok, running, err := s.books.Reserve(ctx, policy.Name, client.ObjectKeyFromObject(qn), l.MaxInFlight, policies)
	if err != nil {
		return g, err
	}
	if !ok {
		g.NoSlot = fmt.Sprintf("%d remediations of policy %s are running, its maxInFlight", running, policy.Name)
	}
	return g, nil
}

// conclude ends the running step in status.
func (s *Step) conclude(status *qnv1alpha1.QuantumNodeStatus, c health.Conclusion, now time.Time, h *heal) {
	cur := status.Remediation.DeepCopy()
	finished := metav1.NewTime(now)
	cur.FinishedAt, cur.Result, cur.Message = &finished, c.Result, controller.Clip(c.Message)
	status.Remediation = cur
	if len(status.RemediationHistory) > 0 && status.RemediationHistory[0].StartedAt.Equal(&cur.StartedAt) && status.RemediationHistory[0].Action == cur.Action {
		status.RemediationHistory[0] = *cur
	} else {
		pushHistory(status, *cur)
	}
	ended := *cur
	h.fx.Then(func(_ context.Context, qn *qnv1alpha1.QuantumNode) error {
		s.metrics.concluded(ended)
		reason, kind := qnv1alpha1.EventRemediationSucceeded, corev1.EventTypeNormal
		switch ended.Result {
		case qnv1alpha1.ResultFailed:
			reason, kind = qnv1alpha1.EventRemediationFailed, corev1.EventTypeWarning
		case qnv1alpha1.ResultAbandoned:
			reason = qnv1alpha1.EventRemediationAbandoned
		case qnv1alpha1.ResultDryRun:
			reason = qnv1alpha1.EventRemediationDryRun
		}
		s.recorder.Eventf(qn, nil, kind, reason, "Remediate", "%s", ended.Message)
		return nil
	})
}

func pushHistory(status *qnv1alpha1.QuantumNodeStatus, s qnv1alpha1.RemediationStatus) {
	status.RemediationHistory = append([]qnv1alpha1.RemediationStatus{s}, status.RemediationHistory...)
	if len(status.RemediationHistory) > historyLimit {
		status.RemediationHistory = status.RemediationHistory[:historyLimit]
	}
}

// start records a new step in status; its effects run after the write.
// A Reschedule picks its Node here, so the record names it; when no Node
// fits, the step is recorded as failed at once and the ladder climbs on.
func (s *Step) start(ctx context.Context, qn *qnv1alpha1.QuantumNode, node *corev1.Node, status *qnv1alpha1.QuantumNodeStatus, st health.Start, now time.Time, h *heal) error {
	started := metav1.NewTime(now)
	rec := qnv1alpha1.RemediationStatus{Action: st.Action, Attempt: int32(st.Attempt), StartedAt: started, Result: qnv1alpha1.ResultInProgress}
	from := ""
	if node != nil {
		from = node.Name
	}
	switch st.Action {
	case qnv1alpha1.ActionRestart:
		rec.Message = fmt.Sprintf("Restart attempt %d: evicting the Pods labelled %s=%s on node %s", st.Attempt, qnv1alpha1.LabelQuantumNode, qn.Name, orNone(from))
	case qnv1alpha1.ActionReschedule:
		target, why, err := s.effects.PickNode(ctx, qn, h.settings.Ladder.Reschedule.NodeSelector, from, s.boundElsewhere(ctx, qn))
		if err != nil {
			return err
		}
		if target == nil {
			rec.Result, rec.FinishedAt = qnv1alpha1.ResultFailed, &started
			rec.Message = fmt.Sprintf("Reschedule attempt %d: %s", st.Attempt, why)
			h.fx.RequeueAfter = time.Millisecond // climb on at once
			break
		}
		rec.Message = fmt.Sprintf("Reschedule attempt %d: moving from node %s to %s (cordoning and tainting %s %s:NoSchedule)", st.Attempt, orNone(from), target.Name, orNone(from), qnv1alpha1.TaintIsolated)
		if !st.DryRun {
			status.Binding = &qnv1alpha1.NodeBinding{NodeName: target.Name, PreviousNodeName: from, SpecNodeName: qn.Spec.NodeName, Since: started}
		}
	case qnv1alpha1.ActionRebuild:
		rec.Message = fmt.Sprintf("Rebuild attempt %d: recreating the owned Service", st.Attempt)
		if h.settings.Ladder.Rebuild != nil && h.settings.Ladder.Rebuild.DeleteMachine {
			rec.Message += " and deleting the Cluster API Machine behind node " + orNone(from)
		}
	}
	if st.DryRun && rec.Result == qnv1alpha1.ResultInProgress {
		rec.Result = qnv1alpha1.ResultDryRun
		rec.Message = "dry run: would do " + rec.Message
	}
	rec.Message = controller.Clip(rec.Message)
	status.Remediation = &rec
	pushHistory(status, rec)
	started2 := rec
	h.fx.Then(func(_ context.Context, qn *qnv1alpha1.QuantumNode) error {
		s.metrics.started(started2)
		reason := qnv1alpha1.EventRemediationStarted
		switch started2.Result {
		case qnv1alpha1.ResultDryRun:
			reason = qnv1alpha1.EventRemediationDryRun
		case qnv1alpha1.ResultFailed:
			reason = qnv1alpha1.EventRemediationFailed
			s.metrics.concluded(started2)
		}
		s.recorder.Eventf(qn, nil, corev1.EventTypeWarning, reason, "Remediate", "%s", started2.Message)
		return nil
	})
	return nil
}

// act carries out (or makes sure of) a running step's effects.
func (s *Step) act(ctx context.Context, qn *qnv1alpha1.QuantumNode, node *corev1.Node, step qnv1alpha1.RemediationStatus, binding *qnv1alpha1.NodeBinding, h *heal) error {
	var report remediation.Report
	var err error
	switch step.Action {
	case qnv1alpha1.ActionRestart:
		if node == nil {
			return nil
		}
		report, err = s.effects.Restart(ctx, qn, node.Name, step.StartedAt.Time)
	case qnv1alpha1.ActionReschedule:
		if binding == nil {
			return nil
		}
		if old := binding.PreviousNodeName; old != "" {
			if err := s.effects.Isolate(ctx, old, qn.Name); err != nil {
				return err
			}
			if binding.SpecNodeName == "" {
				if err := s.effects.MoveLabel(ctx, qn.Name, old, binding.NodeName); err != nil {
					return err
				}
			}
			report, err = s.effects.Restart(ctx, qn, old, step.StartedAt.Time)
		}
	case qnv1alpha1.ActionRebuild:
		deleteMachine := h.settings.Ladder.Rebuild != nil && h.settings.Ladder.Rebuild.DeleteMachine
		report, err = s.effects.Rebuild(ctx, qn, node, step.StartedAt.Time, deleteMachine)
	}
	if err != nil {
		return err
	}
	if report.Pending != "" {
		s.recorder.Eventf(qn, nil, corev1.EventTypeWarning, qnv1alpha1.EventRemediationPending, "Remediate", "%s", report.Message())
		// act runs after the status write: its wish travels back through
		// the context (h.fx was already joined into the reconcile's).
		controller.LookAgain(ctx, 5*time.Second)
	} else if report.Acted {
		s.recorder.Eventf(qn, nil, corev1.EventTypeNormal, qnv1alpha1.EventRemediationStarted, "Remediate", "%s %d: %s", step.Action, step.Attempt, report.Done)
	}
	return nil
}

// boundElsewhere reports whether a Node belongs to another QuantumNode
// (by name, label or a Reschedule's binding), through the node index.
func (s *Step) boundElsewhere(ctx context.Context, qn *qnv1alpha1.QuantumNode) func(*corev1.Node) bool {
	return func(n *corev1.Node) bool {
		if v := n.Labels[qnv1alpha1.NodeLabel]; v != "" && v != qn.Name {
			return true
		}
		list := &qnv1alpha1.QuantumNodeList{}
		if err := s.client.List(ctx, list, client.MatchingFields{controller.NodeKeyIndex: "name:" + n.Name}); err != nil {
			return true // unsure: not a candidate
		}
		for i := range list.Items {
			if list.Items[i].UID != qn.UID {
				return true
			}
		}
		return false
	}
}

// recordHealth emits an event when the health state changes, or when a
// guard newly holds a step back.
func (s *Step) recordHealth(qn *qnv1alpha1.QuantumNode, from qnv1alpha1.HealthState, before *metav1.Condition, after metav1.Condition, out health.Outcome) {
	if out.Blocked != "" && (before == nil || before.Message != after.Message) {
		s.recorder.Eventf(qn, nil, corev1.EventTypeWarning, qnv1alpha1.EventRemediationBlocked, "Remediate", "%s", out.Blocked)
	}
	if from == out.State {
		return
	}
	switch out.State {
	case qnv1alpha1.HealthHealthy:
		if from != "" {
			s.recorder.Eventf(qn, nil, corev1.EventTypeNormal, qnv1alpha1.EventHealthRecovered, "AssessHealth", "%s → Healthy: %s", from, after.Message)
		}
	case qnv1alpha1.HealthDegraded:
		s.recorder.Eventf(qn, nil, corev1.EventTypeWarning, qnv1alpha1.EventHealthDegraded, "AssessHealth", "%s → Degraded: %s", orNone(string(from)), after.Message)
	case qnv1alpha1.HealthFailed:
		s.recorder.Eventf(qn, nil, corev1.EventTypeWarning, qnv1alpha1.EventHealthFailed, "AssessHealth", "%s → Failed: %s", orNone(string(from)), after.Message)
	case qnv1alpha1.HealthIsolated:
		s.recorder.Eventf(qn, nil, corev1.EventTypeWarning, qnv1alpha1.EventIsolated, "AssessHealth", "%s → Isolated: %s", orNone(string(from)), after.Message)
	}
}

func probeTarget(qn *qnv1alpha1.QuantumNode, key types.NamespacedName, address string, p *health.ProbeSettings) health.ProbeTarget {
	t := health.ProbeTarget{Key: key, Address: address, Period: p.Period, Timeout: p.Timeout, MaxFailures: p.MaxFailures}
	for _, svc := range qn.Spec.Services {
		how := p.Ports[svc.Name]
		if how.Disabled {
			continue
		}
		t.Ports = append(t.Ports, health.ProbePort{Name: svc.Name, Port: svc.Port, HTTPPath: how.HTTPPath})
	}
	return t
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
