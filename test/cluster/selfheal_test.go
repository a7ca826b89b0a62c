package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var healthPolicies = schema.GroupVersionResource{Group: "qn.dev", Version: "v1alpha1", Resource: "quantumnodehealthpolicies"}

// A QuantumNode whose Service has no ready endpoint fails its health
// policy; the Restart step evicts the Pods that serve it through the
// Eviction API: while their PodDisruptionBudget allows no disruption none
// is evicted, and once it allows one they are replaced by their
// Deployment, one at a time.
func TestRestartEvictsServingPodsWithinTheirBudget(t *testing.T) {
	s := cluster(t)
	s.namespace(t)
	ctx := context.Background()
	const name = "healer"
	podLabels := map[string]string{"qn.dev/quantumnode": name}

	// Everything of the test goes when it ends; the policy is
	// cluster-scoped and would select nothing else, but others read the
	// namespace.
	t.Cleanup(func() {
		_ = s.Dynamic.Resource(healthPolicies).Delete(ctx, "cluster-test", metav1.DeleteOptions{})
		_ = s.Kube.AppsV1().Deployments(testNamespace).Delete(ctx, name, metav1.DeleteOptions{})
		_ = s.Kube.PolicyV1().PodDisruptionBudgets(testNamespace).Delete(ctx, name, metav1.DeleteOptions{})
		_ = s.Dynamic.Resource(harness.QuantumNodes).Namespace(testNamespace).Delete(ctx, name, metav1.DeleteOptions{})
	})
	if err := s.pauseDeployment(name, 2, podLabels); err != nil {
		t.Fatal(err)
	}
	// No disruption allowed yet: minAvailable is every replica.
	_, err := s.Kube.PolicyV1().PodDisruptionBudgets(testNamespace).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: podLabels}, MinAvailable: ptr(intstr.FromInt32(2))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original := map[string]bool{}
	harness.WaitFor(t, time.Minute, "two serving Pods ready", func() error {
		pods, err := s.Kube.CoreV1().Pods(testNamespace).List(ctx, metav1.ListOptions{LabelSelector: "qn.dev/quantumnode=" + name})
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready++
					original[string(p.UID)] = true
				}
			}
		}
		if ready != 2 {
			return fmt.Errorf("%d ready", ready)
		}
		return nil
	})

	qn := quantumNode(name, nil, map[string]any{"tier": "cluster-test"}, map[string]any{"name": "web", "port": int64(8080)})
	if _, err := s.Dynamic.Resource(harness.QuantumNodes).Namespace(testNamespace).Create(ctx, qn, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNodeHealthPolicy",
		"metadata": map[string]any{"name": "cluster-test"},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"tier": "cluster-test"}},
			// The node's Service has no selector and nothing fills its
			// endpoints: Failed a few seconds after it is made.
			"endpoints":   map[string]any{"minReady": int64(1), "degradedAfter": "0s", "failedAfter": "3s"},
			"remediation": map[string]any{"restart": map[string]any{"timeout": "5m", "attempts": int64(1)}, "maxUnhealthy": "100%"},
		},
	}}
	if _, err := s.Dynamic.Resource(healthPolicies).Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	remediation := func() (string, string) {
		got, err := s.Dynamic.Resource(harness.QuantumNodes).Namespace(testNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err.Error()
		}
		action, _, _ := unstructured.NestedString(got.Object, "status", "remediation", "action")
		msg, _, _ := unstructured.NestedString(got.Object, "status", "remediation", "message")
		return action, msg
	}
	harness.WaitFor(t, 90*time.Second, "a Restart step starts", func() error {
		if action, msg := remediation(); action != "Restart" {
			return fmt.Errorf("remediation %q: %s", action, msg)
		}
		return nil
	})
	// The budget refuses every eviction: both Pods stay for a while.
	time.Sleep(5 * time.Second)
	pods, err := s.Kube.CoreV1().Pods(testNamespace).List(ctx, metav1.ListOptions{LabelSelector: "qn.dev/quantumnode=" + name})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if !original[string(p.UID)] {
			t.Fatalf("Pod %s replaced while the PodDisruptionBudget allowed no disruption", p.Name)
		}
	}
	// Now one disruption at a time: both are replaced.
	pdb, err := s.Kube.PolicyV1().PodDisruptionBudgets(testNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb.Spec.MinAvailable = ptr(intstr.FromInt32(1))
	if _, err := s.Kube.PolicyV1().PodDisruptionBudgets(testNamespace).Update(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 2*time.Minute, "both original Pods evicted and replaced", func() error {
		pods, err := s.Kube.CoreV1().Pods(testNamespace).List(ctx, metav1.ListOptions{LabelSelector: "qn.dev/quantumnode=" + name})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if original[string(p.UID)] {
				action, msg := remediation()
				return fmt.Errorf("original Pod %s still there (%s); remediation %s: %s", p.Name, p.Status.Phase, action, msg)
			}
		}
		return nil
	})
}
