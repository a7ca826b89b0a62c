package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

var (
	policyDir string
	cluster   *harness.Cluster
	webhook   *harness.Webhook
	binary    string
	suiteDir  string
)

const namespace = "default"

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctx := context.Background()
	var err error
	if suiteDir, err = os.MkdirTemp("", "qn-e2e-suite-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(suiteDir)
	start := time.Now()
	if binary, err = harness.Build(ctx, suiteDir, "./cmd/qn-webhook"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if cluster, err = harness.StartCluster(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	fmt.Printf("e2e: kube-apiserver up in %s (incl. building qn-webhook)\n", time.Since(start).Round(time.Millisecond))
	// The suite's webhook serves a directory copy of the bundled policies, so
	// tests can change them and watch the hot reload.
	policyDir = suiteDir + "/policies"
	if err := harness.WriteBundledPolicies(policyDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if webhook, err = startWebhook(suiteDir+"/certs", "--policy-dir", policyDir, "--policy-poll-interval", "500ms"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := webhook.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop qn-webhook:", err)
		code = 1
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "qn-webhook logs:\n%s\n", webhook.Logs())
	}
	return code
}

var registerOnce sync.Once
var registerErr error

// registered registers the suite's webhooks (once) and waits until the
// apiserver demonstrably calls both: a dry-run create of a QuantumNode
// naming an unknown role is refused with our message, and a valid one comes
// back labelled.
func registered(t *testing.T) {
	t.Helper()
	registerOnce.Do(func() {
		ctx := context.Background()
		registerErr = harness.RegisterWebhooks(ctx, cluster.Kube, harness.WebhookRegistration{
			Name: "qn-admission", ValidateURL: webhook.URL("/validate"), MutateURL: webhook.URL("/mutate"),
			CABundle: webhook.CABundle, FailurePolicy: admissionregistrationv1.Fail,
		})
		if registerErr != nil {
			return
		}
		start := time.Now()
		registerErr = harness.Eventually(ctx, 30*time.Second, func() error {
			probe := qn("probe", "arm64", svc("a", 8080))
			probe.SetAnnotations(map[string]string{"qn-role": "probe-unknown"})
			_, err := createQN(ctx, cluster.Dynamic, namespace, probe, true)
			if !Contains(err, `annotation qn-role="probe-unknown" names no known role`) {
				return fmt.Errorf("validating webhook not active yet: %v", err)
			}
			got, err := createQN(ctx, cluster.Dynamic, namespace, qn("probe", "arm64", svc("a", 8080)), true)
			if err != nil || got.GetLabels()["qn.dev/managed-by"] != "qn-admission" {
				return fmt.Errorf("mutating webhook not active yet: %v", err)
			}
			return nil
		})
		fmt.Printf("e2e: webhook configurations active after %s\n", time.Since(start).Round(time.Millisecond))
	})
	if registerErr != nil {
		t.Fatalf("register webhooks: %v", registerErr)
	}
}

type service struct {
	name string
	port int64
}

func svc(name string, port int64) service { return service{name, port} }

func qn(name, arch string, services ...service) *unstructured.Unstructured {
	list := make([]any, 0, len(services))
	for _, s := range services {
		list = append(list, map[string]any{"name": s.name, "port": s.port})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "qn.dev/v1alpha1",
		"kind":       "QuantumNode",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"hardware": map[string]any{"arch": arch},
			"services": list,
		},
	}}
}

func createQN(ctx context.Context, dyn dynamic.Interface, ns string, obj *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return dyn.Resource(harness.QuantumNodes).Namespace(ns).Create(ctx, obj, opts)
}

func TestAValidQuantumNodeIsStoredWithTheMutationApplied(t *testing.T) {
	registered(t)
	ctx := context.Background()
	created, err := createQN(ctx, cluster.Dynamic, namespace, qn("edge-valid", "arm64", svc("mqtt", 8883), svc("metrics", 9100)), false)
	if err != nil {
		t.Fatalf("a valid QuantumNode should be admitted: %v", err)
	}
	stored, err := cluster.Dynamic.Resource(harness.QuantumNodes).Namespace(namespace).Get(ctx, created.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := stored.GetLabels()["qn.dev/managed-by"]; got != "qn-admission" {
		t.Fatalf("stored object should carry qn.dev/managed-by=qn-admission, labels are %v", stored.GetLabels())
	}
}

func TestInvalidQuantumNodesAreRejectedWithOurMessage(t *testing.T) {
	registered(t)
	cases := map[string]struct {
		obj *unstructured.Unstructured
		// invalid: the CRD's own rule refuses it (422, before any
		// webhook); otherwise the validating webhook does (403).
		invalid bool
		want    []string
	}{
		"two services with one name": {
			obj: qn("edge-dup-name", "amd64", svc("web", 8080), svc("web", 8081)), invalid: true,
			want: []string{`spec.services: Invalid value: service name "web" is declared more than once; service names must be unique`},
		},
		"two services on one port": {
			obj: qn("edge-dup-port", "amd64", svc("web", 8080), svc("api", 8080), svc("ops", 8080)), invalid: true,
			want: []string{`spec.services: Invalid value: services "web" and "ops" declare the same port; each service needs its own port`},
		},
		"batch without priority=low": {
			obj: func() *unstructured.Unstructured {
				o := qn("edge-batch-high", "amd64", svc("web", 8080))
				o.SetAnnotations(map[string]string{"qn-role": "batch"})
				return o
			}(),
			want: []string{`admission webhook "validate.qn-admission.qn.dev" denied the request`,
				`denied by qn-admission (role "batch"): batch QuantumNodes must carry label priority=low (found no priority label)`},
		},
		"an unknown role": {
			obj: func() *unstructured.Unstructured {
				o := qn("edge-unknown-role", "amd64", svc("web", 8080))
				o.SetAnnotations(map[string]string{"qn-role": "turbo"})
				return o
			}(),
			want: []string{`annotation qn-role="turbo" names no known role; known roles: batch, default, realtime`},
		},
	}
	ctx := context.Background()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := createQN(ctx, cluster.Dynamic, namespace, tc.obj, false)
			if tc.invalid && (!apierrors.IsInvalid(err) || !Contains(err, tc.want...)) {
				t.Fatalf("want 422 Invalid containing %q, got %v", tc.want, err)
			}
			if !tc.invalid && (!apierrors.IsForbidden(err) || !Contains(err, tc.want...)) {
				t.Fatalf("want 403 Forbidden containing %q, got %v", tc.want, err)
			}
			if _, err := cluster.Dynamic.Resource(harness.QuantumNodes).Namespace(namespace).Get(ctx, tc.obj.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("a rejected object must not be stored, get returned %v", err)
			}
		})
	}
}

func TestTheSchemaStillRejectsWhatItCanExpress(t *testing.T) {
	registered(t)
	// The apiserver validates the schema between mutating and validating
	// admission: an unknown arch never reaches our validating webhook.
	_, err := createQN(context.Background(), cluster.Dynamic, namespace, qn("edge-riscv", "riscv", svc("web", 8080)), false)
	if !apierrors.IsInvalid(err) || !Contains(err, `spec.hardware.arch: Unsupported value: "riscv"`) {
		t.Fatalf("want the schema's Invalid error, got %v", err)
	}
}

func TestAnUpdateIsJudgedWithItsOldObject(t *testing.T) {
	registered(t)
	ctx := context.Background()
	api := cluster.Dynamic.Resource(harness.QuantumNodes).Namespace(namespace)
	created, err := createQN(ctx, cluster.Dynamic, namespace, qn("edge-update", "arm64", svc("mqtt", 8883)), false)
	if err != nil {
		t.Fatal(err)
	}
	// A change that keeps the architecture is admitted.
	created.Object["spec"].(map[string]any)["services"] = []any{map[string]any{"name": "mqtt", "port": int64(8884)}}
	updated, err := api.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("an update keeping the arch should be admitted: %v", err)
	}
	// Changing the architecture is refused by the CRD's transition rule
	// (oldSelf), before the webhook, which judges the same against oldObject.
	if err := unstructured.SetNestedField(updated.Object, "amd64", "spec", "hardware", "arch"); err != nil {
		t.Fatal(err)
	}
	_, err = api.Update(ctx, updated, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !Contains(err, `spec.hardware.arch: Invalid value: "amd64": spec.hardware.arch is immutable: this QuantumNode was created as "arm64" and cannot become "amd64"`) {
		t.Fatalf("want the immutable-arch refusal, got %v", err)
	}
	// A move into realtime, which realtime's policies refuse (no zone), is
	// judged by the webhook with the stored object as oldObject.
	updated.SetAnnotations(map[string]string{"qn-role": "realtime"})
	if err := unstructured.SetNestedField(updated.Object, "arm64", "spec", "hardware", "arch"); err != nil {
		t.Fatal(err)
	}
	_, err = api.Update(ctx, updated, metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) || !Contains(err, `denied by qn-admission (role "realtime")`) {
		t.Fatalf("want realtime's denial of the move, got %v", err)
	}
}

func TestServerSideDryRunIsJudgedAndStoresNothing(t *testing.T) {
	registered(t)
	ctx := context.Background()
	dry := qn("edge-dry", "arm64", svc("a", 8080))
	dry.SetAnnotations(map[string]string{"qn-role": "batch"})
	_, err := createQN(ctx, cluster.Dynamic, namespace, dry, true)
	if !apierrors.IsForbidden(err) || !Contains(err, `batch QuantumNodes must carry label priority=low`) {
		t.Fatalf("a dry-run of an invalid object should be judged and refused, got %v", err)
	}
	got, err := createQN(ctx, cluster.Dynamic, namespace, qn("edge-dry", "arm64", svc("a", 8080)), true)
	if err != nil || got.GetLabels()["qn.dev/managed-by"] != "qn-admission" {
		t.Fatalf("a dry-run of a valid object should be admitted and mutated, got %v %v", err, got)
	}
	if _, err := cluster.Dynamic.Resource(harness.QuantumNodes).Namespace(namespace).Get(ctx, "edge-dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a dry-run must store nothing, get returned %v", err)
	}
}

func TestWarningsReachTheClient(t *testing.T) {
	registered(t)
	rec := &harness.Warnings{}
	cfg := rest.CopyConfig(cluster.Config)
	cfg.WarningHandler = rec
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := createQN(context.Background(), dyn, namespace, qn("edge-warn", "amd64", svc("https", 443)), false); err != nil {
		t.Fatalf("a privileged port is admitted with a warning, got %v", err)
	}
	want := "spec.services[0] (https) uses privileged port 443: the edge node must allow binding ports below 1024"
	if got := rec.List(); len(got) != 1 || got[0] != want {
		t.Fatalf("want exactly the warning %q, got %q", want, got)
	}
}

func TestKubectlAsAUserWould(t *testing.T) {
	registered(t)
	ctx := context.Background()
	good := `apiVersion: qn.dev/v1alpha1
kind: QuantumNode
metadata:
  name: edge-kubectl
spec:
  hardware:
    arch: arm64
  services:
  - name: mqtt
    port: 8883
`
	out, err := cluster.RunKubectl(ctx, good, "create", "-n", namespace, "-f", "-")
	if err != nil || !strings.Contains(out, "quantumnode.qn.dev/edge-kubectl created") {
		t.Fatalf("kubectl create of a valid QuantumNode: %v\n%s", err, out)
	}
	t.Logf("kubectl create (valid):\n%s", out)
	out, err = cluster.RunKubectl(ctx, "", "get", "quantumnodes", "-n", namespace, "edge-kubectl", "-L", "qn.dev/managed-by")
	if err != nil || !strings.Contains(out, "qn-admission") || !strings.Contains(out, "arm64") {
		t.Fatalf("kubectl get should show the arch column and the managed-by label: %v\n%s", err, out)
	}
	t.Logf("kubectl get:\n%s", out)

	bad := strings.Replace(good, "edge-kubectl", "edge-kubectl-bad", 1) + "  - name: metrics\n    port: 8883\n"
	out, err = cluster.RunKubectl(ctx, bad, "create", "-n", namespace, "-f", "-")
	want := `The QuantumNode "edge-kubectl-bad" is invalid: spec.services: Invalid value: services "mqtt" and "metrics" declare the same port; each service needs its own port`
	if err == nil || strings.TrimSpace(out) != want {
		t.Fatalf("kubectl create of an invalid QuantumNode:\n got %s\nwant %s", out, want)
	}
	t.Logf("kubectl create (rejected):\n%s", out)

	warn := strings.Replace(strings.Replace(good, "edge-kubectl", "edge-kubectl-warn", 1), "8883", "443", 1)
	out, err = cluster.RunKubectl(ctx, warn, "create", "-n", namespace, "-f", "-")
	if err != nil || !strings.Contains(out, "Warning: spec.services[0] (mqtt) uses privileged port 443") {
		t.Fatalf("kubectl should print our warning: %v\n%s", err, out)
	}
	t.Logf("kubectl create (warning):\n%s", out)
}

// TestFailurePolicy runs a second qn-webhook for one namespace, stops it,
// and shows what each failurePolicy does when the webhook is unreachable.
func TestFailurePolicy(t *testing.T) {
	registered(t)
	ctx := context.Background()
	ns := "failure-policy"
	if _, err := cluster.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Labels: map[string]string{"qn-e2e/failure-policy": "true"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	second, err := startWebhook(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := harness.WebhookRegistration{
		Name: "qn-failure", ValidateURL: second.URL("/validate"), MutateURL: second.URL("/mutate"), CABundle: second.CABundle,
		FailurePolicy:     admissionregistrationv1.Fail,
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"qn-e2e/failure-policy": "true"}},
	}
	if err := harness.RegisterWebhooks(ctx, cluster.Kube, reg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, reg.Name, metav1.DeleteOptions{})
		_ = cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, reg.Name, metav1.DeleteOptions{})
	})
	// Wait until the second webhook is called: its denial names it.
	err = harness.Eventually(ctx, 30*time.Second, func() error {
		probe := qn("probe", "arm64", svc("a", 8080))
		probe.SetAnnotations(map[string]string{"qn-role": "probe-unknown"})
		_, err := createQN(ctx, cluster.Dynamic, ns, probe, true)
		if !Contains(err, `admission webhook "validate.qn-failure.qn.dev" denied the request`) {
			return fmt.Errorf("second webhook not active yet: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Stop(); err != nil {
		t.Fatal(err)
	}

	_, err = createQN(ctx, cluster.Dynamic, ns, qn("edge-fail", "arm64", svc("a", 8080)), false)
	if err == nil || !Contains(err, `failed calling webhook "mutate.qn-failure.qn.dev"`, "connection refused") {
		t.Fatalf("with failurePolicy Fail and the webhook down, a create must be refused with a clear error, got %v", err)
	}
	t.Logf("failurePolicy Fail, webhook down: %v", err)

	reg.FailurePolicy = admissionregistrationv1.Ignore
	if err := harness.RegisterWebhooks(ctx, cluster.Kube, reg); err != nil {
		t.Fatal(err)
	}
	err = harness.Eventually(ctx, 30*time.Second, func() error {
		_, err := createQN(ctx, cluster.Dynamic, ns, qn("edge-ignore", "arm64", svc("a", 8080)), false)
		return err
	})
	if err != nil {
		t.Fatalf("with failurePolicy Ignore and the webhook down, a create must be admitted: %v", err)
	}
	// The suite's own webhook still judged it: it carries the label.
	got, err := cluster.Dynamic.Resource(harness.QuantumNodes).Namespace(ns).Get(ctx, "edge-ignore", metav1.GetOptions{})
	if err != nil || got.GetLabels()["qn.dev/managed-by"] != "qn-admission" {
		t.Fatalf("the object should be stored and mutated by the suite's webhook: %v %v", err, got)
	}
}

// startWebhook runs the suite's qn-webhook binary with self-signed TLS in
// certDir, plus extra flags, until it serves.
func startWebhook(certDir string, extra ...string) (*harness.Webhook, error) {
	return harness.StartWebhook(binary, certDir, harness.WebhookOptions{Args: extra})
}
