// Package rollout keeps a QuantumNode's spec history as ControllerRevisions,
// judges whether the latest revision became Ready within its progress
// deadline, and rolls a spec back to an earlier revision, for the
// controller (automatic rollback) and for `qnctl rollout` alike. The
// controller's side is the Follower, the step the QuantumNode reconcile
// runs: it keeps the revisions, follows the current one, and applies and
// records a rollback (follow.go); the decisions it reads are pure
// (PlanRevisions, Progress).
//
// A revision holds the part of the spec that describes the node (hardware,
// services, nodeName); the rollout settings themselves
// (revisionHistoryLimit, progressDeadlineSeconds) are not part of it, as a
// Deployment's revisions hold its Pod template only.
package rollout

import (
	"cmp"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// Labels and annotations of the revisions.
const (
	// LabelHash is the revision's content hash, as the apps controllers
	// label their own ControllerRevisions.
	LabelHash = "controller-revision-hash"
	// AnnotationChangeCause is copied from the QuantumNode when a revision
	// is created, for `qnctl rollout history`, as kubectl does.
	AnnotationChangeCause = "kubernetes.io/change-cause"
)

// Snapshot is what a revision holds: the spec fields that describe the
// node, serialised as {"spec": {...}}.
type Snapshot struct {
	Spec SnapshotSpec `json:"spec"`
}

// SnapshotSpec are the tracked fields of QuantumNodeSpec.
type SnapshotSpec struct {
	Hardware qnv1alpha1.Hardware  `json:"hardware"`
	Services []qnv1alpha1.Service `json:"services"`
	NodeName string               `json:"nodeName,omitempty"`
}

// SnapshotOf returns qn's snapshot, its JSON and its hash.
func SnapshotOf(qn *qnv1alpha1.QuantumNode) (Snapshot, []byte, string) {
	s := Snapshot{Spec: SnapshotSpec{Hardware: qn.Spec.Hardware, Services: qn.Spec.Services, NodeName: qn.Spec.NodeName}}
	data, err := json.Marshal(s)
	if err != nil {
		// Plain structs of strings and integers always marshal.
		panic(fmt.Sprintf("marshal a QuantumNode snapshot: %v", err))
	}
	h := fnv.New32a()
	h.Write(data)
	return s, data, rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// Decode reads a revision's snapshot.
func Decode(rev *appsv1.ControllerRevision) (Snapshot, error) {
	var s Snapshot
	if err := json.Unmarshal(rev.Data.Raw, &s); err != nil {
		return s, fmt.Errorf("ControllerRevision %s/%s holds no QuantumNode snapshot: %w", rev.Namespace, rev.Name, err)
	}
	if len(s.Spec.Services) == 0 || s.Spec.Hardware.Arch == "" {
		return s, fmt.Errorf("ControllerRevision %s/%s holds no QuantumNode snapshot (no hardware or services)", rev.Namespace, rev.Name)
	}
	return s, nil
}

// RevisionName is <QuantumNode name>-<hash>, the name shortened to fit
// an object name.
func RevisionName(qnName, hash string) string {
	const maxName = 253
	if len(qnName)+1+len(hash) > maxName {
		qnName = qnName[:maxName-1-len(hash)]
	}
	return qnName + "-" + hash
}

// NewRevision is the ControllerRevision of qn's current spec, numbered
// number, owned by qn (deleted with it by the garbage collector).
func NewRevision(qn *qnv1alpha1.QuantumNode, number int64) *appsv1.ControllerRevision {
	_, data, hash := SnapshotOf(qn)
	rev := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:            RevisionName(qn.Name, hash),
			Namespace:       qn.Namespace,
			Labels:          map[string]string{qnv1alpha1.LabelQuantumNode: qn.Name, LabelHash: hash},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(qn, qnv1alpha1.GroupVersionKind)},
		},
		Data:     runtime.RawExtension{Raw: data},
		Revision: number,
	}
	if cause := qn.Annotations[AnnotationChangeCause]; cause != "" {
		rev.Annotations = map[string]string{AnnotationChangeCause: cause}
	}
	return rev
}

// Plan is what keeping qn's history takes.
type Plan struct {
	// Current is the revision of the spec as it is now (after the plan).
	Current *appsv1.ControllerRevision
	// Create is set when no revision holds the current spec.
	Create *appsv1.ControllerRevision
	// Renumber is set when an older revision holds the current spec (a
	// rollback, or a change reverted by hand): it becomes the newest, as
	// Deployments renumber a ReplicaSet they roll back to.
	Renumber *appsv1.ControllerRevision
	// Delete are the revisions beyond the history limit, oldest first;
	// never the current or the ready one.
	Delete []*appsv1.ControllerRevision
}

// PlanRevisions compares qn's current spec with its revisions (owned by it)
// and says what to create, renumber and delete. readyRevision is kept
// whatever its age: it is what a rollback goes back to.
func PlanRevisions(qn *qnv1alpha1.QuantumNode, revisions []*appsv1.ControllerRevision, readyRevision string) Plan {
	revs := Sorted(revisions)
	_, data, hash := SnapshotOf(qn)
	name := RevisionName(qn.Name, hash)
	var newest int64
	var match *appsv1.ControllerRevision
	for _, r := range revs {
		newest = max(newest, r.Revision)
		if r.Name == name && string(r.Data.Raw) == string(data) {
			match = r
		}
	}
	var p Plan
	switch {
	case match == nil:
		p.Create = NewRevision(qn, newest+1)
		p.Current = p.Create
	case match.Revision != newest:
		renumbered := match.DeepCopy()
		renumbered.Revision = newest + 1
		p.Renumber, p.Current = renumbered, renumbered
	default:
		p.Current = match
	}
	// History: every revision but the current, newest first; keep limit.
	limit := qn.Spec.HistoryLimit()
	kept := 0
	for i := len(revs) - 1; i >= 0; i-- {
		r := revs[i]
		if r.Name == p.Current.Name {
			continue
		}
		if r.Name == readyRevision || kept < limit {
			kept++
			continue
		}
		p.Delete = append([]*appsv1.ControllerRevision{r}, p.Delete...)
	}
	return p
}

// Sorted returns revisions by number, oldest first (ties by name).
func Sorted(revisions []*appsv1.ControllerRevision) []*appsv1.ControllerRevision {
	out := slices.Clone(revisions)
	slices.SortFunc(out, func(a, b *appsv1.ControllerRevision) int {
		return cmp.Or(cmp.Compare(a.Revision, b.Revision), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// OwnedBy keeps the revisions qn controls (same name label, and its uid
// as controller), dropping a foreign or stale one of the same name.
func OwnedBy(qn *qnv1alpha1.QuantumNode, revisions []*appsv1.ControllerRevision) []*appsv1.ControllerRevision {
	var out []*appsv1.ControllerRevision
	for _, r := range revisions {
		if metav1.IsControlledBy(r, qn) {
			out = append(out, r)
		}
	}
	return out
}
