package quantumnode

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller/rollout"
)

// endpointSlice gives the QuantumNode's Service one ready endpoint for
// grpc:<port>, as whatever serves the node would.
func (h *harness) endpointSlice(t *testing.T, ns, qnName string, port int32) {
	t.Helper()
	name, ready := "grpc", true
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: qnName + "-slice", Labels: map[string]string{discoveryv1.LabelServiceName: qnName}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.2.3"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	if err := h.client.Create(context.Background(), s); err != nil {
		t.Fatalf("create EndpointSlice: %v", err)
	}
}

func (h *harness) revisions(t *testing.T, ns, qnName string) []appsv1.ControllerRevision {
	t.Helper()
	list := &appsv1.ControllerRevisionList{}
	if err := h.client.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{qnv1alpha1.LabelQuantumNode: qnName}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b appsv1.ControllerRevision) int { return int(a.Revision - b.Revision) })
	return list.Items
}

func (h *harness) waitForProgress(t *testing.T, key client.ObjectKey, reason, message string) *qnv1alpha1.QuantumNode {
	t.Helper()
	qn := &qnv1alpha1.QuantumNode{}
	eventually(t, fmt.Sprintf("%s is Progressing %s (%s)", key, reason, message), func() error {
		if err := h.client.Get(context.Background(), key, qn); err != nil {
			return err
		}
		c := meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionProgressing)
		if c == nil || c.Reason != reason || !strings.Contains(c.Message, message) {
			return fmt.Errorf("Progressing %+v", c)
		}
		return nil
	})
	return qn
}

func port(qn *qnv1alpha1.QuantumNode) int32 { return qn.Spec.Services[0].Port }

// TestEnvtestASpecChangeToAPortNothingServesIsRolledBack: the new port has
// no ready endpoint, so the change is never Ready; past
// progressDeadlineSeconds the controller reports ProgressDeadlineExceeded,
// triggers a rollback and, with automatic rollback on, patches the spec
// back to the last Ready revision, which becomes the newest.
func TestEnvtestASpecChangeToAPortNothingServesIsRolledBack(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	ns := h.namespace(t)
	policy := policyName(t)
	h.createPolicy(t, policy, func(s *qnv1alpha1.QuantumNodeHealthPolicySpec) {
		s.Endpoints = &qnv1alpha1.EndpointsCheck{FailedAfter: dur(time.Hour)}
		s.Rollback = &qnv1alpha1.RollbackPolicy{Automatic: true}
	})
	node := nodeName(t, "w1")
	h.createNode(t, node, "arm64", true, nil)
	qn := h.createQuantumNode(t, ns, "edge", labelled(policy), func(qn *qnv1alpha1.QuantumNode) {
		qn.Spec.NodeName = node
		qn.Spec.ProgressDeadlineSeconds = i32(3)
	})
	key := client.ObjectKeyFromObject(qn)
	h.endpointSlice(t, ns, "edge", 9090)
	h.waitForHealth(t, key, qnv1alpha1.HealthHealthy)
	h.waitForProgress(t, key, qnv1alpha1.ReasonRevisionReady, "revision 1 is Ready")

	h.update(t, qn, func() {
		qn.Spec.Services[0].Port = 9999
		qn.Annotations = map[string]string{rollout.AnnotationChangeCause: "move grpc to 9999"}
	})
	h.waitForProgress(t, key, qnv1alpha1.ReasonRevisionProgressing, "revision 2 is not Ready yet")
	h.waitForEvent(t, ns, "edge", qnv1alpha1.ReasonProgressDeadlineExceeded)
	note := h.waitForEvent(t, ns, "edge", qnv1alpha1.EventRollbackTriggered)
	if !strings.Contains(note, "revision 2 → 1") || !strings.Contains(note, "port grpc:9999 has 0 ready endpoints") || !strings.Contains(note, "rolled back automatically") {
		t.Errorf("RollbackTriggered says %q", note)
	}
	eventually(t, "the spec is back at port 9090", func() error {
		if err := h.client.Get(context.Background(), key, qn); err != nil {
			return err
		}
		if port(qn) != 9090 {
			return fmt.Errorf("port %d", port(qn))
		}
		return nil
	})
	var rec qnv1alpha1.RollbackRecord
	if err := json.Unmarshal([]byte(qn.Annotations[qnv1alpha1.AnnotationRollback]), &rec); err != nil {
		t.Fatalf("annotation %s: %v", qnv1alpha1.AnnotationRollback, err)
	}
	if rec.FromRevision != 2 || rec.ToRevision != 1 || !rec.Performed || !strings.Contains(note, rec.ID) {
		t.Errorf("rollback record %+v, event %q", rec, note)
	}
	if !slices.ContainsFunc(qn.ManagedFields, func(m metav1.ManagedFieldsEntry) bool { return m.Manager == rollout.RollbackFieldManager }) {
		t.Errorf("no managedFields entry of %s", rollout.RollbackFieldManager)
	}
	// The restored spec is Ready again, as revision 3 (the old one renumbered).
	qn = h.waitForProgress(t, key, qnv1alpha1.ReasonRevisionReady, "revision 3 is Ready")
	if lr := qn.Status.Rollout.LastRollback; lr == nil || lr.ID != rec.ID || !lr.Performed {
		t.Errorf("status.rollout.lastRollback %+v, want %s performed", lr, rec.ID)
	}
	revs := h.revisions(t, ns, "edge")
	if len(revs) != 2 || revs[1].Revision != 3 || revs[0].Annotations[rollout.AnnotationChangeCause] != "move grpc to 9999" {
		t.Errorf("revisions %v", revisionSummary(revs))
	}
}

// TestEnvtestWithoutAutomaticRollbackTheMissedDeadlineIsOnlyReported, and
// `qnctl rollout undo`'s library then rolls back by hand.
func TestEnvtestWithoutAutomaticRollbackTheMissedDeadlineIsOnlyReported(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	ns := h.namespace(t)
	policy := policyName(t)
	h.createPolicy(t, policy, func(s *qnv1alpha1.QuantumNodeHealthPolicySpec) {
		s.Endpoints = &qnv1alpha1.EndpointsCheck{FailedAfter: dur(time.Hour)}
	})
	node := nodeName(t, "w1")
	h.createNode(t, node, "arm64", true, nil)
	qn := h.createQuantumNode(t, ns, "edge", labelled(policy), func(qn *qnv1alpha1.QuantumNode) {
		qn.Spec.NodeName = node
		qn.Spec.ProgressDeadlineSeconds = i32(2)
	})
	key := client.ObjectKeyFromObject(qn)
	h.endpointSlice(t, ns, "edge", 9090)
	h.waitForProgress(t, key, qnv1alpha1.ReasonRevisionReady, "revision 1 is Ready")
	h.update(t, qn, func() { qn.Spec.Services[0].Port = 9999 })
	qn = h.waitForProgress(t, key, qnv1alpha1.ReasonProgressDeadlineExceeded, "revision 2 was not Ready within 2s")
	note := h.waitForEvent(t, ns, "edge", qnv1alpha1.EventRollbackTriggered)
	if !strings.Contains(note, "report only") || !strings.Contains(note, "--to-revision 1") {
		t.Errorf("RollbackTriggered says %q", note)
	}
	time.Sleep(time.Second)
	qn = h.get(t, key)
	if port(qn) != 9999 || qn.Status.Rollout.LastRollback == nil || qn.Status.Rollout.LastRollback.Performed {
		t.Fatalf("report only rewrote the spec or recorded it performed: port %d, %+v", port(qn), qn.Status.Rollout.LastRollback)
	}

	history, err := rollout.History(context.Background(), h.client, qn)
	if err != nil {
		t.Fatal(err)
	}
	if len(history) != 2 || !history[1].Current || history[0].Snapshot.Spec.Services[0].Port != 9090 || !history[0].Ready {
		t.Fatalf("history %+v", history)
	}
	rec, err := rollout.Undo(context.Background(), h.client, qn, 0, "qnctl", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if rec.FromRevision != 2 || rec.ToRevision != 1 {
		t.Errorf("undo %+v", rec)
	}
	h.waitForProgress(t, key, qnv1alpha1.ReasonRevisionReady, "revision 3 is Ready")
	if _, err := rollout.Undo(context.Background(), h.client, h.get(t, key), 7, "qnctl", time.Now()); err == nil || !strings.Contains(err.Error(), "has no revision 7") {
		t.Errorf("undo to a revision that does not exist: %v", err)
	}
}

func revisionSummary(revs []appsv1.ControllerRevision) []string {
	var out []string
	for _, r := range revs {
		out = append(out, fmt.Sprintf("%s=%d %s", r.Name, r.Revision, r.Data.Raw))
	}
	return out
}

// TestEnvtestTheActiveCheckFollowsARealSocket checks a real port on
// loopback (the Node's InternalIP is 127.0.0.1): it answers, then closes
// (Degraded, then Failed after more than maxConsecutiveFailures checks),
// then answers again.
func TestEnvtestTheActiveCheckFollowsARealSocket(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	ns := h.namespace(t)
	policy := policyName(t)
	h.createPolicy(t, policy, func(s *qnv1alpha1.QuantumNodeHealthPolicySpec) {
		s.Probe = &qnv1alpha1.ProbeCheck{Period: dur(200 * time.Millisecond), Timeout: dur(200 * time.Millisecond), MaxConsecutiveFailures: i32(2)}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveAccepts(ln)
	p := int32(ln.Addr().(*net.TCPAddr).Port)
	node := nodeName(t, "w1")
	h.createNode(t, node, "arm64", true, nil)
	h.updateNode(t, node, func(n *corev1.Node) {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	})
	qn := h.createQuantumNode(t, ns, "edge", labelled(policy), func(qn *qnv1alpha1.QuantumNode) {
		qn.Spec.NodeName = node
		qn.Spec.Services[0].Port = p
	})
	key := client.ObjectKeyFromObject(qn)
	h.waitForHealth(t, key, qnv1alpha1.HealthHealthy)

	ln.Close()
	qn = h.waitForHealth(t, key, qnv1alpha1.HealthDegraded)
	if c := meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionHealthy); c.Reason != "ProbeFailing" || !strings.Contains(c.Message, "connection refused") {
		t.Errorf("Healthy %s: %s", c.Reason, c.Message)
	}
	qn = h.waitForHealth(t, key, qnv1alpha1.HealthFailed)
	if c := meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionHealthy); !strings.Contains(c.Message, "failed 3 checks in a row") {
		t.Errorf("Healthy message %q", c.Message)
	}
	again, err := net.Listen("tcp", ln.Addr().String())
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	defer again.Close()
	serveAccepts(again)
	h.waitForHealth(t, key, qnv1alpha1.HealthHealthy)

	// A deleted node is no longer checked.
	if err := h.client.Delete(context.Background(), qn); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted node's checks stop", func() error {
		if h.reconciler.heal.Prober().Results(key) != nil {
			return fmt.Errorf("still checked")
		}
		return nil
	})
}

func serveAccepts(ln net.Listener) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}
