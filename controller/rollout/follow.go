package rollout

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/internal/promreg"
)

// Follower is the rollout's part of the QuantumNode reconcile: it keeps a
// node's revisions, follows the current one to Ready or to its progress
// deadline, and on a missed deadline triggers a rollback, which the
// reconcile applies (Apply) before it writes the status that records it.
type Follower struct {
	client    client.Client
	recorder  events.EventRecorder
	rollbacks *prometheus.CounterVec
}

// NewFollower indexes ControllerRevisions by their node, registers the
// rollbacks counter and returns the step, writing through c.
func NewFollower(ctx context.Context, mgr ctrl.Manager, c client.Client, recorder events.EventRecorder, reg prometheus.Registerer) (*Follower, error) {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &appsv1.ControllerRevision{}, controller.QuantumNodeLabelIndex, controller.QuantumNodeLabelOf); err != nil {
		return nil, fmt.Errorf("index ControllerRevisions by label %s: %w", qnv1alpha1.LabelQuantumNode, err)
	}
	f := &Follower{client: c, recorder: recorder, rollbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qn_controller_rollbacks_total",
		Help: "Rollbacks triggered by a missed progress deadline; performed=false when only reported.",
	}, []string{"performed"})}
	f.rollbacks.WithLabelValues("true")
	f.rollbacks.WithLabelValues("false")
	if err := promreg.RegisterReplacing(reg, f.rollbacks); err != nil {
		return nil, fmt.Errorf("register the rollout metrics: %w", err)
	}
	return f, nil
}

// Watch has the QuantumNode controller follow the revisions it owns.
func (f *Follower) Watch(b *builder.Builder) *builder.Builder {
	return b.Owns(&appsv1.ControllerRevision{})
}

// Judged is what the health step says of a node the rollout needs.
type Judged struct {
	// Health: a health policy judges the node, so a revision is Ready
	// only once Healthy too.
	Health bool
	// AutoRollback: the node's health policy rolls back automatically.
	AutoRollback bool
}

// Outcome is what Follow decided beyond the status: its effects, and a
// rollback to apply before the status write.
type Outcome struct {
	controller.Effects
	// Rollback, when set, is written into the spec (Apply) before the
	// status that records it.
	Rollback *PendingRollback
}

// PendingRollback is a rollback Follow triggered and the reconcile is to
// apply.
type PendingRollback struct {
	record qnv1alpha1.RollbackRecord
	target Snapshot
}

// Follow keeps the revisions and judges the current one's progress into
// status; a missed deadline triggers a rollback, performed when the
// node's policy asks for it.
func (f *Follower) Follow(ctx context.Context, qn *qnv1alpha1.QuantumNode, status *qnv1alpha1.QuantumNodeStatus, now time.Time, judged Judged) (Outcome, error) {
	var out Outcome
	revs, err := f.revisions(ctx, qn)
	if err != nil {
		return out, err
	}
	ready := ""
	if status.Rollout != nil {
		ready = status.Rollout.ReadyRevision
	}
	plan := PlanRevisions(qn, revs, ready)
	if err := f.keepRevisions(ctx, qn, plan); err != nil {
		return out, err
	}
	var readyRef *RevisionRef
	var readyRev *appsv1.ControllerRevision
	for _, rev := range revs {
		if rev.Name == ready {
			readyRev = rev
			readyRef = &RevisionRef{Name: rev.Name, Number: rev.Revision}
		}
	}
	isReady, why := readyNow(status, judged.Health)
	p := Progress(ProgressInput{
		Now: now, Status: status.Rollout,
		Current: &RevisionRef{Name: plan.Current.Name, Number: plan.Current.Revision}, Ready: readyRef,
		IsReady: isReady, Why: why, Deadline: time.Duration(qn.Spec.ProgressDeadline()) * time.Second, UID: string(qn.UID),
	})
	p.Condition.ObservedGeneration = qn.Generation
	p.Condition.LastTransitionTime = metav1.NewTime(now)
	p.Condition.Message = controller.Clip(p.Condition.Message)
	meta.SetStatusCondition(&status.Conditions, p.Condition)
	status.Rollout = &p.Status
	out.Requeue(p.RequeueAfter)
	if rb := p.Rollback; rb != nil {
		out.Urgent = true
		rb.Trigger = controller.Clip(rb.Trigger)
		automatic := judged.AutoRollback && p.Target != nil
		if automatic {
			snap, err := Decode(readyRev)
			if err != nil {
				automatic = false
				rb.Trigger = controller.Clip(rb.Trigger + "; " + err.Error())
			} else {
				rb.Performed = true
				out.Rollback = &PendingRollback{record: *rb, target: snap}
			}
		}
		record := *rb
		out.Then(func(_ context.Context, qn *qnv1alpha1.QuantumNode) error {
			f.recordRollback(qn, record, p.Condition.Message, automatic, p.Target != nil)
			return nil
		})
	}
	return out, nil
}

// revisions are the ControllerRevisions qn owns, from the cache.
func (f *Follower) revisions(ctx context.Context, qn *qnv1alpha1.QuantumNode) ([]*appsv1.ControllerRevision, error) {
	list := &appsv1.ControllerRevisionList{}
	if err := f.client.List(ctx, list, client.InNamespace(qn.Namespace), client.MatchingFields{controller.QuantumNodeLabelIndex: qn.Name}); err != nil {
		return nil, fmt.Errorf("list the revisions of QuantumNode %s/%s: %w", qn.Namespace, qn.Name, err)
	}
	revs := make([]*appsv1.ControllerRevision, len(list.Items))
	for i := range list.Items {
		revs[i] = &list.Items[i]
	}
	return OwnedBy(qn, revs), nil
}

// readyNow is the criterion a revision must meet: Ready, at the current
// generation, and Healthy when a health policy judges the node.
func readyNow(status *qnv1alpha1.QuantumNodeStatus, judged bool) (bool, string) {
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
func (f *Follower) keepRevisions(ctx context.Context, qn *qnv1alpha1.QuantumNode, p Plan) error {
	if p.Create != nil {
		if err := f.client.Create(ctx, p.Create, client.FieldOwner(controller.ManagerName)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("record revision %d of QuantumNode %s/%s: %w", p.Create.Revision, qn.Namespace, qn.Name, err)
		}
	}
	if p.Renumber != nil {
		if err := f.client.Update(ctx, p.Renumber, client.FieldOwner(controller.ManagerName)); err != nil {
			return fmt.Errorf("renumber revision %s of QuantumNode %s/%s as %d: %w", p.Renumber.Name, qn.Namespace, qn.Name, p.Renumber.Revision, err)
		}
	}
	for _, old := range p.Delete {
		if err := f.client.Delete(ctx, old, client.Preconditions{UID: &old.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete revision %s of QuantumNode %s/%s beyond its history limit: %w", old.Name, qn.Namespace, qn.Name, err)
		}
	}
	return nil
}

func (f *Follower) recordRollback(qn *qnv1alpha1.QuantumNode, rb qnv1alpha1.RollbackRecord, why string, automatic, hasTarget bool) {
	f.recorder.Eventf(qn, nil, corev1.EventTypeWarning, qnv1alpha1.ReasonProgressDeadlineExceeded, "Rollout", "%s", why)
	what := "rolled back automatically"
	switch {
	case !hasTarget:
		what = "no earlier revision was Ready, nothing to roll back to"
	case !automatic:
		what = fmt.Sprintf("automatic rollback is off (report only); `qnctl rollout undo %s -n %s --to-revision %d` rolls back", qn.Name, qn.Namespace, rb.ToRevision)
	}
	f.recorder.Eventf(qn, nil, corev1.EventTypeWarning, qnv1alpha1.EventRollbackTriggered, "Rollout",
		"rollback %s: revision %d → %d, triggered by %s; %s", rb.ID, rb.FromRevision, rb.ToRevision, rb.Trigger, what)
	f.rollbacks.WithLabelValues(fmt.Sprint(automatic && hasTarget)).Inc()
}

// Apply writes a pending rollback into the spec, before the status that
// records it; it returns the QuantumNode as stored after the write. A
// write admission or RBAC refuses is recorded in status as reported, not
// performed; a conflict is returned (the next reconcile judges the newer
// spec).
func (f *Follower) Apply(ctx context.Context, qn *qnv1alpha1.QuantumNode, status *qnv1alpha1.QuantumNodeStatus, p *PendingRollback) (*qnv1alpha1.QuantumNode, error) {
	patched := qn.DeepCopy()
	data, err := Patch(qn, p.target, p.record)
	if err != nil {
		return nil, err
	}
	if err := f.client.Patch(ctx, patched, client.RawPatch(types.MergePatchType, data), client.FieldOwner(RollbackFieldManager)); err != nil {
		if apierrors.IsConflict(err) {
			return nil, err // the next reconcile judges the newer spec
		}
		// Refused (admission, RBAC): record it as reported, not performed.
		status.Rollout.LastRollback.Performed = false
		status.Rollout.LastRollback.Trigger = controller.Clip(status.Rollout.LastRollback.Trigger + "; the rollback was refused: " + err.Error())
		f.recorder.Eventf(qn, nil, corev1.EventTypeWarning, qnv1alpha1.EventRollbackFailed, "Rollout", "rollback %s to revision %d refused: %v", p.record.ID, p.record.ToRevision, err)
		log.FromContext(ctx).Error(err, "automatic rollback refused", "rollback", p.record.ID)
		return qn, nil
	}
	return patched, nil
}
