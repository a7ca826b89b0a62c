package vap

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantumnode/qn-admission/policies/vap"
	"github.com/quantumnode/qn-admission/test/harness"
)

// The API server accepts what qnctl vap writes (kubectl apply succeeded in
// TestMain) and, type-checking the policy against the QuantumNode and
// QuantumNodeRoleTable schemas, finds nothing to warn about.
func TestTheAPIServerTypeChecksThePolicyWithoutWarnings(t *testing.T) {
	waitForPolicy(t)
	ctx := context.Background()
	// kube-controller-manager's status controller writes the type check.
	if err := cluster.StartControllerManager(); err != nil {
		t.Fatalf("%v\n%s", err, cluster.ControllerManagerLogs())
	}
	harness.WaitFor(t, 60*time.Second, "the API server to type-check the policy", func() error {
		p, err := cluster.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, vap.DefaultName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.ObservedGeneration != p.Generation || p.Status.TypeChecking == nil {
			return fmt.Errorf("status not yet written for generation %d: %+v", p.Generation, p.Status)
		}
		var warnings []string
		for _, w := range p.Status.TypeChecking.ExpressionWarnings {
			warnings = append(warnings, w.FieldRef+": "+w.Warning)
		}
		if len(warnings) > 0 {
			t.Fatalf("the API server's type check warns:\n%s", strings.Join(warnings, "\n"))
		}
		return nil
	})
}

// Without its parameters the policy is skipped, never refusing: deleting
// the QuantumNodeRoleTable is an administrator's act, like deleting the
// policy, and a policy that refused every write then would refuse the
// namespace controller's deletions too. The webhook still judges.
func TestWithoutItsParametersThePolicyStandsAside(t *testing.T) {
	waitForPolicy(t)
	ctx := context.Background()
	if out, err := cluster.RunKubectl(ctx, "", "delete", "quantumnoderoletable", vap.DefaultName); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		if err := applyPolicy(context.Background(), "--mode", "enforce"); err != nil {
			t.Error(err)
		}
	})
	harness.WaitFor(t, 60*time.Second, "the webhook alone to refuse an unknown role", func() error {
		_, err := nodes(cluster.Dynamic, namespace).Create(ctx, qn("probe", map[string]string{"qn-role": "probe-unknown"}, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if !webhookRefused(err, "names no known role") {
			return fmt.Errorf("not the webhook's refusal: %v", err)
		}
		return nil
	})
	if _, err := nodes(cluster.Dynamic, namespace).Create(ctx, qn("no-params", nil, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("a valid node is refused while the policy has no parameters: %v", err)
	}
}
