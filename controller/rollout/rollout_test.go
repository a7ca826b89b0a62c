package rollout

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

func node(port int32) *qnv1alpha1.QuantumNode {
	return &qnv1alpha1.QuantumNode{
		ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "edge-1", UID: types.UID("uid-1"), ResourceVersion: "42"},
		Spec: qnv1alpha1.QuantumNodeSpec{
			Hardware: qnv1alpha1.Hardware{Arch: qnv1alpha1.ArchARM64},
			Services: []qnv1alpha1.Service{{Name: "grpc", Port: port}},
		},
	}
}

// history returns the revisions of qn's specs at these ports, numbered 1…n.
func history(ports ...int32) []*appsv1.ControllerRevision {
	var out []*appsv1.ControllerRevision
	for i, p := range ports {
		out = append(out, NewRevision(node(p), int64(i+1)))
	}
	return out
}

func names(revs []*appsv1.ControllerRevision) []string {
	var out []string
	for _, r := range revs {
		out = append(out, r.Name)
	}
	return out
}

func TestPlanRevisions(t *testing.T) {
	qn := node(9090)
	_, _, hash := SnapshotOf(qn)
	current := RevisionName("edge-1", hash)

	t.Run("a new spec gets a revision numbered after the newest", func(t *testing.T) {
		p := PlanRevisions(qn, history(8080, 8081), "")
		if p.Create == nil || p.Create.Revision != 3 || p.Create.Name != current || p.Renumber != nil {
			t.Fatalf("plan %+v", p)
		}
		if !metav1.IsControlledBy(p.Create, qn) || p.Create.Labels[qnv1alpha1.LabelQuantumNode] != "edge-1" {
			t.Errorf("the revision is not owned and labelled: %+v", p.Create.ObjectMeta)
		}
	})
	t.Run("a spec back at an older revision renumbers it as the newest", func(t *testing.T) {
		p := PlanRevisions(qn, history(9090, 8081), "")
		if p.Create != nil || p.Renumber == nil || p.Renumber.Revision != 3 || p.Current.Name != current {
			t.Fatalf("plan %+v", p)
		}
	})
	t.Run("the newest revision holding the spec needs nothing", func(t *testing.T) {
		p := PlanRevisions(qn, history(8080, 9090), "")
		if p.Create != nil || p.Renumber != nil || len(p.Delete) != 0 || p.Current.Revision != 2 {
			t.Fatalf("plan %+v", p)
		}
	})
	t.Run("history beyond the limit goes, oldest first, but never the ready revision", func(t *testing.T) {
		limit := int32(2)
		qn := node(9090)
		qn.Spec.RevisionHistoryLimit = &limit
		revs := history(1001, 1002, 1003, 1004, 1005)
		p := PlanRevisions(qn, revs, revs[0].Name)
		// Kept: the current (new), the two newest old ones (1004, 1005)
		// and, beyond the limit, the ready one (1001): 1002 and 1003 go.
		want := []string{revs[1].Name, revs[2].Name}
		if got := names(p.Delete); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("deletes %v, want %v", got, want)
		}
	})
	t.Run("the default limit is 10", func(t *testing.T) {
		ports := make([]int32, 12)
		for i := range ports {
			ports[i] = int32(2000 + i)
		}
		if got := len(PlanRevisions(qn, history(ports...), "").Delete); got != 2 {
			t.Errorf("deletes %d of 12 old revisions, want 2", got)
		}
	})
}

func TestProgress(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	started := metav1.NewTime(now.Add(-11 * time.Minute))
	cur := &RevisionRef{Name: "edge-1-new", Number: 4}
	ready := &RevisionRef{Name: "edge-1-old", Number: 3}
	base := func() ProgressInput {
		return ProgressInput{Now: now, Current: cur, Ready: ready, Deadline: 10 * time.Minute, UID: "uid-1", Why: "Healthy is False: port grpc:9999 has 0 ready endpoints",
			Status: &qnv1alpha1.RolloutStatus{CurrentRevision: cur.Name, ReadyRevision: ready.Name, StartedAt: &started}}
	}

	t.Run("a Ready revision becomes the ready one", func(t *testing.T) {
		in := base()
		in.IsReady = true
		out := Progress(in)
		if out.Status.ReadyRevision != cur.Name || out.Condition.Reason != qnv1alpha1.ReasonRevisionReady || out.Rollback != nil {
			t.Errorf("outcome %+v", out)
		}
	})
	t.Run("a new revision starts its deadline now", func(t *testing.T) {
		in := base()
		in.Status.CurrentRevision = "edge-1-older"
		out := Progress(in)
		if !out.Status.StartedAt.Time.Equal(now) || out.Condition.Reason != qnv1alpha1.ReasonRevisionProgressing || out.RequeueAfter != 10*time.Minute {
			t.Errorf("outcome %+v", out)
		}
	})
	t.Run("past the deadline: ProgressDeadlineExceeded and one rollback to the ready revision", func(t *testing.T) {
		out := Progress(base())
		if out.Condition.Status != metav1.ConditionFalse || out.Condition.Reason != qnv1alpha1.ReasonProgressDeadlineExceeded {
			t.Fatalf("condition %+v", out.Condition)
		}
		rb := out.Rollback
		if rb == nil || rb.FromRevision != 4 || rb.ToRevision != 3 || out.Target != ready || !strings.HasPrefix(rb.ID, "rb-") || !strings.Contains(rb.Trigger, "port grpc:9999") {
			t.Fatalf("rollback %+v target %+v", rb, out.Target)
		}
		// The next look, with the record stored, triggers nothing more.
		again := base()
		again.Status = &out.Status
		if out2 := Progress(again); out2.Rollback != nil || out2.Condition.Reason != qnv1alpha1.ReasonProgressDeadlineExceeded {
			t.Errorf("triggered again: %+v", out2.Rollback)
		}
	})
	t.Run("past the deadline with no earlier Ready revision: reported, nothing to go back to", func(t *testing.T) {
		in := base()
		in.Ready = nil
		out := Progress(in)
		if out.Rollback == nil || out.Target != nil || out.Rollback.ToRevision != 0 {
			t.Errorf("outcome %+v", out)
		}
	})
}

func TestPatchRestoresTheSnapshotUnderTheReadVersion(t *testing.T) {
	qn := node(9999)
	qn.Spec.NodeName = "worker-9"
	old := node(9090)
	snap, _, _ := SnapshotOf(old)
	data, err := Patch(qn, snap, qnv1alpha1.RollbackRecord{ID: "rb-1", FromRevision: 4, ToRevision: 3})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	meta := got["metadata"].(map[string]any)
	spec := got["spec"].(map[string]any)
	if meta["resourceVersion"] != "42" {
		t.Errorf("patch without the read resourceVersion: %s", data)
	}
	if _, ok := spec["nodeName"]; !ok || spec["nodeName"] != nil {
		t.Errorf("a nodeName absent from the revision is not removed: %s", data)
	}
	if !strings.Contains(string(data), `"port":9090`) || !strings.Contains(meta["annotations"].(map[string]any)[qnv1alpha1.AnnotationRollback].(string), `"id":"rb-1"`) {
		t.Errorf("patch %s", data)
	}
}

func TestDecodeRefusesWhatIsNoSnapshot(t *testing.T) {
	rev := NewRevision(node(9090), 1)
	if _, err := Decode(rev); err != nil {
		t.Fatal(err)
	}
	rev.Data.Raw = []byte(`{"spec":{}}`)
	if _, err := Decode(rev); err == nil {
		t.Error("an empty snapshot decoded")
	}
}
