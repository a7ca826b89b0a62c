package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/quantumnode/qn-admission/test/harness"
)

// claim is a valid QuantumNode named name claiming Node node.
func claim(name, node string) *unstructured.Unstructured {
	obj := qn(name, "arm64", svc("mqtt", 8883))
	_ = unstructured.SetNestedField(obj.Object, node, "spec", "nodeName")
	return obj
}

// TestPoliciesSeeTheClusterThroughTheInventory runs a qn-webhook with
// --inventory and docs/examples/inventory's policies (one Node backs one
// QuantumNode) against the real API server: it is ready only once the
// inventory synced, refuses a second claim of a Node naming the first,
// warns of a Node that does not exist, and two creates at the same moment
// can both pass (admission is not atomic; qn-controller reports the later
// claim, controller/quantumnode's TestALaterClaimOfAClaimedNodeIsReported).
func TestPoliciesSeeTheClusterThroughTheInventory(t *testing.T) {
	ctx := context.Background()
	ns := "inventory-e2e"
	if _, err := cluster.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"qn-e2e": "inventory"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"worker-1", "worker-2"} {
		if _, err := cluster.Kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	for _, f := range []string{"roles.yaml", "quantumnode.rego", "nodeclaim.rego", "nodeclaim_test.rego"} {
		src, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", "inventory", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := startWebhook(t.TempDir(), "--policy-dir", dir, "--inventory", "--kubeconfig", cluster.Kubeconfig, "--inventory-max-lag", "5s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("qn-webhook logs:\n%s", w.Logs())
		}
		_ = w.Stop()
	})
	if err := harness.Eventually(ctx, 30*time.Second, func() error {
		resp, err := http.Get(w.ProbeURL("/readyz"))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz %d", resp.StatusCode)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	detail, _ := w.Readiness()
	// The suite's cluster holds the QuantumNodes earlier tests stored.
	stored, err := cluster.Dynamic.Resource(harness.QuantumNodes).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(detail, fmt.Sprintf("qn.dev/v1alpha1 QuantumNode: %d (synced; fields spec.nodeName)", len(stored.Items))) || !strings.Contains(detail, "v1 Node: 2 (synced; fields metadata.name)") {
		t.Errorf("/readyz?verbose should say what the inventory holds and keeps:\n%s", detail)
	}
	metrics, _ := w.Metrics()
	for _, m := range []string{"qn_inventory_lag_seconds ", `qn_inventory_objects{kind="v1 Node"} 2`, "qn_inventory_synced 1"} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}

	if err := harness.RegisterWebhooks(ctx, cluster.Kube, harness.WebhookRegistration{
		Name: "qn-inventory", ValidateURL: w.URL("/validate"), MutateURL: w.URL("/mutate"),
		CABundle: w.CABundle, FailurePolicy: admissionregistrationv1.Fail,
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"qn-e2e": "inventory"}},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "qn-inventory", metav1.DeleteOptions{})
		_ = cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "qn-inventory", metav1.DeleteOptions{})
	})
	// The webhook is active once a dry run of a claim of a missing Node
	// comes back with its warning.
	warnings := &harness.Warnings{}
	cfg := rest.CopyConfig(cluster.Config)
	cfg.WarningHandler = warnings
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.Eventually(ctx, 30*time.Second, func() error {
		if _, err := createQN(ctx, dyn, ns, claim("probe", "worker-9"), true); err != nil {
			return err
		}
		if !warnings.Seen(`spec.nodeName "worker-9" names no Node in the cluster (yet)`) {
			return fmt.Errorf("no warning yet: %q", warnings.List())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	if _, err := createQN(ctx, dyn, ns, claim("first", "worker-1"), false); err != nil {
		t.Fatalf("the first claim of worker-1: %v", err)
	}
	// A second claim is refused once the inventory holds the first (its
	// watch event, then at most one publish interval): dry runs until then.
	start := time.Now()
	if err := harness.Eventually(ctx, 10*time.Second, func() error {
		_, err := createQN(ctx, dyn, ns, claim("second", "worker-1"), true)
		if Contains(err, `spec.nodeName "worker-1" is already claimed by QuantumNode inventory-e2e/first`) {
			return nil
		}
		return fmt.Errorf("not refused yet: %v", err)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := createQN(ctx, dyn, ns, claim("second", "worker-1"), false); !Contains(err, "already claimed by QuantumNode inventory-e2e/first") {
		t.Errorf("a second claim of worker-1: %v, want it refused naming the first", err)
	}
	t.Logf("a stored claim was seen by the next create after %s", time.Since(start).Round(time.Millisecond))

	// Two creates at the same moment: each is judged against an inventory
	// without the other, so both may pass. At least one does.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = createQN(ctx, dyn, ns, claim(fmt.Sprintf("racer-%d", i), "worker-2"), false)
		})
	}
	wg.Wait()
	admitted := 0
	for _, err := range errs {
		if err == nil {
			admitted++
		} else if !Contains(err, `spec.nodeName "worker-2" is already claimed`) {
			t.Errorf("a racing claim failed otherwise: %v", err)
		}
	}
	if admitted == 0 {
		t.Errorf("neither of two racing claims of worker-2 was admitted: %v", errs)
	}
	t.Logf("two racing claims of one Node: %d admitted", admitted)
}
