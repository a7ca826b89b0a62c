package vap

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/quantumnode/qn-admission/test/harness"
)

// In audit mode (the chart's admissionPolicy.mode: audit, qnctl vap --mode
// audit) the API server refuses nothing of the role table: with qn-webhook
// stopped, a write the policy would refuse is admitted, and the client is
// warned with the policy's message, as a team trying it first sees it.
func TestInAuditModeThePolicyOnlyWarns(t *testing.T) {
	waitForPolicy(t)
	ctx := context.Background()
	if err := applyPolicy(ctx, "--mode", "audit"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := applyPolicy(context.Background(), "--mode", "enforce"); err != nil {
			t.Error(err)
		}
		waitForPolicy(t)
	})
	stopWebhook(t)

	rec := &harness.Warnings{}
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "bob", Groups: []string{"qn:developers"}}
	cfg.WarningHandler = rec
	bob, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := `denied by qn-admission (role "batch"): label priority must be "low" (found "high")`
	harness.WaitFor(t, 60*time.Second, "the policy to warn instead of refusing", func() error {
		o := batch("audit-high")
		o.SetLabels(map[string]string{"priority": "high"})
		_, err := nodes(bob, namespace).Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return fmt.Errorf("refused: %v", err)
		}
		if !rec.Seen(want) {
			return fmt.Errorf("admitted without the warning %q (warnings %q)", want, rec.List())
		}
		return nil
	})
	t.Logf("admitted with the warnings %q", rec.List())
}
