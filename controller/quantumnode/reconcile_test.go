package quantumnode

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
)

// These tests run the real manager against a real kube-apiserver (envtest).
// Each one owns a namespace and its Nodes, so they run in parallel.

func TestEnvtestANewQuantumNodeGetsAnOwnedServiceAndWaitsForItsNode(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	ns := h.namespace(t)
	qn := h.createQuantumNode(t, ns, "edge-1", func(q *qnv1alpha1.QuantumNode) {
		q.Spec.NodeName = nodeName(t, "absent")
		q.Spec.Services = []qnv1alpha1.Service{{Name: "grpc", Port: 9090}, {Name: "metrics", Port: 8080}}
	})
	key := client.ObjectKeyFromObject(qn)

	svc := h.waitForService(t, qn)
	want := []corev1.ServicePort{
		{Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 9090, TargetPort: intstr.FromInt32(9090)},
		{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 8080, TargetPort: intstr.FromInt32(8080)},
	}
	if !equality.Semantic.DeepEqual(svc.Spec.Ports, want) {
		t.Errorf("ports = %+v, want %+v", svc.Spec.Ports, want)
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.ClusterIP == "" {
		t.Errorf("type %s clusterIP %q, want a ClusterIP Service with an address", svc.Spec.Type, svc.Spec.ClusterIP)
	}
	// envtest runs no garbage collector: the owner reference is what makes
	// the Service go with its QuantumNode in a cluster.
	owner := metav1.GetControllerOf(svc)
	if owner == nil || owner.UID != qn.UID || owner.Kind != qnv1alpha1.Kind || owner.APIVersion != qnv1alpha1.GroupVersion.String() {
		t.Fatalf("controller owner = %+v, want QuantumNode %s (uid %s)", owner, qn.Name, qn.UID)
	}
	if owner.BlockOwnerDeletion == nil || !*owner.BlockOwnerDeletion {
		t.Errorf("blockOwnerDeletion is not set: foreground deletion of the QuantumNode would not wait for its Service")
	}

	got := h.waitForPhase(t, key, qnv1alpha1.PhasePending, qnv1alpha1.ReasonNodeNotFound)
	if got.Status.ObservedGeneration != got.Generation {
		t.Errorf("observedGeneration = %d, want %d", got.Status.ObservedGeneration, got.Generation)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, qnv1alpha1.ConditionServicesReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("ServicesReady = %+v, want True once the Service exists", c)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, qnv1alpha1.ConditionNodeMatched); c == nil || c.Message != "no Node named "+qn.Spec.NodeName {
		t.Errorf("NodeMatched = %+v, want it to name the missing Node", c)
	}
}

func TestEnvtestAMatchingReadyNodeMakesItReadyAndANotReadyNodeTakesItBack(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	ns := h.namespace(t)
	worker := nodeName(t, "worker")
	qn := h.createQuantumNode(t, ns, "edge-1", func(q *qnv1alpha1.QuantumNode) { q.Spec.NodeName = worker })
	key := client.ObjectKeyFromObject(qn)
	h.waitForPhase(t, key, qnv1alpha1.PhasePending, qnv1alpha1.ReasonNodeNotFound)

	h.createNode(t, worker, "arm64", true, nil)
	ready := h.waitForPhase(t, key, qnv1alpha1.PhaseReady, qnv1alpha1.ReasonAllChecksPassed)
	for _, c := range ready.Status.Conditions {
		if c.Status != metav1.ConditionTrue {
			t.Errorf("%s = %s (%s), want every condition True when Ready", c.Type, c.Status, c.Message)
		}
	}
	// The gauge counts from the manager's cache, which may trail the API
	// read above by a moment.
	eventually(t, "the phase gauge to count the Ready QuantumNode", func() error {
		if n := h.gauge(t, qnv1alpha1.PhaseReady); n < 1 {
			return fmt.Errorf("qn_controller_quantumnodes{phase=Ready} = %v", n)
		}
		return nil
	})
	matchedSince := meta.FindStatusCondition(ready.Status.Conditions, qnv1alpha1.ConditionNodeMatched).LastTransitionTime

	h.updateNode(t, worker, func(n *corev1.Node) { setReady(n, false) })
	down := h.waitForPhase(t, key, qnv1alpha1.PhaseProgressing, qnv1alpha1.ReasonNodeNotReady)
	c := meta.FindStatusCondition(down.Status.Conditions, qnv1alpha1.ConditionReady)
	if want := fmt.Sprintf("node %s is not Ready (KubeletNotReady: container runtime is down)", worker); c.Status != metav1.ConditionFalse || c.Message != want {
		t.Errorf("Ready = %s %q, want False %q", c.Status, c.Message, want)
	}
	matched := meta.FindStatusCondition(down.Status.Conditions, qnv1alpha1.ConditionNodeMatched)
	if matched.Status != metav1.ConditionTrue || !matched.LastTransitionTime.Equal(&matchedSince) {
		t.Errorf("NodeMatched = %s since %v, want it still True since %v: the Node still matches", matched.Status, matched.LastTransitionTime, matchedSince)
	}

	h.updateNode(t, worker, func(n *corev1.Node) { setReady(n, true) })
	h.waitForPhase(t, key, qnv1alpha1.PhaseReady, qnv1alpha1.ReasonAllChecksPassed)
}

// The architecture itself is immutable (the CRD refuses a change), so the
// spec agrees again by naming a Node of its architecture.
func TestEnvtestANodeOfAnotherArchitectureFailsItUntilTheSpecAgrees(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	ns := h.namespace(t)
	edge := nodeName(t, "edge-7")
	h.createNode(t, edge, "amd64", true, nil)
	armEdge := nodeName(t, "edge-8")
	h.createNode(t, armEdge, "arm64", true, nil)
	qn := h.createQuantumNode(t, ns, "edge-1", func(q *qnv1alpha1.QuantumNode) { q.Spec.NodeName = edge })
	key := client.ObjectKeyFromObject(qn)

	failed := h.waitForPhase(t, key, qnv1alpha1.PhaseFailed, qnv1alpha1.ReasonArchMismatch)
	c := meta.FindStatusCondition(failed.Status.Conditions, qnv1alpha1.ConditionNodeMatched)
	if want := fmt.Sprintf("node %s is amd64, spec asks arm64", edge); c.Reason != qnv1alpha1.ReasonArchMismatch || c.Message != want {
		t.Errorf("NodeMatched = %s %q, want %s %q", c.Reason, c.Message, qnv1alpha1.ReasonArchMismatch, want)
	}
	eventually(t, "a Warning event says why it failed", func() error {
		return h.hasEvent(qn, corev1.EventTypeWarning, qnv1alpha1.ReasonArchMismatch)
	})

	h.update(t, qn, func() { qn.Spec.NodeName = armEdge })
	ready := h.waitForPhase(t, key, qnv1alpha1.PhaseReady, qnv1alpha1.ReasonAllChecksPassed)
	if ready.Status.ObservedGeneration != 2 {
		t.Errorf("observedGeneration = %d, want 2 after the spec change", ready.Status.ObservedGeneration)
	}
	eventually(t, "a Normal event records the way back", func() error {
		return h.hasEvent(qn, corev1.EventTypeNormal, qnv1alpha1.ReasonAllChecksPassed)
	})
}

func TestEnvtestTheQnDevNodeLabelMatchesWhenNodeNameIsEmpty(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	ns := h.namespace(t)
	// A name unique across parallel tests: the label is matched in every
	// namespace.
	name := nodeName(t, "qn")
	qn := h.createQuantumNode(t, ns, name)
	key := client.ObjectKeyFromObject(qn)
	h.waitForPhase(t, key, qnv1alpha1.PhasePending, qnv1alpha1.ReasonNodeNotFound)

	worker := nodeName(t, "worker")
	h.createNode(t, worker, "arm64", true, map[string]string{qnv1alpha1.NodeLabel: name})
	h.waitForPhase(t, key, qnv1alpha1.PhaseReady, qnv1alpha1.ReasonAllChecksPassed)

	// Only the old Node carried the label: the handler must map the old
	// object too for this QuantumNode to hear of it.
	n := &corev1.Node{}
	n.Name = worker
	h.update(t, n, func() { delete(n.Labels, qnv1alpha1.NodeLabel) })
	h.waitForPhase(t, key, qnv1alpha1.PhasePending, qnv1alpha1.ReasonNodeNotFound)
}

func TestEnvtestAHandEditedOrDeletedServiceIsRestored(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	ns := h.namespace(t)
	qn := h.createQuantumNode(t, ns, "edge-1", func(q *qnv1alpha1.QuantumNode) {
		q.Spec.Services = []qnv1alpha1.Service{{Name: "grpc", Port: 9090}, {Name: "metrics", Port: 8080}}
	})
	first := h.waitForService(t, qn)

	edits := map[string]func(*corev1.Service){
		"a port moved": func(s *corev1.Service) { s.Spec.Ports[0].Port = 9999 },
		"a port added": func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "ssh", Port: 22, Protocol: corev1.ProtocolTCP})
		},
		"a port removed":      func(s *corev1.Service) { s.Spec.Ports = s.Spec.Ports[:1] },
		"the type changed":    func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort },
		"the labels stripped": func(s *corev1.Service) { s.Labels = nil },
	}
	for what, edit := range edits {
		svc := &corev1.Service{}
		svc.Namespace, svc.Name = ns, qn.Name
		h.update(t, svc, func() { edit(svc) })
		if serviceMatches(qn, svc) {
			t.Fatalf("%s: the edit left the Service in the declared shape; the test proves nothing", what)
		}
		h.waitForService(t, qn)
	}

	if err := h.client.Delete(context.Background(), first); err != nil {
		t.Fatalf("delete the Service: %v", err)
	}
	eventually(t, "the deleted Service is created again", func() error {
		svc := &corev1.Service{}
		if err := h.client.Get(context.Background(), client.ObjectKeyFromObject(first), svc); err != nil {
			return err
		}
		if svc.UID == first.UID {
			return fmt.Errorf("still the deleted Service %s", svc.UID)
		}
		if !serviceMatches(qn, svc) || !metav1.IsControlledBy(svc, qn) {
			return fmt.Errorf("recreated but not in shape or not owned: %+v", svc.Spec.Ports)
		}
		return nil
	})
}

func TestEnvtestChangingSpecServicesUpdatesTheServiceAndObservedGeneration(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	ns := h.namespace(t)
	qn := h.createQuantumNode(t, ns, "edge-1")
	key := client.ObjectKeyFromObject(qn)
	h.waitForService(t, qn)
	h.waitForPhase(t, key, qnv1alpha1.PhasePending, qnv1alpha1.ReasonNodeNotFound)

	h.update(t, qn, func() {
		qn.Spec.Services = []qnv1alpha1.Service{{Name: "grpc", Port: 9443}, {Name: "admin", Port: 7000}}
	})
	if qn.Generation != 2 {
		t.Fatalf("generation = %d after a spec change, want 2", qn.Generation)
	}
	svc := h.waitForService(t, qn)
	if got := portList(qn); len(svc.Spec.Ports) != 2 {
		t.Errorf("ports = %+v, want %s", svc.Spec.Ports, got)
	}
	eventually(t, "status.observedGeneration follows the spec", func() error {
		got := &qnv1alpha1.QuantumNode{}
		if err := h.client.Get(context.Background(), key, got); err != nil {
			return err
		}
		if got.Status.ObservedGeneration != 2 {
			return fmt.Errorf("observedGeneration %d", got.Status.ObservedGeneration)
		}
		for _, c := range got.Status.Conditions {
			if c.ObservedGeneration != 2 {
				return fmt.Errorf("%s observedGeneration %d", c.Type, c.ObservedGeneration)
			}
		}
		return nil
	})
}

func TestEnvtestAServiceSomeoneElseOwnsIsLeftAloneAndItsDeletionHeard(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	ns := h.namespace(t)
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge-1", Labels: map[string]string{"team": "web"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	if err := h.client.Create(context.Background(), foreign); err != nil {
		t.Fatalf("create the foreign Service: %v", err)
	}
	qn := h.createQuantumNode(t, ns, "edge-1")
	key := client.ObjectKeyFromObject(qn)

	h.waitForPhase(t, key, qnv1alpha1.PhaseFailed, qnv1alpha1.ReasonServiceNotOwned)
	untouched := &corev1.Service{}
	if err := h.client.Get(context.Background(), client.ObjectKeyFromObject(foreign), untouched); err != nil {
		t.Fatal(err)
	}
	if untouched.ResourceVersion != foreign.ResourceVersion {
		t.Errorf("the controller wrote to a Service it does not own: %+v", untouched.Spec.Ports)
	}

	// No owner reference leads from this Service to the QuantumNode: only
	// the name-based watch can wake the controller.
	if err := h.client.Delete(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}
	h.waitForService(t, qn)
	h.waitForPhase(t, key, qnv1alpha1.PhasePending, qnv1alpha1.ReasonNodeNotFound)
}

func TestEnvtestAReconcileWithNothingNewWritesNothing(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	ns := h.namespace(t)
	worker := nodeName(t, "worker")
	h.createNode(t, worker, "arm64", true, nil)
	qn := h.createQuantumNode(t, ns, "edge-1", func(q *qnv1alpha1.QuantumNode) { q.Spec.NodeName = worker })
	key := client.ObjectKeyFromObject(qn)
	settled := h.waitForPhase(t, key, qnv1alpha1.PhaseReady, qnv1alpha1.ReasonAllChecksPassed)
	svc := h.waitForService(t, qn)

	// The reconciler reads through the cache: let it catch up with what is
	// stored, or a stale read would fail its optimistic lock and prove
	// nothing.
	eventually(t, "the cache holds the stored QuantumNode and Service", func() error {
		cached, cachedSvc := &qnv1alpha1.QuantumNode{}, &corev1.Service{}
		if err := h.cache.Get(context.Background(), key, cached); err != nil {
			return err
		}
		if err := h.cache.Get(context.Background(), key, cachedSvc); err != nil {
			return err
		}
		if cached.ResourceVersion != settled.ResourceVersion || cachedSvc.ResourceVersion != svc.ResourceVersion {
			return fmt.Errorf("cache at %s/%s, stored %s/%s", cached.ResourceVersion, cachedSvc.ResourceVersion, settled.ResourceVersion, svc.ResourceVersion)
		}
		return nil
	})
	qnWrites, svcWrites := h.writes.of(settled), h.writes.of(svc)
	if qnWrites == 0 || svcWrites == 0 {
		t.Fatalf("%d status writes and %d Service writes counted on the way to Ready; the counter sees nothing", qnWrites, svcWrites)
	}
	for range 3 {
		if _, err := h.reconciler.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
	}
	if got := h.writes.of(settled); got != qnWrites {
		t.Errorf("%d QuantumNode writes sent by reconciles with nothing new", got-qnWrites)
	}
	if got := h.writes.of(svc); got != svcWrites {
		t.Errorf("%d Service writes sent by reconciles with nothing new", got-svcWrites)
	}
	after, afterSvc := &qnv1alpha1.QuantumNode{}, &corev1.Service{}
	if err := h.client.Get(context.Background(), key, after); err != nil {
		t.Fatal(err)
	}
	if err := h.client.Get(context.Background(), key, afterSvc); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != settled.ResourceVersion {
		t.Errorf("QuantumNode resourceVersion %s → %s: a reconcile with nothing new wrote its status", settled.ResourceVersion, after.ResourceVersion)
	}
	if afterSvc.ResourceVersion != svc.ResourceVersion {
		t.Errorf("Service resourceVersion %s → %s: a reconcile with nothing new wrote the Service", svc.ResourceVersion, afterSvc.ResourceVersion)
	}
}

// waitForService waits until qn's Service exists, is controlled by qn and
// has the declared shape, and returns it.
func (h *harness) waitForService(t *testing.T, qn *qnv1alpha1.QuantumNode) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{}
	eventually(t, fmt.Sprintf("Service %s/%s exposes %s", qn.Namespace, qn.Name, portList(qn)), func() error {
		if err := h.client.Get(context.Background(), client.ObjectKeyFromObject(qn), svc); err != nil {
			return err
		}
		if !metav1.IsControlledBy(svc, qn) {
			return fmt.Errorf("not controlled by the QuantumNode: %+v", svc.OwnerReferences)
		}
		if !serviceMatches(qn, svc) {
			return fmt.Errorf("type %s ports %+v labels %v", svc.Spec.Type, svc.Spec.Ports, svc.Labels)
		}
		return nil
	})
	return svc
}

// gauge reads qn_controller_quantumnodes for phase from the manager's
// registry. Other tests run alongside, so callers compare with at least.
func (h *harness) gauge(t *testing.T, phase qnv1alpha1.Phase) float64 {
	t.Helper()
	families, err := h.metrics.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != "qn_controller_quantumnodes" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "phase" && l.GetValue() == string(phase) {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no qn_controller_quantumnodes{phase=%q} among %d families", phase, len(families))
	return 0
}

// hasEvent says whether an events.k8s.io Event of that type and reason
// regards qn.
func (h *harness) hasEvent(qn *qnv1alpha1.QuantumNode, eventType, reason string) error {
	list := &eventsv1.EventList{}
	if err := h.client.List(context.Background(), list, client.InNamespace(qn.Namespace)); err != nil {
		return err
	}
	var seen []string
	for _, e := range list.Items {
		if e.Regarding.UID == qn.UID && e.Type == eventType && e.Reason == reason {
			if e.ReportingController != controller.ManagerName {
				return fmt.Errorf("event %s reported by %q, want %q", e.Name, e.ReportingController, controller.ManagerName)
			}
			return nil
		}
		seen = append(seen, e.Type+"/"+e.Reason)
	}
	return fmt.Errorf("no %s/%s event among %v", eventType, reason, seen)
}
