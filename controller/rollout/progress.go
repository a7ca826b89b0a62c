package rollout

import (
	"fmt"
	"hash/fnv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// ProgressInput is what Progress judges.
type ProgressInput struct {
	Now time.Time
	// Status is status.rollout so far (nil when never written).
	Status *qnv1alpha1.RolloutStatus
	// Current is the revision of the current spec; Ready is the last Ready
	// one (nil when none exists any more).
	Current, Ready *RevisionRef
	// IsReady says the current spec is Ready (and Healthy, under a health
	// policy); Why says what is missing when it is not.
	IsReady bool
	Why     string
	// Deadline is spec.progressDeadlineSeconds.
	Deadline time.Duration
	// UID is the QuantumNode's, for rollback ids.
	UID string
}

// RevisionRef names a revision and its number.
type RevisionRef struct {
	Name   string
	Number int64
}

// ProgressOutcome is the new rollout status and condition; Rollback is set
// once per revision that missed its deadline.
type ProgressOutcome struct {
	Status    qnv1alpha1.RolloutStatus
	Condition metav1.Condition
	// Rollback is a newly triggered rollback; Target is the revision it
	// goes back to (nil: nothing to go back to, report only).
	Rollback *qnv1alpha1.RollbackRecord
	Target   *RevisionRef
	// RequeueAfter is when the deadline passes.
	RequeueAfter time.Duration
}

// Progress follows the current revision to Ready or to its deadline.
func Progress(in ProgressInput) ProgressOutcome {
	var st qnv1alpha1.RolloutStatus
	if in.Status != nil {
		st = *in.Status.DeepCopy()
	}
	if st.CurrentRevision != in.Current.Name || st.StartedAt == nil {
		st.CurrentRevision = in.Current.Name
		// Seconds, as the API server stores it, so the next reconcile
		// compares equal and writes nothing.
		started := metav1.NewTime(in.Now.Truncate(time.Second))
		st.StartedAt = &started
	}
	out := ProgressOutcome{Condition: metav1.Condition{Type: qnv1alpha1.ConditionProgressing, Status: metav1.ConditionTrue}}
	if in.IsReady {
		st.ReadyRevision = in.Current.Name
		out.Condition.Reason = qnv1alpha1.ReasonRevisionReady
		out.Condition.Message = fmt.Sprintf("revision %d is Ready", in.Current.Number)
		out.Status = st
		return out
	}
	deadline := st.StartedAt.Add(in.Deadline)
	if in.Now.Before(deadline) {
		out.Condition.Reason = qnv1alpha1.ReasonRevisionProgressing
		out.Condition.Message = fmt.Sprintf("revision %d is not Ready yet (%s); its deadline is %s", in.Current.Number, in.Why, deadline.UTC().Format(time.RFC3339))
		out.RequeueAfter = deadline.Sub(in.Now)
		out.Status = st
		return out
	}
	out.Condition.Status = metav1.ConditionFalse
	out.Condition.Reason = qnv1alpha1.ReasonProgressDeadlineExceeded
	out.Condition.Message = fmt.Sprintf("revision %d was not Ready within %s (%s)", in.Current.Number, in.Deadline, in.Why)
	id := rollbackID(in.UID, in.Current.Name, st.StartedAt.Time)
	if st.LastRollback == nil || st.LastRollback.ID != id {
		rb := &qnv1alpha1.RollbackRecord{
			ID:           id,
			FromRevision: in.Current.Number,
			Trigger:      fmt.Sprintf("%s: %s", qnv1alpha1.ReasonProgressDeadlineExceeded, out.Condition.Message),
			At:           metav1.NewTime(in.Now.Truncate(time.Second)),
		}
		if in.Ready != nil && in.Ready.Name != in.Current.Name {
			rb.ToRevision = in.Ready.Number
			out.Target = in.Ready
		}
		out.Rollback = rb
		st.LastRollback = rb
	}
	out.Status = st
	return out
}

// rollbackID is the same for one revision's one missed deadline on every
// replica and retry, so a rollback is triggered once.
func rollbackID(uid, revision string, started time.Time) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%s/%d", uid, revision, started.Unix())
	return fmt.Sprintf("rb-%016x", h.Sum64())
}
