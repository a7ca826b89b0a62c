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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

func realtimeQN(name string) *unstructured.Unstructured {
	o := qn(name, "arm64", svc("mqtt", 8883))
	o.SetAnnotations(map[string]string{"qn-role": "realtime", "qn.dev/latency-budget-ms": "20"})
	o.SetLabels(map[string]string{"topology.kubernetes.io/zone": "cn-shanghai"})
	return o
}

func TestBatchWithoutLowPriorityIsRefused(t *testing.T) {
	registered(t)
	o := qn("batch-high", "amd64", svc("job", 9000))
	o.SetAnnotations(map[string]string{"qn-role": "batch"})
	o.SetLabels(map[string]string{"priority": "high"})
	_, err := createQN(context.Background(), cluster.Dynamic, namespace, o, false)
	if !apierrors.IsForbidden(err) || !Contains(err, `denied by qn-admission (role "batch"): batch QuantumNodes must carry label priority=low (found priority=high)`) {
		t.Fatalf("want the batch denial, got %v", err)
	}
	o.SetLabels(map[string]string{"priority": "low"})
	if _, err := createQN(context.Background(), cluster.Dynamic, namespace, o, false); err != nil {
		t.Fatalf("a low-priority batch create is admitted: %v", err)
	}
}

// TestHotReloadSwitchesARoleToWarn edits roles.yaml in the served policy
// directory: a broken edit keeps the last good set (and says so in
// /readyz?verbose); switching batch to warn admits with a warning.
func TestHotReloadSwitchesARoleToWarn(t *testing.T) {
	registered(t)
	ctx := context.Background()
	rolesFile := filepath.Join(policyDir, "roles.yaml")
	original, err := os.ReadFile(rolesFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.WriteFile(rolesFile, original, 0o644)
		_ = harness.Eventually(ctx, 20*time.Second, func() error { return batchDenied(ctx, cluster.Dynamic, "batch-cleanup") })
	})

	// A broken edit: the last good set keeps serving.
	broken := strings.Replace(string(original), "window: {limit: 30, period: 60s, key: user}", "window: {limit: 30, period: sixty}", 1)
	if err := os.WriteFile(rolesFile, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	ready := waitForReload(t, func(ready string) bool { return strings.Contains(ready, "failed and was not applied") })
	if !strings.Contains(ready, `roles.batch.window.period: "sixty" is not a positive duration`) || !strings.Contains(ready, "roles.yaml:") || !strings.Contains(ready, "\nok\n") {
		t.Fatalf("/readyz?verbose should stay ready and name the file, line and field:\n%s", ready)
	}
	t.Logf("/readyz?verbose after a broken edit:\n%s", ready)
	if err := batchDenied(ctx, cluster.Dynamic, "batch-during-broken"); err != nil {
		t.Fatalf("the last good set keeps enforcing: %v", err)
	}

	// Switch batch to warn.
	warn := strings.Replace(string(original), "    window: {limit: 30, period: 60s, key: user}\n", "    window: {limit: 30, period: 60s, key: user}\n    enforcement: warn\n", 1)
	if warn == string(original) {
		t.Fatal("could not find the batch window line to edit")
	}
	if err := os.WriteFile(rolesFile, []byte(warn), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &harness.Warnings{}
	cfg := rest.CopyConfig(cluster.Config)
	cfg.WarningHandler = rec
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	err = harness.Eventually(ctx, 20*time.Second, func() error {
		i++
		o := qn(fmt.Sprintf("batch-warn-%d", i), "amd64", svc("job", 9000))
		o.SetAnnotations(map[string]string{"qn-role": "batch"})
		_, err := createQN(ctx, dyn, namespace, o, false)
		return err
	})
	if err != nil {
		t.Fatalf("in warn mode a batch create without priority=low is admitted: %v", err)
	}
	want := `not enforced (role "batch" is in warn mode): denied by qn-admission (role "batch"): batch QuantumNodes must carry label priority=low (found no priority label)`
	if got := rec.List(); len(got) == 0 || got[len(got)-1] != want {
		t.Fatalf("want the warning %q, got %q", want, got)
	}
}

func batchDenied(ctx context.Context, dyn dynamic.Interface, name string) error {
	o := qn(name, "amd64", svc("job", 9000))
	o.SetAnnotations(map[string]string{"qn-role": "batch"})
	_, err := createQN(ctx, dyn, namespace, o, true)
	if !apierrors.IsForbidden(err) {
		return fmt.Errorf("batch without priority=low should be refused, got %v", err)
	}
	return nil
}
