// Package vap proves, through a real kube-apiserver (its own admission
// plugins, no fakes), that the role table's ValidatingAdmissionPolicy that
// `qnctl vap` compiles keeps qn-admission's core promises while the webhook
// is not called, agrees with the webhook while it is, and what the double
// enforcement costs.
package vap

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/quantumnode/qn-admission/policies/vap"
	"github.com/quantumnode/qn-admission/test/harness"
)

var (
	cluster *harness.Cluster
	// qnWebhook and qnctl are the built binaries.
	qnWebhook, qnctl string
	suiteDir         string
	// webhook is the running qn-webhook, nil while a test holds it down.
	webhook   *harness.Webhook
	webhookMu sync.Mutex
)

// The namespace the suite's nodes live in; registration is the webhook
// configurations' name, as the chart would install them.
const (
	namespace    = "edge"
	registration = "qn-admission"
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	// envtest logs through controller-runtime's logger, which prints a
	// stack trace when nobody set it within 30 s (the builds take longer).
	ctrllog.SetLogger(logr.Discard())
	ctx := context.Background()
	var err error
	if suiteDir, err = os.MkdirTemp("", "qn-vap-suite-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(suiteDir)
	start := time.Now()
	for _, b := range []struct {
		bin *string
		pkg string
	}{{&qnWebhook, "./cmd/qn-webhook"}, {&qnctl, "./cmd/qnctl"}} {
		if *b.bin, err = harness.Build(ctx, suiteDir, b.pkg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if cluster, err = harness.StartCluster(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	fmt.Printf("vap: kube-apiserver up in %s (incl. building qn-webhook and qnctl)\n", time.Since(start).Round(time.Millisecond))
	if err := setUp(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	webhookMu.Lock()
	defer webhookMu.Unlock()
	if webhook != nil {
		if code != 0 {
			fmt.Fprintf(os.Stderr, "qn-webhook logs:\n%s\n", webhook.Logs())
		}
		if err := webhook.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop qn-webhook:", err)
			code = 1
		}
	}
	return code
}

// setUp makes the cluster a qn-admission user would run: the namespace,
// RBAC that lets every authenticated user write QuantumNodes (so every
// refusal the tests meet is qn-admission's), qn-webhook registered with
// failurePolicy Ignore, and the compiled policy applied as a user would:
// qnctl vap | kubectl apply -f -.
func setUp(ctx context.Context) error {
	if _, err := cluster.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cluster.Kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "qn-vap-editor"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"qn.dev"}, Resources: []string{"quantumnodes"}, Verbs: []string{"*"}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cluster.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "qn-vap-editor"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "qn-vap-editor"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:authenticated"}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := startWebhook(ctx); err != nil {
		return err
	}
	return applyPolicy(ctx, "--mode", "enforce")
}

// startWebhook starts qn-webhook with the bundled policies and registers
// it with failurePolicy Ignore: a write it does not answer is admitted by
// the webhook configurations, so only the API server's own rules hold then.
func startWebhook(ctx context.Context) error {
	webhookMu.Lock()
	defer webhookMu.Unlock()
	w, err := harness.StartWebhook(qnWebhook, filepath.Join(suiteDir, "certs"), harness.WebhookOptions{})
	if err != nil {
		return err
	}
	webhook = w
	return harness.RegisterWebhooks(ctx, cluster.Kube, harness.WebhookRegistration{
		Name: registration, ValidateURL: w.URL("/validate"), MutateURL: w.URL("/mutate"), CABundle: w.CABundle,
		FailurePolicy: admissionregistrationv1.Ignore,
	})
}

// stopWebhook stops qn-webhook for the rest of the test, and starts a new
// one when it ends.
func stopWebhook(t *testing.T) {
	t.Helper()
	webhookMu.Lock()
	w := webhook
	webhook = nil
	webhookMu.Unlock()
	if w == nil {
		t.Fatal("qn-webhook is already down")
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := startWebhook(context.Background()); err != nil {
			t.Errorf("restart qn-webhook: %v", err)
		}
	})
}

// applyPolicy runs qnctl vap with args and applies its output with the
// built kubectl, as the README says: qnctl vap | kubectl apply -f -.
func applyPolicy(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, qnctl, append([]string{"vap"}, args...)...).Output()
	if err != nil {
		return fmt.Errorf("qnctl vap %s: %w", strings.Join(args, " "), err)
	}
	applied, err := cluster.RunKubectl(ctx, string(out), "apply", "-f", "-")
	if err != nil {
		return fmt.Errorf("kubectl apply of qnctl vap's output: %v\n%s", err, applied)
	}
	return nil
}

// waitForPolicy waits until the API server's policy answers: enforced, a
// create under an unknown role is refused with its message, since a
// binding takes a moment to become active.
func waitForPolicy(t testing.TB) {
	t.Helper()
	harness.WaitFor(t, 60*time.Second, "the ValidatingAdmissionPolicy to refuse an unknown role", func() error {
		o := qn("probe", map[string]string{"qn-role": "probe-unknown"}, nil)
		_, err := cluster.Dynamic.Resource(harness.QuantumNodes).Namespace(namespace).Create(context.Background(), o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if !policyRefused(err, `annotation qn-role="probe-unknown" names no known role`) {
			return fmt.Errorf("not refused by the policy yet: %v", err)
		}
		return nil
	})
}

// policyRefused says err is the compiled policy's refusal containing want.
func policyRefused(err error, want string) bool {
	return apierrors.IsForbidden(err) &&
		strings.Contains(err.Error(), fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request", vap.DefaultName, vap.DefaultName)) &&
		strings.Contains(err.Error(), want)
}

// webhookRefused says err is qn-webhook's refusal containing want.
func webhookRefused(err error, want string) bool {
	return err != nil && strings.Contains(err.Error(), `admission webhook "validate.`+registration+`.qn.dev" denied the request`) && strings.Contains(err.Error(), want)
}

// qn is a valid QuantumNode.
func qn(name string, annotations, labels map[string]string) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"hardware": map[string]any{"arch": "arm64"},
			"services": []any{map[string]any{"name": "mqtt", "port": int64(8883)}},
		},
	}}
	o.SetAnnotations(annotations)
	o.SetLabels(labels)
	return o
}

func realtime(name string) *unstructured.Unstructured {
	return qn(name, map[string]string{"qn-role": "realtime", "qn.dev/latency-budget-ms": "20"}, map[string]string{"topology.kubernetes.io/zone": "cn-shanghai"})
}

func batch(name string) *unstructured.Unstructured {
	return qn(name, map[string]string{"qn-role": "batch"}, map[string]string{"priority": "low"})
}

// as is a client acting as user in groups (the API server adds
// system:authenticated).
func as(t testing.TB, user string, groups ...string) dynamic.Interface {
	t.Helper()
	dyn, err := cluster.As(user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

func nodes(dyn dynamic.Interface, ns string) dynamic.ResourceInterface {
	return dyn.Resource(harness.QuantumNodes).Namespace(ns)
}
