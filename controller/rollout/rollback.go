package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// RollbackFieldManager is the field manager of qn-controller's automatic
// rollbacks, apart from its other writes so that managedFields show who
// rewrote the spec.
const RollbackFieldManager = "qn-controller-rollback"

// Patch is the JSON merge patch that puts snap back into qn's spec and
// records rec in the qn.dev/rollback annotation. It carries qn's
// resourceVersion, so it fails with a conflict rather than overwrite a
// change made since qn was read.
func Patch(qn *qnv1alpha1.QuantumNode, snap Snapshot, rec qnv1alpha1.RollbackRecord) ([]byte, error) {
	record, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode rollback record: %w", err)
	}
	var nodeName any // null removes the field
	if snap.Spec.NodeName != "" {
		nodeName = snap.Spec.NodeName
	}
	patch := map[string]any{
		"metadata": map[string]any{
			"resourceVersion": qn.ResourceVersion,
			"annotations":     map[string]string{qnv1alpha1.AnnotationRollback: string(record)},
		},
		"spec": map[string]any{
			"hardware": snap.Spec.Hardware,
			"services": snap.Spec.Services,
			"nodeName": nodeName,
		},
	}
	return json.Marshal(patch)
}

// Apply writes the rollback: rec's revision's snapshot back into qn's spec
// through the API server (and so through admission), as fieldManager.
func Apply(ctx context.Context, c client.Writer, qn *qnv1alpha1.QuantumNode, snap Snapshot, rec qnv1alpha1.RollbackRecord, fieldManager string) error {
	data, err := Patch(qn, snap, rec)
	if err != nil {
		return err
	}
	target := qn.DeepCopy()
	if err := c.Patch(ctx, target, client.RawPatch(types.MergePatchType, data), client.FieldOwner(fieldManager)); err != nil {
		return fmt.Errorf("roll QuantumNode %s/%s back to revision %d: %w", qn.Namespace, qn.Name, rec.ToRevision, err)
	}
	return nil
}

// Entry is one revision in a node's history.
type Entry struct {
	Number      int64
	Name        string
	ChangeCause string
	Created     time.Time
	// Current: the spec is this revision now; Ready: the last Ready one.
	Current, Ready bool
	Snapshot       Snapshot
	// Problem is set when the revision cannot be read.
	Problem string
}

// History lists qn's revisions, oldest first.
func History(ctx context.Context, c client.Reader, qn *qnv1alpha1.QuantumNode) ([]Entry, error) {
	list := &appsv1.ControllerRevisionList{}
	if err := c.List(ctx, list, client.InNamespace(qn.Namespace), client.MatchingLabels{qnv1alpha1.LabelQuantumNode: qn.Name}); err != nil {
		return nil, fmt.Errorf("list the revisions of QuantumNode %s/%s: %w", qn.Namespace, qn.Name, err)
	}
	revs := make([]*appsv1.ControllerRevision, len(list.Items))
	for i := range list.Items {
		revs[i] = &list.Items[i]
	}
	_, _, hash := SnapshotOf(qn)
	current := RevisionName(qn.Name, hash)
	var ready string
	if qn.Status.Rollout != nil {
		ready = qn.Status.Rollout.ReadyRevision
	}
	var out []Entry
	for _, r := range Sorted(OwnedBy(qn, revs)) {
		e := Entry{Number: r.Revision, Name: r.Name, ChangeCause: r.Annotations[AnnotationChangeCause], Created: r.CreationTimestamp.Time,
			Current: r.Name == current, Ready: r.Name == ready}
		snap, err := Decode(r)
		if err != nil {
			e.Problem = err.Error()
		}
		e.Snapshot = snap
		out = append(out, e)
	}
	return out, nil
}

// Undo rolls qn back to revision toRevision, or with 0 to the newest
// revision older than the current one, as `kubectl rollout undo` does. It
// returns the record written to the qn.dev/rollback annotation.
func Undo(ctx context.Context, c client.Client, qn *qnv1alpha1.QuantumNode, toRevision int64, fieldManager string, now time.Time) (qnv1alpha1.RollbackRecord, error) {
	history, err := History(ctx, c, qn)
	if err != nil {
		return qnv1alpha1.RollbackRecord{}, err
	}
	var from *Entry
	for i := range history {
		if history[i].Current {
			from = &history[i]
		}
	}
	var to *Entry
	for i := len(history) - 1; i >= 0; i-- {
		e := &history[i]
		if (toRevision == 0 && !e.Current && (from == nil || e.Number < from.Number)) || (toRevision != 0 && e.Number == toRevision) {
			to = e
			break
		}
	}
	switch {
	case len(history) == 0:
		return qnv1alpha1.RollbackRecord{}, fmt.Errorf("QuantumNode %s/%s has no revisions yet (qn-controller records them)", qn.Namespace, qn.Name)
	case to == nil && toRevision != 0:
		return qnv1alpha1.RollbackRecord{}, fmt.Errorf("QuantumNode %s/%s has no revision %d; `qnctl rollout history` lists them", qn.Namespace, qn.Name, toRevision)
	case to == nil:
		return qnv1alpha1.RollbackRecord{}, fmt.Errorf("QuantumNode %s/%s has no revision older than the current one to go back to", qn.Namespace, qn.Name)
	case to.Current:
		return qnv1alpha1.RollbackRecord{}, fmt.Errorf("QuantumNode %s/%s is at revision %d already", qn.Namespace, qn.Name, to.Number)
	case to.Problem != "":
		return qnv1alpha1.RollbackRecord{}, fmt.Errorf("revision %d cannot be restored: %s", to.Number, to.Problem)
	}
	rec := qnv1alpha1.RollbackRecord{
		ID:         fmt.Sprintf("rb-manual-%d", now.UnixNano()),
		ToRevision: to.Number,
		Trigger:    "qnctl rollout undo",
		Performed:  true,
		At:         metav1.NewTime(now.Truncate(time.Second)),
	}
	if from != nil {
		rec.FromRevision = from.Number
	}
	if err := Apply(ctx, c, qn, to.Snapshot, rec, fieldManager); err != nil {
		return rec, err
	}
	return rec, nil
}
