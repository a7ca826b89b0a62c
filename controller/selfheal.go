package controller

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller/health"
	"github.com/quantumnode/qn-admission/controller/remediation"
	"github.com/quantumnode/qn-admission/controller/rollout"
)

// Event reasons of self-healing and rollout.
const (
	EventHealthDegraded       = "HealthDegraded"
	EventHealthFailed         = "HealthFailed"
	EventHealthRecovered      = "HealthRecovered"
	EventIsolated             = "Isolated"
	EventRemediationStarted   = "RemediationStarted"
	EventRemediationDryRun    = "RemediationDryRun"
	EventRemediationSucceeded = "RemediationSucceeded"
	EventRemediationFailed    = "RemediationFailed"
	EventRemediationAbandoned = "RemediationAbandoned"
	EventRemediationBlocked   = "RemediationBlocked"
	EventRemediationPending   = "RemediationPending"
)

// endpointSliceIndex indexes EndpointSlices by the Service they belong to
// (within a namespace), so a node's slices are a cache lookup.
const endpointSliceIndex = "qn.dev/serviceName"

func endpointSliceServiceOf(obj client.Object) []string {
	if name := obj.GetLabels()[discoveryv1.LabelServiceName]; name != "" {
		return []string{name}
	}
	return nil
}

// historyLimit bounds status.remediationHistory.
const historyLimit = 10

// heal is what the self-healing part of one reconcile decided: the status
// it wrote into, and the effects to carry out once that status is stored.
type heal struct {
	policy   *qnv1alpha1.QuantumNodeHealthPolicy
	settings health.Settings
	outcome  health.Outcome
	// urgent: status changes that must not wait for quiescence (health,
	// a step, a binding, a rollback): they are records of what is done.
	urgent bool
	// rollback, when set, is written before the status.
	rollback *pendingRollback
	requeue  time.Duration
	// after run once the status is stored, in order.
	after []func(ctx context.Context, qn *qnv1alpha1.QuantumNode) error
}

type pendingRollback struct {
	record qnv1alpha1.RollbackRecord
	target rollout.Snapshot
}

// selfHeal computes health, the ladder's step, the revisions and the
// rollout's progress into status, keeps the revisions, and returns the
// effects to run after the status write.
func (r *Reconciler) selfHeal(ctx context.Context, qn *qnv1alpha1.QuantumNode, node *corev1.Node, status *qnv1alpha1.QuantumNodeStatus, now time.Time) (*heal, error) {
	h := &heal{}
	key := client.ObjectKeyFromObject(qn)
	policies, err := r.healthPolicies(ctx)
	if err != nil {
		return nil, err
	}
	h.policy = health.PolicyFor(qn, policies)
	if h.policy == nil {
		r.prober.Forget(key)
		r.reportOnly(qn, status, now, h)
	} else {
		h.settings, _ = health.Resolve(&h.policy.Spec)
		if err := r.assess(ctx, qn, node, status, now, policies, h); err != nil {
			return nil, err
		}
	}
	if err := r.followRollout(ctx, qn, status, now, h); err != nil {
		return nil, err
	}
	return h, nil
}

// forgetHealth drops what the leader keeps in memory for a node that is
// gone: its active checks and its remediation slot.
func (r *Reconciler) forgetHealth(key types.NamespacedName) {
	r.prober.Forget(key)
	r.books.Release(key)
}

// healthPolicies are every QuantumNodeHealthPolicy, compiled, first by name.
func (r *Reconciler) healthPolicies(ctx context.Context) ([]health.Selector, error) {
	list := &qnv1alpha1.QuantumNodeHealthPolicyList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("list QuantumNodeHealthPolicies: %w", err)
	}
	return health.Compile(list.Items), nil
}

// reportOnly is the status of a node no policy selects: no health, no
// Healthy condition (as before self-healing existed); a step that was
// running is abandoned.
func (r *Reconciler) reportOnly(qn *qnv1alpha1.QuantumNode, status *qnv1alpha1.QuantumNodeStatus, now time.Time, h *heal) {
	status.Health = ""
	meta.RemoveStatusCondition(&status.Conditions, qnv1alpha1.ConditionHealthy)
	if cur := status.Remediation; cur != nil && cur.FinishedAt == nil {
		r.conclude(status, health.Conclusion{Result: qnv1alpha1.ResultAbandoned, Message: "no QuantumNodeHealthPolicy selects the node any more"}, now, h)
	}
	r.books.Release(client.ObjectKeyFromObject(qn))
	h.urgent = h.urgent || qn.Status.Health != ""
}

// assess runs the state machine for a node its policy selects.
func (r *Reconciler) assess(ctx context.Context, qn *qnv1alpha1.QuantumNode, node *corev1.Node, status *qnv1alpha1.QuantumNodeStatus, now time.Time, policies []health.Selector, h *heal) error {
	key := client.ObjectKeyFromObject(qn)
	s := h.settings
	address := health.NodeAddress(node)
	if p := s.Probe; p != nil && node != nil {
		r.prober.Track(probeTarget(qn, key, address, p))
	} else {
		r.prober.Forget(key)
	}
	var slices []*discoveryv1.EndpointSlice
	if s.Endpoints != nil {
		list := &discoveryv1.EndpointSliceList{}
		if err := r.Client.List(ctx, list, client.InNamespace(qn.Namespace), client.MatchingFields{endpointSliceIndex: qn.Name}); err != nil {
			return fmt.Errorf("list the EndpointSlices of Service %s: %w", key, err)
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
		Settings: s,
		Signals:  health.Signals{Node: health.NodeSignalOf(node, wantNode), Ports: health.PortSignals(qn, slices, r.prober.Results(key), address)},
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
	var guardErr error
	in.Guard = func() health.Guard {
		g, err := r.guard(ctx, qn, h.policy, s.Ladder, policies)
		guardErr = err
		return g
	}
	out := health.Next(in)
	if guardErr != nil {
		return guardErr
	}
	h.outcome = out
	h.requeue = out.RequeueAfter

	status.Health = out.State
	message := out.Message
	if out.Blocked != "" {
		message += "; " + out.Blocked
	}
	cond := metav1.Condition{Type: qnv1alpha1.ConditionHealthy, Status: metav1.ConditionFalse, Reason: out.Reason, Message: clip(message), ObservedGeneration: qn.Generation, LastTransitionTime: metav1.NewTime(now)}
	if out.State == qnv1alpha1.HealthHealthy {
		cond.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	if c := out.Conclude; c != nil {
		r.conclude(status, *c, now, h)
	}
	if st := out.Start; st != nil {
		if err := r.start(ctx, qn, node, status, *st, now, h); err != nil {
			return err
		}
	}
	if cur := status.Remediation; cur == nil || cur.FinishedAt != nil {
		r.books.Release(key)
	} else if cur.Result == qnv1alpha1.ResultInProgress {
		// The step runs: ensure its effects after the write (a no-op once
		// done; a budget that refused an eviction is asked again).
		step := *cur
		binding := status.Binding.DeepCopy()
		h.after = append(h.after, func(ctx context.Context, qn *qnv1alpha1.QuantumNode) error {
			return r.act(ctx, qn, node, step, binding, h)
		})
	}

	h.urgent = h.urgent || status.Health != qn.Status.Health || !equality.Semantic.DeepEqual(status.Remediation, qn.Status.Remediation) ||
		!equality.Semantic.DeepEqual(status.Binding, qn.Status.Binding)
	before := meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionHealthy)
	from := qn.Status.Health
	h.after = append(h.after, func(_ context.Context, qn *qnv1alpha1.QuantumNode) error {
		r.recordHealth(qn, from, before, cond, out)
		return nil
	})
	return nil
}

// guard answers the policy's guards for a step about to start, and takes
// a slot when they let it.
func (r *Reconciler) guard(ctx context.Context, qn *qnv1alpha1.QuantumNode, policy *qnv1alpha1.QuantumNodeHealthPolicy, l health.Ladder, policies []health.Selector) (health.Guard, error) {
	var g health.Guard
	if why, ok := policy.Annotations[qnv1alpha1.AnnotationPauseRemediation]; ok {
		g.Paused = fmt.Sprintf("policy %s is paused (%s: %q)", policy.Name, qnv1alpha1.AnnotationPauseRemediation, why)
		return g, nil
	}
	if why, ok := qn.Annotations[qnv1alpha1.AnnotationPauseRemediation]; ok {
		g.Paused = fmt.Sprintf("the node is paused (%s: %q)", qnv1alpha1.AnnotationPauseRemediation, why)
		return g, nil
	}
	census, err := r.books.Census(ctx, policy.Name, policies)
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
	ok, running, err := r.books.Reserve(ctx, policy.Name, client.ObjectKeyFromObject(qn), l.MaxInFlight, policies)
	if err != nil {
		return g, err
	}
	if !ok {
		g.NoSlot = fmt.Sprintf("%d remediations of policy %s are running, its maxInFlight", running, policy.Name)
	}
	return g, nil
}

// conclude ends the running step in status.
func (r *Reconciler) conclude(status *qnv1alpha1.QuantumNodeStatus, c health.Conclusion, now time.Time, h *heal) {
	cur := status.Remediation.DeepCopy()
	finished := metav1.NewTime(now)
	cur.FinishedAt, cur.Result, cur.Message = &finished, c.Result, clip(c.Message)
	status.Remediation = cur
	if len(status.RemediationHistory) > 0 && status.RemediationHistory[0].StartedAt.Equal(&cur.StartedAt) && status.RemediationHistory[0].Action == cur.Action {
		status.RemediationHistory[0] = *cur
	} else {
		pushHistory(status, *cur)
	}
	ended := *cur
	h.after = append(h.after, func(_ context.Context, qn *qnv1alpha1.QuantumNode) error {
		r.selfMetrics.concluded(ended)
		reason, kind := EventRemediationSucceeded, corev1.EventTypeNormal
		switch ended.Result {
		case qnv1alpha1.ResultFailed:
			reason, kind = EventRemediationFailed, corev1.EventTypeWarning
		case qnv1alpha1.ResultAbandoned:
			reason = EventRemediationAbandoned
		case qnv1alpha1.ResultDryRun:
			reason = EventRemediationDryRun
		}
		r.Recorder.Eventf(qn, nil, kind, reason, "Remediate", "%s", ended.Message)
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
func (r *Reconciler) start(ctx context.Context, qn *qnv1alpha1.QuantumNode, node *corev1.Node, status *qnv1alpha1.QuantumNodeStatus, st health.Start, now time.Time, h *heal) error {
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
		target, why, err := r.effects.PickNode(ctx, qn, h.settings.Ladder.Reschedule.NodeSelector, from, r.boundElsewhere(ctx, qn))
		if err != nil {
			return err
		}
		if target == nil {
			rec.Result, rec.FinishedAt = qnv1alpha1.ResultFailed, &started
			rec.Message = fmt.Sprintf("Reschedule attempt %d: %s", st.Attempt, why)
			h.requeue = time.Millisecond // climb on at once
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
	rec.Message = clip(rec.Message)
	status.Remediation = &rec
	pushHistory(status, rec)
	started2 := rec
	h.after = append(h.after, func(_ context.Context, qn *qnv1alpha1.QuantumNode) error {
		r.selfMetrics.started(started2)
		reason := EventRemediationStarted
		switch started2.Result {
		case qnv1alpha1.ResultDryRun:
			reason = EventRemediationDryRun
		case qnv1alpha1.ResultFailed:
			reason = EventRemediationFailed
			r.selfMetrics.concluded(started2)
		}
		r.Recorder.Eventf(qn, nil, corev1.EventTypeWarning, reason, "Remediate", "%s", started2.Message)
		return nil
	})
	return nil
}

// act carries out (or makes sure of) a running step's effects.
func (r *Reconciler) act(ctx context.Context, qn *qnv1alpha1.QuantumNode, node *corev1.Node, step qnv1alpha1.RemediationStatus, binding *qnv1alpha1.NodeBinding, h *heal) error {
	var report remediation.Report
	var err error
	switch step.Action {
	case qnv1alpha1.ActionRestart:
		if node == nil {
			return nil
		}
		report, err = r.effects.Restart(ctx, qn, node.Name, step.StartedAt.Time)
	case qnv1alpha1.ActionReschedule:
		if binding == nil {
			return nil
		}
		if old := binding.PreviousNodeName; old != "" {
			if err := r.effects.Isolate(ctx, old, qn.Name); err != nil {
				return err
			}
			if binding.SpecNodeName == "" {
				if err := r.effects.MoveLabel(ctx, qn.Name, old, binding.NodeName); err != nil {
					return err
				}
			}
			report, err = r.effects.Restart(ctx, qn, old, step.StartedAt.Time)
		}
	case qnv1alpha1.ActionRebuild:
		deleteMachine := h.settings.Ladder.Rebuild != nil && h.settings.Ladder.Rebuild.DeleteMachine
		report, err = r.effects.Rebuild(ctx, qn, node, step.StartedAt.Time, deleteMachine)
	}
	if err != nil {
		return err
	}
	if report.Pending != "" {
		r.Recorder.Eventf(qn, nil, corev1.EventTypeWarning, EventRemediationPending, "Remediate", "%s", report.Message())
		h.requeue = earliestWait(h.requeue, 5*time.Second)
	} else if report.Acted {
		r.Recorder.Eventf(qn, nil, corev1.EventTypeNormal, EventRemediationStarted, "Remediate", "%s %d: %s", step.Action, step.Attempt, report.Done)
	}
	return nil
}

// boundElsewhere reports whether a Node belongs to another QuantumNode
// (by name, label or a Reschedule's binding), through the node index.
func (r *Reconciler) boundElsewhere(ctx context.Context, qn *qnv1alpha1.QuantumNode) func(*corev1.Node) bool {
	return func(n *corev1.Node) bool {
		if v := n.Labels[qnv1alpha1.NodeLabel]; v != "" && v != qn.Name {
			return true
		}
		list := &qnv1alpha1.QuantumNodeList{}
		if err := r.Client.List(ctx, list, client.MatchingFields{nodeKeyIndex: "name:" + n.Name}); err != nil {
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
func (r *Reconciler) recordHealth(qn *qnv1alpha1.QuantumNode, from qnv1alpha1.HealthState, before *metav1.Condition, after metav1.Condition, out health.Outcome) {
	if out.Blocked != "" && (before == nil || before.Message != after.Message) {
		r.Recorder.Eventf(qn, nil, corev1.EventTypeWarning, EventRemediationBlocked, "Remediate", "%s", out.Blocked)
	}
	if from == out.State {
		return
	}
	switch out.State {
	case qnv1alpha1.HealthHealthy:
		if from != "" {
			r.Recorder.Eventf(qn, nil, corev1.EventTypeNormal, EventHealthRecovered, "AssessHealth", "%s → Healthy: %s", from, after.Message)
		}
	case qnv1alpha1.HealthDegraded:
		r.Recorder.Eventf(qn, nil, corev1.EventTypeWarning, EventHealthDegraded, "AssessHealth", "%s → Degraded: %s", orNone(string(from)), after.Message)
	case qnv1alpha1.HealthFailed:
		r.Recorder.Eventf(qn, nil, corev1.EventTypeWarning, EventHealthFailed, "AssessHealth", "%s → Failed: %s", orNone(string(from)), after.Message)
	case qnv1alpha1.HealthIsolated:
		r.Recorder.Eventf(qn, nil, corev1.EventTypeWarning, EventIsolated, "AssessHealth", "%s → Isolated: %s", orNone(string(from)), after.Message)
	}
}

// followRollout keeps the revisions and judges the current one's
// progress; a missed deadline triggers a rollback, performed when the
// node's policy asks for it.
func (r *Reconciler) followRollout(ctx context.Context, qn *qnv1alpha1.QuantumNode, status *qnv1alpha1.QuantumNodeStatus, now time.Time, h *heal) error {
	list := &appsv1.ControllerRevisionList{}
	if err := r.Client.List(ctx, list, client.InNamespace(qn.Namespace), client.MatchingFields{remediation.QuantumNodeLabelIndex: qn.Name}); err != nil {
		return fmt.Errorf("list the revisions of QuantumNode %s/%s: %w", qn.Namespace, qn.Name, err)
	}
	revs := make([]*appsv1.ControllerRevision, len(list.Items))
	for i := range list.Items {
		revs[i] = &list.Items[i]
	}
	revs = rollout.OwnedBy(qn, revs)
	ready := ""
	if status.Rollout != nil {
		ready = status.Rollout.ReadyRevision
	}
	plan := rollout.PlanRevisions(qn, revs, ready)
	if err := r.keepRevisions(ctx, qn, plan); err != nil {
		return err
	}
	var readyRef *rollout.RevisionRef
	var readyRev *appsv1.ControllerRevision
	for _, rev := range revs {
		if rev.Name == ready {
			readyRev = rev
			readyRef = &rollout.RevisionRef{Name: rev.Name, Number: rev.Revision}
		}
	}
	isReady, why := rolloutReady(status, h.policy != nil)
	out := rollout.Progress(rollout.ProgressInput{
		Now: now, Status: status.Rollout,
		Current: &rollout.RevisionRef{Name: plan.Current.Name, Number: plan.Current.Revision}, Ready: readyRef,
		IsReady: isReady, Why: why, Deadline: time.Duration(qn.Spec.ProgressDeadline()) * time.Second, UID: string(qn.UID),
	})
	out.Condition.ObservedGeneration = qn.Generation
	out.Condition.LastTransitionTime = metav1.NewTime(now)
	out.Condition.Message = clip(out.Condition.Message)
	meta.SetStatusCondition(&status.Conditions, out.Condition)
	status.Rollout = &out.Status
	h.requeue = earliestWait(h.requeue, out.RequeueAfter)
	if rb := out.Rollback; rb != nil {
		h.urgent = true
		rb.Trigger = clip(rb.Trigger)
		automatic := h.policy != nil && h.settings.AutoRollback && out.Target != nil
		if automatic {
			snap, err := rollout.Decode(readyRev)
			if err != nil {
				automatic = false
				rb.Trigger = clip(rb.Trigger + "; " + err.Error())
			} else {
				rb.Performed = true
				h.rollback = &pendingRollback{record: *rb, target: snap}
			}
		}
		record := *rb
		h.after = append(h.after, func(_ context.Context, qn *qnv1alpha1.QuantumNode) error {
			r.recordRollback(qn, record, out.Condition.Message, automatic, out.Target != nil)
			return nil
		})
	}
	return nil
}

// rolloutReady is the criterion a revision must meet: Ready, at the
// current generation, and Healthy when a health policy judges the node.
func rolloutReady(status *qnv1alpha1.QuantumNodeStatus, judged bool) (bool, string) {
	ready := meta.FindStatusCondition(status.Conditions, qnv1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue {
		if ready == nil {
			return false, "Ready is not known yet"
		}
		return false, fmt.Sprintf("Ready is %s, %s: %s", ready.Status, ready.Reason, ready.Message)
	}
	if judged {
		if c := meta.FindStatusCondition(status.Conditions, qnv1alpha1.ConditionHealthy); c == nil || c.Status != metav1.ConditionTrue {
			if c == nil {
				return false, "Healthy is not known yet"
			}
			return false, fmt.Sprintf("Healthy is False, %s: %s", c.Reason, c.Message)
		}
	}
	return true, ""
}

// keepRevisions carries out a revision plan. The revisions are separate
// objects, written at once: the status only names them.
func (r *Reconciler) keepRevisions(ctx context.Context, qn *qnv1alpha1.QuantumNode, p rollout.Plan) error {
	if p.Create != nil {
		if err := r.Client.Create(ctx, p.Create, client.FieldOwner(managerName)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("record revision %d of QuantumNode %s/%s: %w", p.Create.Revision, qn.Namespace, qn.Name, err)
		}
	}
	if p.Renumber != nil {
		if err := r.Client.Update(ctx, p.Renumber, client.FieldOwner(managerName)); err != nil {
			return fmt.Errorf("renumber revision %s of QuantumNode %s/%s as %d: %w", p.Renumber.Name, qn.Namespace, qn.Name, p.Renumber.Revision, err)
		}
	}
	for _, old := range p.Delete {
		if err := r.Client.Delete(ctx, old, client.Preconditions{UID: &old.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete revision %s of QuantumNode %s/%s beyond its history limit: %w", old.Name, qn.Namespace, qn.Name, err)
		}
	}
	return nil
}

func (r *Reconciler) recordRollback(qn *qnv1alpha1.QuantumNode, rb qnv1alpha1.RollbackRecord, why string, automatic, hasTarget bool) {
	r.Recorder.Eventf(qn, nil, corev1.EventTypeWarning, rollout.ReasonProgressDeadlineExceeded, "Rollout", "%s", why)
	what := "rolled back automatically"
	switch {
	case !hasTarget:
		what = "no earlier revision was Ready, nothing to roll back to"
	case !automatic:
		what = fmt.Sprintf("automatic rollback is off (report only); `qnctl rollout undo %s -n %s --to-revision %d` rolls back", qn.Name, qn.Namespace, rb.ToRevision)
	}
	r.Recorder.Eventf(qn, nil, corev1.EventTypeWarning, rollout.EventRollbackTriggered, "Rollout",
		"rollback %s: revision %d → %d, triggered by %s; %s", rb.ID, rb.FromRevision, rb.ToRevision, rb.Trigger, what)
	r.selfMetrics.rollback(automatic && hasTarget)
}

// applyRollback writes a pending rollback into the spec, before the status
// that records it; it returns the QuantumNode as stored after the write.
func (r *Reconciler) applyRollback(ctx context.Context, qn *qnv1alpha1.QuantumNode, status *qnv1alpha1.QuantumNodeStatus, p *pendingRollback) (*qnv1alpha1.QuantumNode, error) {
	patched := qn.DeepCopy()
	data, err := rollout.Patch(qn, p.target, p.record)
	if err != nil {
		return nil, err
	}
	if err := r.Client.Patch(ctx, patched, client.RawPatch(types.MergePatchType, data), client.FieldOwner(rollout.RollbackFieldManager)); err != nil {
		if apierrors.IsConflict(err) {
			return nil, err // the next reconcile judges the newer spec
		}
		// Refused (admission, RBAC): record it as reported, not performed.
		status.Rollout.LastRollback.Performed = false
		status.Rollout.LastRollback.Trigger = clip(status.Rollout.LastRollback.Trigger + "; the rollback was refused: " + err.Error())
		r.Recorder.Eventf(qn, nil, corev1.EventTypeWarning, rollout.EventRollbackFailed, "Rollout", "rollback %s to revision %d refused: %v", p.record.ID, p.record.ToRevision, err)
		log.FromContext(ctx).Error(err, "automatic rollback refused", "rollback", p.record.ID)
		return qn, nil
	}
	return patched, nil
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

// clip bounds a condition or record message to what the schema allows.
func clip(s string) string {
	const limit = 1024
	if len(s) <= limit {
		return s
	}
	return s[:limit-3] + "..."
}

func earliestWait(a, b time.Duration) time.Duration {
	switch {
	case b <= 0:
		return a
	case a <= 0 || b < a:
		return b
	}
	return a
}
