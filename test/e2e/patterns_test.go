package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

const batchPatternDenial = `denied by qn-admission (role "batch"): batch QuantumNodes must carry label priority=low (pattern batch-priority-low failed at /metadata/labels/priority/: resource value 'high' does not match 'low')`

// TestBatchRoleJudgedByAPatternPolicy edits the served policy directory so
// the batch role runs the bundled pattern policy instead of its Rego rule:
// a broken pattern file first keeps the last good set serving (and
// /readyz?verbose names its file and line), then the switch applies and a
// QuantumNode is refused by the pattern through the real apiserver, with
// the path Kyverno's matcher reports.
func TestBatchRoleJudgedByAPatternPolicy(t *testing.T) {
	registered(t)
	ctx := context.Background()
	rolesFile := filepath.Join(policyDir, "roles.yaml")
	brokenFile := filepath.Join(policyDir, "broken.pattern.yaml")
	original, err := os.ReadFile(rolesFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.Remove(brokenFile)
		_ = os.WriteFile(rolesFile, original, 0o644)
		_ = harness.Eventually(ctx, 20*time.Second, func() error { return batchDeniedWith(ctx, "batch-pattern-cleanup", "(found priority=high)") })
	})

	// A pattern file with a mutate anchor: refused, the last good set serves.
	broken := "kind: PatternPolicy\nvalidate:\n  message: m\n  pattern:\n    metadata:\n      labels:\n        +(priority): low\n"
	if err := os.WriteFile(brokenFile, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	waitForReload(t, func(ready string) bool {
		return strings.Contains(ready, "broken.pattern.yaml:7: validate.pattern.metadata.labels.+(priority): +() (add if not present) is a mutate anchor")
	})
	if err := batchDeniedWith(ctx, "batch-pattern-broken", "(found priority=high)"); err != nil {
		t.Fatalf("the last good set (Rego) keeps judging batch: %v", err)
	}
	if err := os.Remove(brokenFile); err != nil {
		t.Fatal(err)
	}

	// Switch batch from qn.roles.batch to the pattern policy.
	switched := strings.Replace(string(original),
		"    packages: [qn.quantumnode, qn.roles.batch, qn.window, qn.mutate.managedby]\n",
		"    packages: [qn.quantumnode, qn.window, qn.mutate.managedby]\n    patterns: [batch-priority-low]\n", 1)
	if switched == string(original) {
		t.Fatal("could not find the batch packages line to edit")
	}
	if err := os.WriteFile(rolesFile, []byte(switched), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := harness.Eventually(ctx, 20*time.Second, func() error {
		return batchDeniedWith(ctx, "batch-pattern-dry", batchPatternDenial)
	}); err != nil {
		t.Fatal(err)
	}

	// kubectl shows the user the pattern, the path and what was found.
	manifest := `apiVersion: qn.dev/v1alpha1
kind: QuantumNode
metadata:
  name: batch-pattern-high
  annotations: {qn-role: batch}
  labels: {priority: high}
spec:
  hardware: {arch: amd64}
  services: [{name: job, port: 9000}]
`
	out, err := cluster.RunKubectl(ctx, manifest, "create", "-n", namespace, "-f", "-")
	want := `Error from server (Forbidden): error when creating "STDIN": admission webhook "validate.qn-admission.qn.dev" denied the request: ` + batchPatternDenial
	if err == nil || strings.TrimSpace(out) != want {
		t.Fatalf("kubectl create of a high-priority batch node:\n got %s\nwant %s", out, want)
	}
	// The decision log records the pattern's denial like a Rego rule's.
	if err := harness.Eventually(ctx, 5*time.Second, func() error {
		for _, line := range strings.Split(webhook.Logs(), "\n") {
			if strings.Contains(line, `"name":"batch-pattern-high"`) && strings.Contains(line, `"decision":"denied"`) &&
				strings.Contains(line, `"reasons":["batch QuantumNodes must carry label priority=low (pattern batch-priority-low failed at /metadata/labels/priority/`) {
				return nil
			}
		}
		return fmt.Errorf("no decision line for batch-pattern-high")
	}); err != nil {
		t.Fatal(err)
	}

	o := qn("batch-pattern-low", "amd64", svc("job", 9000))
	o.SetAnnotations(map[string]string{"qn-role": "batch"})
	o.SetLabels(map[string]string{"priority": "low"})
	if _, err := createQN(ctx, cluster.Dynamic, namespace, o, false); err != nil {
		t.Fatalf("a low-priority batch node is admitted by the pattern: %v", err)
	}
}

// batchDeniedWith dry-runs a high-priority batch QuantumNode and wants a
// 403 whose message contains want.
func batchDeniedWith(ctx context.Context, name, want string) error {
	o := qn(name, "amd64", svc("job", 9000))
	o.SetAnnotations(map[string]string{"qn-role": "batch"})
	o.SetLabels(map[string]string{"priority": "high"})
	_, err := createQN(ctx, cluster.Dynamic, namespace, o, true)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		return fmt.Errorf("want a 403 containing %q, got %v", want, err)
	}
	return nil
}
