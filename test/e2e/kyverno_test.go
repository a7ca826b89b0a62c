package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantumnode/qn-admission/test/harness"
)

// batchClusterPolicy is a Kyverno ClusterPolicy as a user copies it from a
// Kyverno cluster: a pattern rule and a foreach/deny rule.
const batchClusterPolicy = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: batch-services
  annotations:
    policies.kyverno.io/title: Batch services
spec:
  validationFailureAction: Enforce
  background: true
  rules:
  - name: priority-label
    match:
      any:
      - resources:
          kinds: [qn.dev/v1alpha1/QuantumNode]
    validate:
      message: "batch QuantumNode {{ request.object.metadata.name }} must carry priority=low"
      pattern:
        metadata:
          labels:
            priority: low
  - name: no-ssh
    match:
      any:
      - resources:
          kinds: [QuantumNode]
          operations: [CREATE, UPDATE]
    validate:
      message: "service {{ element.name }} uses port 22"
      foreach:
      - list: request.object.spec.services
        deny:
          conditions:
            any:
            - key: "{{ element.port }}"
              operator: Equals
              value: 22
`

// TestBatchRoleJudgedByAKyvernoClusterPolicy: a ClusterPolicy dropped
// into the served directory unchanged and listed under the batch role's
// policies refuses through the real apiserver on CREATE (its pattern rule
// and its foreach/deny rule, with Kyverno's messages) and on the UPDATE
// that breaks it; a ClusterPolicy that needs a cluster (apiCall) is
// refused at load with its file and line while the last good set serves.
func TestBatchRoleJudgedByAKyvernoClusterPolicy(t *testing.T) {
	registered(t)
	ctx := context.Background()
	rolesFile := filepath.Join(policyDir, "roles.yaml")
	policyFile := filepath.Join(policyDir, "kyverno-batch.yaml")
	original, err := os.ReadFile(rolesFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.WriteFile(rolesFile, original, 0o644)
		_ = os.Remove(policyFile)
		_ = harness.Eventually(ctx, 20*time.Second, func() error { return batchDeniedWith(ctx, "batch-kyverno-cleanup", "(found priority=high)") })
	})

	// A default-role node stored before the policy applies, to update
	// later (batch may only CREATE; default lists the policy too).
	old := qn("batch-kyverno-old", "amd64", svc("job", 9000))
	old.SetLabels(map[string]string{"priority": "low"})
	if _, err := createQN(ctx, cluster.Dynamic, namespace, old, false); err != nil {
		t.Fatal(err)
	}

	// First a policy that needs the cluster: refused at load, naming it.
	needsCluster := strings.Replace(batchClusterPolicy, "  - name: no-ssh\n", "  - name: no-ssh\n    context:\n    - name: nodes\n      apiCall: {urlPath: /api/v1/nodes}\n", 1)
	if err := os.WriteFile(policyFile, []byte(needsCluster), 0o644); err != nil {
		t.Fatal(err)
	}
	waitForReload(t, func(ready string) bool {
		return strings.Contains(ready, `kyverno-batch.yaml:22: spec.rules[1].context[0].apiCall: rule "no-ssh": context entry "nodes" reads the API server (apiCall)`)
	})

	if err := os.WriteFile(policyFile, []byte(batchClusterPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	// default's packages line first: batch's becomes the same line.
	switched := strings.Replace(string(original), "    packages: [qn.quantumnode, qn.window, qn.mutate.managedby]\n",
		"    packages: [qn.quantumnode, qn.window, qn.mutate.managedby]\n    policies: [batch-services]\n", 1)
	switched = strings.Replace(switched,
		"    packages: [qn.quantumnode, qn.roles.batch, qn.window, qn.mutate.managedby]\n",
		"    packages: [qn.quantumnode, qn.window, qn.mutate.managedby]\n    policies: [batch-services]\n", 1)
	if strings.Count(switched, "policies: [batch-services]") != 2 {
		t.Fatal("could not find the batch and default packages lines to edit")
	}
	if err := os.WriteFile(rolesFile, []byte(switched), 0o644); err != nil {
		t.Fatal(err)
	}
	const denial = `validation error: batch QuantumNode batch-kyverno-dry must carry priority=low. rule priority-label failed at path /metadata/labels/priority/ (ClusterPolicy batch-services rule priority-label)`
	if err := harness.Eventually(ctx, 20*time.Second, func() error { return batchDeniedWith(ctx, "batch-kyverno-dry", denial) }); err != nil {
		t.Fatal(err)
	}

	// CREATE with an SSH service: the foreach rule's message, via kubectl.
	manifest := `apiVersion: qn.dev/v1alpha1
kind: QuantumNode
metadata:
  name: batch-kyverno-ssh
  annotations: {qn-role: batch}
  labels: {priority: low}
spec:
  hardware: {arch: amd64}
  services: [{name: shell, port: 22}]
`
	out, err := cluster.RunKubectl(ctx, manifest, "create", "-n", namespace, "-f", "-")
	if err == nil || !strings.Contains(out, `validation failure: service shell uses port 22 (ClusterPolicy batch-services rule no-ssh)`) {
		t.Fatalf("kubectl create of a batch node with SSH: %v\n%s", err, out)
	}

	// UPDATE that breaks the rule: refused (the other verb), while an
	// update that keeps it is admitted.
	got, err := cluster.Dynamic.Resource(harness.QuantumNodes).Namespace(namespace).Get(ctx, "batch-kyverno-old", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	labels := got.GetLabels()
	labels["team"] = "ops"
	got.SetLabels(labels)
	if got, err = cluster.Dynamic.Resource(harness.QuantumNodes).Namespace(namespace).Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("an update that keeps priority=low: %v", err)
	}
	labels["priority"] = "high"
	got.SetLabels(labels)
	_, err = cluster.Dynamic.Resource(harness.QuantumNodes).Namespace(namespace).Update(ctx, got, metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "rule priority-label failed at path /metadata/labels/priority/") {
		t.Fatalf("an update that sets priority=high: %v", err)
	}
}
