package quantumnode

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	testharness "github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/promtest"
)

// testLabel ties a test's QuantumNodes to its own policy: policies are
// cluster-wide and the tests run side by side.
const testLabel = "qn.dev/test"

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func i32(n int32) *int32 { return &n }

// createPolicy creates a policy selecting the QuantumNodes labelled
// qn.dev/test=<name>: the Node degrades them after 1s and fails them after
// 3s unless change says otherwise.
func (h *harness) createPolicy(t *testing.T, name string, change func(*qnv1alpha1.QuantumNodeHealthPolicySpec)) *qnv1alpha1.QuantumNodeHealthPolicy {
	t.Helper()
	p := &qnv1alpha1.QuantumNodeHealthPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: qnv1alpha1.QuantumNodeHealthPolicySpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{testLabel: name}},
			Node:     qnv1alpha1.NodeReadyCheck{DegradedAfter: dur(time.Second), FailedAfter: dur(3 * time.Second)},
		},
	}
	if change != nil {
		change(&p.Spec)
	}
	if err := h.client.Create(context.Background(), p); err != nil {
		t.Fatalf("create QuantumNodeHealthPolicy %s: %v", name, err)
	}
	t.Cleanup(func() { _ = h.client.Delete(context.Background(), p) })
	return p
}

// policyName is a cluster-unique policy name for the test.
func policyName(t *testing.T) string { return nodeName(t, "policy") }

// labelled puts a QuantumNode under the test's policy.
func labelled(policy string) func(*qnv1alpha1.QuantumNode) {
	return func(qn *qnv1alpha1.QuantumNode) { qn.Labels = map[string]string{testLabel: policy} }
}

// serve creates a Deployment whose Pods serve the QuantumNode (the label
// contract), waits for the real ReplicaSet controller to create its Pods,
// binds them to node as a scheduler would and returns their names.
func (h *harness) serve(t *testing.T, ns, qnName, node string, replicas int32) []string {
	t.Helper()
	labels := map[string]string{qnv1alpha1.LabelQuantumNode: qnName, "app": qnName}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: qnName + "-serve"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "serve", Image: "registry.invalid/serve:1"}}},
			},
		},
	}
	if err := h.client.Create(context.Background(), d); err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
	var names []string
	eventually(t, fmt.Sprintf("the ReplicaSet controller creates %d Pods for %s", replicas, d.Name), func() error {
		pods := h.pods(t, ns, qnName)
		if len(pods) != int(replicas) {
			return fmt.Errorf("%d Pods", len(pods))
		}
		names = nil
		for _, p := range pods {
			names = append(names, p.Name)
		}
		return nil
	})
	for _, name := range names {
		h.bind(t, ns, name, node)
	}
	return names
}

// bind binds a Pod to a Node through the binding subresource, as the
// scheduler does.
func (h *harness) bind(t *testing.T, ns, pod, node string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}}
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := h.client.SubResource("binding").Create(context.Background(), p, b); err != nil {
		t.Fatalf("bind Pod %s/%s to %s: %v", ns, pod, node, err)
	}
}

// pods lists the live (not terminating) Pods serving qnName.
func (h *harness) pods(t *testing.T, ns, qnName string) []corev1.Pod {
	t.Helper()
	list := &corev1.PodList{}
	if err := h.client.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{qnv1alpha1.LabelQuantumNode: qnName}); err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

func (h *harness) terminating(t *testing.T, ns, pod string) bool {
	t.Helper()
	p := &corev1.Pod{}
	err := h.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod}, p)
	if apierrors.IsNotFound(err) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return p.DeletionTimestamp != nil
}

// setNodeReady flips a Node's Ready condition now.
func (h *harness) setNodeReady(t testing.TB, name string, ready bool) time.Time {
	t.Helper()
	at := time.Now()
	h.updateNode(t, name, func(n *corev1.Node) { setReady(n, ready) })
	return at
}

// waitForHealth waits until the stored QuantumNode's health is state.
func (h *harness) waitForHealth(t *testing.T, key client.ObjectKey, state qnv1alpha1.HealthState) *qnv1alpha1.QuantumNode {
	t.Helper()
	qn := &qnv1alpha1.QuantumNode{}
	eventually(t, fmt.Sprintf("%s is %s", key, state), func() error {
		if err := h.client.Get(context.Background(), key, qn); err != nil {
			return err
		}
		if qn.Status.Health != state {
			c := meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionHealthy)
			return fmt.Errorf("health %q (%+v)", qn.Status.Health, c)
		}
		return nil
	})
	return qn
}

func (h *harness) get(t *testing.T, key client.ObjectKey) *qnv1alpha1.QuantumNode {
	t.Helper()
	qn := &qnv1alpha1.QuantumNode{}
	if err := h.client.Get(context.Background(), key, qn); err != nil {
		t.Fatal(err)
	}
	return qn
}

// events lists the reasons of the events regarding a QuantumNode, with
// their notes.
func (h *harness) events(t *testing.T, ns, name string) map[string][]string {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := h.client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Regarding.Kind == qnv1alpha1.Kind {
			out[e.Reason] = append(out[e.Reason], e.Note)
		}
	}
	return out
}

func (h *harness) waitForEvent(t *testing.T, ns, name, reason string) string {
	t.Helper()
	var note string
	eventually(t, fmt.Sprintf("event %s on %s/%s", reason, ns, name), func() error {
		notes := h.events(t, ns, name)[reason]
		if len(notes) == 0 {
			return fmt.Errorf("events: %v", h.events(t, ns, name))
		}
		note = notes[0]
		return nil
	})
	return note
}

// TestEnvtestANodeNotReadyDegradesThenFailsAndRestartEvictsTheServingPods
// runs the first rung end to end: the Node goes NotReady, the QuantumNode
// is Degraded after node.degradedAfter and Failed after node.failedAfter,
// and Restart evicts exactly the Pods serving it on its Node, which their
// Deployment (the real ReplicaSet controller) replaces.
func TestEnvtestANodeNotReadyDegradesThenFailsAndRestartEvictsTheServingPods(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	h.startControllerManager(t)
	ns := h.namespace(t)
	policy := policyName(t)
	h.createPolicy(t, policy, func(s *qnv1alpha1.QuantumNodeHealthPolicySpec) {
		s.Remediation = &qnv1alpha1.RemediationPolicy{Restart: &qnv1alpha1.RestartStep{Timeout: dur(time.Minute)}}
	})
	node, other := nodeName(t, "w1"), nodeName(t, "w2")
	h.createNode(t, node, "arm64", true, nil)
	h.createNode(t, other, "arm64", true, nil)
	h.createQuantumNode(t, ns, "edge", labelled(policy), func(qn *qnv1alpha1.QuantumNode) { qn.Spec.NodeName = node })
	key := client.ObjectKey{Namespace: ns, Name: "edge"}
	serving := h.serve(t, ns, "edge", node, 2)
	// Bystanders: a Pod serving the node but elsewhere, and a Pod on the
	// Node that serves nothing of it.
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "elsewhere", Labels: map[string]string{qnv1alpha1.LabelQuantumNode: "edge"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unrelated"}},
	} {
		p.Spec.Containers = []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}}
		if err := h.client.Create(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	h.bind(t, ns, "elsewhere", other)
	h.bind(t, ns, "unrelated", node)
	h.waitForHealth(t, key, qnv1alpha1.HealthHealthy)

	down := h.setNodeReady(t, node, false)
	qn := h.waitForHealth(t, key, qnv1alpha1.HealthDegraded)
	healthy := meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionHealthy)
	if healthy.Reason != "NodeNotReady" || healthy.LastTransitionTime.Time.Before(down.Add(time.Second).Truncate(time.Second)) {
		t.Errorf("Degraded %s at %s, want NodeNotReady no sooner than 1s after %s", healthy.Reason, healthy.LastTransitionTime, down)
	}
	qn = h.waitForHealth(t, key, qnv1alpha1.HealthFailed)
	r := qn.Status.Remediation
	if r == nil || r.Action != qnv1alpha1.ActionRestart || r.Attempt != 1 || r.Result != qnv1alpha1.ResultInProgress {
		t.Fatalf("remediation %+v, want Restart attempt 1 in progress", r)
	}
	if r.StartedAt.Time.Before(down.Add(3 * time.Second).Truncate(time.Second)) {
		t.Errorf("Restart started at %s, sooner than node.failedAfter (3s) after %s", r.StartedAt, down)
	}
	eventually(t, "the serving Pods on the Node are evicted", func() error {
		for _, p := range serving {
			if !h.terminating(t, ns, p) {
				return fmt.Errorf("Pod %s is not terminating", p)
			}
		}
		return nil
	})
	for _, p := range []string{"elsewhere", "unrelated"} {
		if h.terminating(t, ns, p) {
			t.Errorf("Pod %s was evicted; only the serving Pods on the Node may be", p)
		}
	}
	eventually(t, "the Deployment recreates the evicted Pods", func() error {
		var fresh int
		for _, p := range h.pods(t, ns, "edge") {
			if p.Name != "elsewhere" && !slices.Contains(serving, p.Name) {
				fresh++
			}
		}
		if fresh != 2 {
			return fmt.Errorf("%d new Pods", fresh)
		}
		return nil
	})
	h.waitForEvent(t, ns, "edge", qnv1alpha1.EventHealthDegraded)
	h.waitForEvent(t, ns, "edge", qnv1alpha1.EventHealthFailed)
	if note := h.waitForEvent(t, ns, "edge", qnv1alpha1.EventRemediationStarted); !strings.Contains(note, "Restart") {
		t.Errorf("RemediationStarted says %q", note)
	}

	// The Node comes back: Healthy, and the Restart succeeded.
	h.setNodeReady(t, node, true)
	qn = h.waitForHealth(t, key, qnv1alpha1.HealthHealthy)
	if r := qn.Status.Remediation; r == nil || r.Result != qnv1alpha1.ResultSucceeded || r.FinishedAt == nil {
		t.Errorf("remediation %+v, want Restart Succeeded", r)
	}
	h.waitForEvent(t, ns, "edge", qnv1alpha1.EventHealthRecovered)
	if got := counterValue(t, h, "qn_controller_remediations_total", map[string]string{"action": "Restart", "result": "Succeeded"}); got < 1 {
		t.Errorf("qn_controller_remediations_total{Restart,Succeeded} = %v", got)
	}
}

// TestEnvtestANodeThatStaysDownIsRescheduledToAMatchingReadyNode: Restart
// does not help, so Reschedule moves the node to the pool's one fitting
// Node, never to one of the wrong architecture, an unready or a cordoned
// one (all three first by name), cordons and taints the old Node, moves the
// qn.dev/node label and evicts the Pods left on the old Node.
func TestEnvtestANodeThatStaysDownIsRescheduledToAMatchingReadyNode(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	h.startControllerManager(t)
	ns := h.namespace(t)
	policy := policyName(t)
	pool := map[string]string{"qn.dev/pool": policy}
	h.createPolicy(t, policy, func(s *qnv1alpha1.QuantumNodeHealthPolicySpec) {
		s.Remediation = &qnv1alpha1.RemediationPolicy{
			Restart:    &qnv1alpha1.RestartStep{Timeout: dur(2 * time.Second)},
			Reschedule: &qnv1alpha1.RescheduleStep{Timeout: dur(time.Minute), NodeSelector: metav1.LabelSelector{MatchLabels: pool}},
		}
	})
	old := nodeName(t, "old")
	wrongArch, unready, cordoned, good := nodeName(t, "a-amd64"), nodeName(t, "b-unready"), nodeName(t, "c-cordoned"), nodeName(t, "d-good")
	// The node is bound by label, so the label moves with it.
	h.createNode(t, old, "arm64", true, map[string]string{qnv1alpha1.NodeLabel: "edge"})
	h.createNode(t, wrongArch, "amd64", true, pool)
	h.createNode(t, unready, "arm64", false, pool)
	h.createNode(t, cordoned, "arm64", true, pool)
	h.createNode(t, good, "arm64", true, pool)
	cn := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: cordoned}}
	h.update(t, cn, func() { cn.Spec.Unschedulable = true })
	h.createQuantumNode(t, ns, "edge", labelled(policy))
	key := client.ObjectKey{Namespace: ns, Name: "edge"}
	serving := h.serve(t, ns, "edge", old, 1)
	h.waitForHealth(t, key, qnv1alpha1.HealthHealthy)

	h.setNodeReady(t, old, false)
	var qn *qnv1alpha1.QuantumNode
	eventually(t, "Reschedule starts once Restart timed out", func() error {
		qn = h.get(t, key)
		if r := qn.Status.Remediation; r == nil || r.Action != qnv1alpha1.ActionReschedule {
			return fmt.Errorf("remediation %+v", r)
		}
		return nil
	})
	if b := qn.Status.Binding; b == nil || b.NodeName != good || b.PreviousNodeName != old {
		t.Fatalf("binding %+v, want %s → %s (the only Ready arm64 schedulable Node of the pool)", b, old, good)
	}
	if h := qn.Status.RemediationHistory; len(h) < 2 || h[1].Action != qnv1alpha1.ActionRestart || h[1].Result != qnv1alpha1.ResultFailed {
		t.Errorf("history %+v, want the Restart before it Failed", h)
	}
	eventually(t, "the old Node is cordoned and tainted, and the label moved", func() error {
		n := &corev1.Node{}
		if err := h.client.Get(context.Background(), client.ObjectKey{Name: old}, n); err != nil {
			return err
		}
		if !n.Spec.Unschedulable || !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == qnv1alpha1.TaintIsolated && t.Effect == corev1.TaintEffectNoSchedule
		}) {
			return fmt.Errorf("old Node: unschedulable %v, taints %+v", n.Spec.Unschedulable, n.Spec.Taints)
		}
		if _, still := n.Labels[qnv1alpha1.NodeLabel]; still {
			return fmt.Errorf("the old Node still carries %s", qnv1alpha1.NodeLabel)
		}
		g := &corev1.Node{}
		if err := h.client.Get(context.Background(), client.ObjectKey{Name: good}, g); err != nil {
			return err
		}
		if g.Labels[qnv1alpha1.NodeLabel] != "edge" {
			return fmt.Errorf("the new Node's labels %v", g.Labels)
		}
		return nil
	})
	for _, name := range []string{wrongArch, unready, cordoned} {
		n := &corev1.Node{}
		if err := h.client.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
			t.Fatal(err)
		}
		if n.Labels[qnv1alpha1.NodeLabel] != "" || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == qnv1alpha1.TaintIsolated }) {
			t.Errorf("Node %s was touched: labels %v, taints %v", name, n.Labels, n.Spec.Taints)
		}
	}
	eventually(t, "the Pods left on the old Node are evicted", func() error {
		if !h.terminating(t, ns, serving[0]) {
			return fmt.Errorf("Pod %s is not terminating", serving[0])
		}
		return nil
	})
	// On its new, Ready Node the QuantumNode is Healthy: Reschedule worked.
	qn = h.waitForHealth(t, key, qnv1alpha1.HealthHealthy)
	if r := qn.Status.Remediation; r.Action != qnv1alpha1.ActionReschedule || r.Result != qnv1alpha1.ResultSucceeded {
		t.Errorf("remediation %+v, want Reschedule Succeeded", r)
	}
	if c := meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionNodeMatched); c == nil || !strings.Contains(c.Message, good) {
		t.Errorf("NodeMatched %+v, want it to name %s", c, good)
	}
}

// TestEnvtestTwoFailedRestartsWithinTheWindowIsolateTheNode: with three
// attempts allowed, the second failed Restart within five minutes isolates
// the node; no third Restart and no Reschedule follow, and the health gauge
// the Isolated alert reads counts it.
func TestEnvtestTwoFailedRestartsWithinTheWindowIsolateTheNode(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	ns := h.namespace(t)
	policy := policyName(t)
	h.createPolicy(t, policy, func(s *qnv1alpha1.QuantumNodeHealthPolicySpec) {
		s.Remediation = &qnv1alpha1.RemediationPolicy{
			Restart:    &qnv1alpha1.RestartStep{Timeout: dur(2 * time.Second), Attempts: i32(3)},
			Reschedule: &qnv1alpha1.RescheduleStep{Timeout: dur(time.Minute), NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"qn.dev/pool": policy}}},
			Isolation:  &qnv1alpha1.IsolationRule{FailedRestarts: i32(2), Window: dur(5 * time.Minute)},
		}
	})
	node, spare := nodeName(t, "w1"), nodeName(t, "spare")
	h.createNode(t, node, "arm64", true, nil)
	h.createNode(t, spare, "arm64", true, map[string]string{"qn.dev/pool": policy})
	h.createQuantumNode(t, ns, "edge", labelled(policy), func(qn *qnv1alpha1.QuantumNode) { qn.Spec.NodeName = node })
	key := client.ObjectKey{Namespace: ns, Name: "edge"}
	h.waitForHealth(t, key, qnv1alpha1.HealthHealthy)

	h.setNodeReady(t, node, false)
	qn := h.waitForHealth(t, key, qnv1alpha1.HealthIsolated)
	c := meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionHealthy)
	if c.Reason != "RestartsFailing" {
		t.Errorf("Healthy %s: %s, want RestartsFailing", c.Reason, c.Message)
	}
	var restarts []string
	for _, s := range qn.Status.RemediationHistory {
		restarts = append(restarts, fmt.Sprintf("%s#%d %s", s.Action, s.Attempt, s.Result))
	}
	if want := []string{"Restart#2 Failed", "Restart#1 Failed"}; !slices.Equal(restarts, want) {
		t.Errorf("history %v, want %v", restarts, want)
	}
	h.waitForEvent(t, ns, "edge", qnv1alpha1.EventIsolated)
	if got := gaugeValue(t, h, "qn_controller_quantumnodes_health", map[string]string{"health": "Isolated"}); got < 1 {
		t.Errorf("qn_controller_quantumnodes_health{health=Isolated} = %v, want at least this node", got)
	}
	// The chart's alert fires on it: its expression, run by a real
	// Prometheus scraping this manager's metrics, has a sample.
	h.alertFires(t, "QnControllerQuantumNodeIsolated", "")
	// Nothing more happens: no third attempt, no Reschedule.
	time.Sleep(4 * time.Second)
	qn = h.get(t, key)
	if len(qn.Status.RemediationHistory) != 2 || qn.Status.Binding != nil || qn.Status.Health != qnv1alpha1.HealthIsolated {
		t.Errorf("the ladder went on after isolation: health %s, history %+v, binding %+v", qn.Status.Health, qn.Status.RemediationHistory, qn.Status.Binding)
	}
	// Repaired by a person: Healthy again.
	h.setNodeReady(t, node, true)
	h.waitForHealth(t, key, qnv1alpha1.HealthHealthy)
}

// TestEnvtestSixOfTenNodesDownWithMaxUnhealthy40PercentRemediatesNothing:
// an outage of most nodes is not repaired node by node; the policy says so
// (condition, metric) and remediation resumes once the outage shrinks.
func TestEnvtestSixOfTenNodesDownWithMaxUnhealthy40PercentRemediatesNothing(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	ns := h.namespace(t)
	policy := policyName(t)
	forty := intstr.FromString("40%")
	h.createPolicy(t, policy, func(s *qnv1alpha1.QuantumNodeHealthPolicySpec) {
		s.Remediation = &qnv1alpha1.RemediationPolicy{Restart: &qnv1alpha1.RestartStep{Timeout: dur(time.Minute)}, MaxUnhealthy: &forty, MaxInFlight: i32(10)}
	})
	var nodes []string
	for i := range 10 {
		n := nodeName(t, fmt.Sprintf("w%d", i))
		nodes = append(nodes, n)
		h.createNode(t, n, "arm64", true, nil)
		h.createQuantumNode(t, ns, fmt.Sprintf("edge-%d", i), labelled(policy), func(qn *qnv1alpha1.QuantumNode) { qn.Spec.NodeName = n })
	}
	for i := range 10 {
		h.waitForHealth(t, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("edge-%d", i)}, qnv1alpha1.HealthHealthy)
	}
	for _, n := range nodes[:6] {
		h.setNodeReady(t, n, false)
	}
	for i := range 6 {
		h.waitForHealth(t, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("edge-%d", i)}, qnv1alpha1.HealthFailed)
	}
	p := &qnv1alpha1.QuantumNodeHealthPolicy{}
	eventually(t, "the policy reports remediation not allowed", func() error {
		if err := h.client.Get(context.Background(), client.ObjectKey{Name: policy}, p); err != nil {
			return err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, qnv1alpha1.ConditionRemediationAllowed)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != qnv1alpha1.ReasonTooManyUnhealthy || p.Status.UnhealthyNodes != 6 || p.Status.SelectedNodes != 10 {
			return fmt.Errorf("status %+v", p.Status)
		}
		return nil
	})
	if got := gaugeValue(t, h, "qn_controller_remediation_blocked", map[string]string{"policy": policy}); got != 1 {
		t.Errorf("qn_controller_remediation_blocked{policy=%s} = %v, want 1", policy, got)
	}
	h.alertFires(t, "QnControllerRemediationBlocked", fmt.Sprintf("policy=%q", policy))
	time.Sleep(3 * time.Second) // well past node.failedAfter: still nothing
	for i := range 10 {
		qn := h.get(t, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("edge-%d", i)})
		if qn.Status.Remediation != nil {
			t.Errorf("edge-%d was remediated with 6 of 10 down: %+v", i, qn.Status.Remediation)
		}
	}
	h.waitForEvent(t, ns, "edge-0", qnv1alpha1.EventRemediationBlocked)

	// Three come back: 3 of 10 is within 40%, so the rest are repaired.
	for _, n := range nodes[:3] {
		h.setNodeReady(t, n, true)
	}
	eventuallyWithin(t, 45*time.Second, "the three still down get a Restart", func() error {
		for i := 3; i < 6; i++ {
			qn := h.get(t, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("edge-%d", i)})
			if qn.Status.Remediation == nil || qn.Status.Remediation.Action != qnv1alpha1.ActionRestart {
				return fmt.Errorf("edge-%d: %+v", i, qn.Status.Remediation)
			}
		}
		return nil
	})
}

// TestEnvtestPauseAndDryRunDoNothing: a paused node is held back; a dry
// run records the step it would take and evicts nothing.
func TestEnvtestPauseAndDryRunDoNothing(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	h.startControllerManager(t)
	ns := h.namespace(t)
	policy := policyName(t)
	h.createPolicy(t, policy, func(s *qnv1alpha1.QuantumNodeHealthPolicySpec) {
		all := intstr.FromString("100%")
		s.Remediation = &qnv1alpha1.RemediationPolicy{Restart: &qnv1alpha1.RestartStep{Timeout: dur(time.Minute)}, DryRun: true, MaxInFlight: i32(5), MaxUnhealthy: &all}
	})
	dry, paused := nodeName(t, "dry"), nodeName(t, "paused")
	h.createNode(t, dry, "arm64", true, nil)
	h.createNode(t, paused, "arm64", true, nil)
	h.createQuantumNode(t, ns, "dry", labelled(policy), func(qn *qnv1alpha1.QuantumNode) { qn.Spec.NodeName = dry })
	h.createQuantumNode(t, ns, "paused", labelled(policy), func(qn *qnv1alpha1.QuantumNode) {
		qn.Spec.NodeName = paused
		qn.Annotations = map[string]string{qnv1alpha1.AnnotationPauseRemediation: "firmware update"}
	})
	pods := h.serve(t, ns, "dry", dry, 1)
	for _, name := range []string{"dry", "paused"} {
		h.waitForHealth(t, client.ObjectKey{Namespace: ns, Name: name}, qnv1alpha1.HealthHealthy)
	}
	h.setNodeReady(t, dry, false)
	h.setNodeReady(t, paused, false)
	var qn *qnv1alpha1.QuantumNode
	eventually(t, "the dry run records a Restart", func() error {
		qn = h.get(t, client.ObjectKey{Namespace: ns, Name: "dry"})
		if r := qn.Status.Remediation; r == nil || r.Result != qnv1alpha1.ResultDryRun || r.Action != qnv1alpha1.ActionRestart {
			return fmt.Errorf("remediation %+v", qn.Status.Remediation)
		}
		return nil
	})
	h.waitForEvent(t, ns, "dry", qnv1alpha1.EventRemediationDryRun)
	qn = h.waitForHealth(t, client.ObjectKey{Namespace: ns, Name: "paused"}, qnv1alpha1.HealthFailed)
	eventually(t, "the paused node says why nothing is done", func() error {
		qn = h.get(t, client.ObjectKey{Namespace: ns, Name: "paused"})
		c := meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionHealthy)
		if c == nil || !strings.Contains(c.Message, "firmware update") {
			return fmt.Errorf("Healthy %+v", c)
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	if h.terminating(t, ns, pods[0]) {
		t.Errorf("a dry run evicted Pod %s", pods[0])
	}
	if r := h.get(t, client.ObjectKey{Namespace: ns, Name: "paused"}).Status.Remediation; r != nil {
		t.Errorf("the paused node was remediated: %+v", r)
	}
}

// metricValue reads one series of the manager's registry: the gauge or
// counter called name whose labels include want; 0 when absent.
func metricValue(t *testing.T, h *harness, name string, want map[string]string) float64 {
	t.Helper()
	families, err := h.metrics.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			match := true
			for k, v := range want {
				match = match && got[k] == v
			}
			if !match {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

func gaugeValue(t *testing.T, h *harness, name string, want map[string]string) float64 {
	return metricValue(t, h, name, want)
}

func counterValue(t *testing.T, h *harness, name string, want map[string]string) float64 {
	return metricValue(t, h, name, want)
}

// TestEnvtestRestartHonoursAPodDisruptionBudget: Restart evicts through
// the Eviction API, so a budget that allows no disruption (the real
// disruption controller computes it) holds the Pods; the step says so and
// retries, and evicts once the budget allows it.
func TestEnvtestRestartHonoursAPodDisruptionBudget(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	h.startControllerManager(t)
	ns := h.namespace(t)
	policy := policyName(t)
	h.createPolicy(t, policy, func(s *qnv1alpha1.QuantumNodeHealthPolicySpec) {
		s.Remediation = &qnv1alpha1.RemediationPolicy{Restart: &qnv1alpha1.RestartStep{Timeout: dur(5 * time.Minute)}}
	})
	node := nodeName(t, "w1")
	h.createNode(t, node, "arm64", true, nil)
	h.createQuantumNode(t, ns, "edge", labelled(policy), func(qn *qnv1alpha1.QuantumNode) { qn.Spec.NodeName = node })
	key := client.ObjectKey{Namespace: ns, Name: "edge"}
	serving := h.serve(t, ns, "edge", node, 2)
	for _, name := range serving {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if err := h.client.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		if err := h.client.Status().Update(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	two := intstr.FromInt32(2)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &two, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "edge"}}},
	}
	if err := h.client.Create(context.Background(), pdb); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the disruption controller counts both Pods healthy", func() error {
		if err := h.client.Get(context.Background(), client.ObjectKeyFromObject(pdb), pdb); err != nil {
			return err
		}
		if pdb.Status.CurrentHealthy != 2 || pdb.Status.ObservedGeneration != pdb.Generation {
			return fmt.Errorf("status %+v", pdb.Status)
		}
		return nil
	})
	h.waitForHealth(t, key, qnv1alpha1.HealthHealthy)
	h.setNodeReady(t, node, false)
	note := h.waitForEvent(t, ns, "edge", qnv1alpha1.EventRemediationPending)
	if !strings.Contains(note, "PodDisruptionBudget refused evicting") {
		t.Errorf("RemediationPending says %q", note)
	}
	for _, p := range serving {
		if h.terminating(t, ns, p) {
			t.Fatalf("Pod %s was evicted although its budget allows no disruption", p)
		}
	}
	if err := h.client.Delete(context.Background(), pdb); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Pods are evicted once the budget is gone", func() error {
		for _, p := range serving {
			if !h.terminating(t, ns, p) {
				return fmt.Errorf("Pod %s is not terminating", p)
			}
		}
		return nil
	})
}

// machineCRD is a stand-in for Cluster API's Machine: only its group,
// kind and namespaced scope matter to Rebuild.
func machineCRD() *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "machines.cluster.x-k8s.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "cluster.x-k8s.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "machines", Singular: "machine", Kind: "Machine", ListKind: "MachineList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1beta1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}}}},
		},
	}
}

// TestEnvtestRebuildRecreatesTheServiceAndDeletesTheMachine: the last rung
// deletes the owned Service (the reconciler creates it anew) and, opted in,
// the Cluster API Machine the Node names.
func TestEnvtestRebuildRecreatesTheServiceAndDeletesTheMachine(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	ctx := context.Background()
	if _, err := envtest.InstallCRDs(h.cfg, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{machineCRD()}}); err != nil {
		t.Fatal(err)
	}
	ns := h.namespace(t)
	policy := policyName(t)
	h.createPolicy(t, policy, func(s *qnv1alpha1.QuantumNodeHealthPolicySpec) {
		s.Remediation = &qnv1alpha1.RemediationPolicy{Rebuild: &qnv1alpha1.RebuildStep{Timeout: dur(time.Minute), DeleteMachine: true}}
	})
	machine := &unstructured.Unstructured{}
	machine.SetGroupVersionKind(schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta1", Kind: "Machine"})
	machine.SetNamespace(ns)
	machine.SetName("edge-machine")
	if err := h.client.Create(ctx, machine); err != nil {
		t.Fatal(err)
	}
	node := nodeName(t, "w1")
	h.createNode(t, node, "arm64", true, nil)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	h.update(t, n, func() {
		n.Annotations = map[string]string{"cluster.x-k8s.io/machine": "edge-machine", "cluster.x-k8s.io/cluster-namespace": ns}
	})
	h.createQuantumNode(t, ns, "edge", labelled(policy), func(qn *qnv1alpha1.QuantumNode) { qn.Spec.NodeName = node })
	key := client.ObjectKey{Namespace: ns, Name: "edge"}
	h.waitForHealth(t, key, qnv1alpha1.HealthHealthy)
	svc := &corev1.Service{}
	if err := h.client.Get(ctx, key, svc); err != nil {
		t.Fatal(err)
	}
	oldUID := svc.UID

	h.setNodeReady(t, node, false)
	eventually(t, "Rebuild starts", func() error {
		if r := h.get(t, key).Status.Remediation; r == nil || r.Action != qnv1alpha1.ActionRebuild {
			return fmt.Errorf("remediation %+v", r)
		}
		return nil
	})
	eventually(t, "the Machine is deleted and the Service recreated", func() error {
		err := h.client.Get(ctx, client.ObjectKeyFromObject(machine), machine.DeepCopy())
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("Machine: %v", err)
		}
		if err := h.client.Get(ctx, key, svc); err != nil {
			return err
		}
		if svc.UID == oldUID {
			return fmt.Errorf("the Service is the old one")
		}
		return nil
	})
	if note := h.waitForEvent(t, ns, "edge", qnv1alpha1.EventRemediationStarted); !strings.Contains(strings.Join(h.events(t, ns, "edge")[qnv1alpha1.EventRemediationStarted], "|"), "deleted Machine "+ns+"/edge-machine") {
		t.Errorf("RemediationStarted says %q", note)
	}
}

// TestEnvtestAPolicyChangeAppliesWithoutARestart: thresholds are read from
// the policy as it is now. A node held Degraded by an hour's failedAfter
// fails as soon as the policy's failedAfter is lowered, with no change of
// the Node or the QuantumNode to wake it: the policy's update does.
func TestEnvtestAPolicyChangeAppliesWithoutARestart(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	ns := h.namespace(t)
	policy := policyName(t)
	p := h.createPolicy(t, policy, func(s *qnv1alpha1.QuantumNodeHealthPolicySpec) {
		s.Node.FailedAfter = dur(time.Hour)
	})
	node := nodeName(t, "w1")
	h.createNode(t, node, "arm64", true, nil)
	h.createQuantumNode(t, ns, "edge", labelled(policy), func(qn *qnv1alpha1.QuantumNode) { qn.Spec.NodeName = node })
	key := client.ObjectKey{Namespace: ns, Name: "edge"}
	h.waitForHealth(t, key, qnv1alpha1.HealthHealthy)
	h.setNodeReady(t, node, false)
	h.waitForHealth(t, key, qnv1alpha1.HealthDegraded)
	time.Sleep(2 * time.Second)
	if got := h.get(t, key).Status.Health; got != qnv1alpha1.HealthDegraded {
		t.Fatalf("health %s before the policy changed, want Degraded (failedAfter is an hour)", got)
	}
	h.update(t, p, func() { p.Spec.Node.FailedAfter = dur(2 * time.Second) })
	qn := h.waitForHealth(t, key, qnv1alpha1.HealthFailed)
	if c := meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionHealthy); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Healthy condition %+v, want False", c)
	}
}

// alertFires runs the expression of one of the chart's alerts (as
// test/alerts/testdata/rules.yaml renders it, the release's own job
// selector replaced by matcher, which narrows it to the test's own series
// when other tests share the manager) in a real Prometheus scraping the
// shared manager's metrics, and waits until it returns a sample: the
// alert would fire.
func (h *harness) alertFires(t *testing.T, alert, matcher string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testharness.ModuleRoot(), "test", "alerts", "testdata", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatalf("test/alerts/testdata/rules.yaml: %v", err)
	}
	var expr string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == alert {
				expr = r.Expr
			}
		}
	}
	const release = `namespace="qn-system",job="qn-qn-admission-controller-metrics"`
	if !strings.Contains(expr, release) {
		t.Fatalf("alert %s: expression %q does not select the controller's job as %s", alert, expr, release)
	}
	expr = strings.ReplaceAll(strings.TrimSpace(expr), release, matcher)
	expr = strings.NewReplacer("{,", "{", ",}", "}").Replace(expr)
	metrics := httptest.NewServer(promhttp.HandlerFor(h.metrics, promhttp.HandlerOpts{}))
	t.Cleanup(metrics.Close)
	prom := promtest.StartForTest(t, strings.TrimPrefix(metrics.URL, "http://"))
	prom.WaitFor(t, "count("+expr+")", 1)
}
