package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quantumnode/qn-admission/test/harness"
)

// workloadsRole routes Pods and Pod controllers that name it (qn-role:
// workloads) to Kyverno's disallow-latest-tag ClusterPolicy.
const workloadsRole = `
  workloads:
    operations: [CREATE, UPDATE, DELETE]
    policies: [disallow-latest-tag]
`

// latestTagDenial is what Kyverno says of a container with a latest tag,
// and which policy and rule said it.
const (
	latestTagMessage = "Using a mutable image tag e.g. 'latest' is not allowed."
	latestTagRule    = "(ClusterPolicy disallow-latest-tag rule validate-image-tag)"
)

// TestPodsAreJudgedWhenRegisteredAsAdditionalResources: with the
// validating webhook registered for Pods and apps/v1 Deployments as the
// chart's webhook.additionalResources register it (failurePolicy Ignore by
// default), Kyverno's disallow-latest-tag ClusterPolicy, routed by
// roles.yaml to the workloads role, refuses a Pod with nginx:latest
// through the real apiserver (kubectl create and client-go, with Kyverno's
// message) and a Deployment through its autogen rule, admits nginx:1.27,
// and does not judge kube-system even when the registration's selector
// matches it. Then qn-webhook is stopped: Pods go through (Ignore), the
// fail-safe promise, while QuantumNodes stay refused (their entry's Fail).
func TestPodsAreJudgedWhenRegisteredAsAdditionalResources(t *testing.T) {
	ctx := context.Background()
	const ns, label = "pods-judged", "qn-e2e/pods"

	// A policy directory of its own: the bundled set, Kyverno's library
	// policy as it is, and a role for workloads.
	dir := filepath.Join(t.TempDir(), "policies")
	if err := harness.WriteBundledPolicies(dir); err != nil {
		t.Fatal(err)
	}
	policy, err := os.ReadFile(filepath.Join(harness.ModuleRoot(), "cmd/qnctl/app/testdata/kyverno/disallow-latest-tag/disallow-latest-tag.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "disallow-latest-tag.yaml"), policy, 0o644); err != nil {
		t.Fatal(err)
	}
	roles, err := os.ReadFile(filepath.Join(dir, "roles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	withWorkloads := strings.Replace(string(roles), "\nroles:\n", "\nroles:"+workloadsRole+"\n", 1)
	// Nothing exempts kube-system in the role table here: if the API
	// server sent its Pods, they would be judged and refused.
	withWorkloads = strings.Replace(withWorkloads, "  namespaces: [kube-system]\n", "  namespaces: []\n", 1)
	if strings.Count(withWorkloads, "workloads:") != 1 || strings.Contains(withWorkloads, "[kube-system]") {
		t.Fatalf("could not add the workloads role and drop the kube-system exemption:\n%s", withWorkloads)
	}
	if err := os.WriteFile(filepath.Join(dir, "roles.yaml"), []byte(withWorkloads), 0o644); err != nil {
		t.Fatal(err)
	}

	rules := []harness.AdditionalRule{
		{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
		{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
	}
	w, err := startWebhook(filepath.Join(t.TempDir(), "certs"), append([]string{"--policy-dir", dir}, harness.AdditionalResourceArgs(rules)...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	if ready, _ := w.Readiness(); !strings.Contains(ready, "for CREATE and UPDATE of v1 pods; CREATE and UPDATE of apps/v1 deployments by its validating webhook only") {
		t.Errorf("/readyz?verbose should say what qn-webhook is registered for:\n%s", ready)
	}

	if _, err := cluster.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Labels: map[string]string{label: "true"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kube-system carries the label too: only the exclusion every
	// registration holds keeps it out.
	labelKubeSystem := func(value any) {
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%s}}}`, label, value)
		if _, err := cluster.Kube.CoreV1().Namespaces().Patch(ctx, "kube-system", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	labelKubeSystem(`"true"`)
	reg := harness.WebhookRegistration{
		Name: "qn-pods", ValidateURL: w.URL("/validate"), MutateURL: w.URL("/mutate"), CABundle: w.CABundle,
		FailurePolicy:       admissionregistrationv1.Fail,
		NamespaceSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{label: "true"}},
		AdditionalResources: rules,
	}
	if err := harness.RegisterWebhooks(ctx, cluster.Kube, reg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, reg.Name, metav1.DeleteOptions{})
		_ = cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, reg.Name, metav1.DeleteOptions{})
		labelKubeSystem("null")
	})

	pod := func(name, image string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"qn-role": "workloads"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image}}},
		}
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	if err := harness.Eventually(ctx, 30*time.Second, func() error {
		_, err := cluster.Kube.CoreV1().Pods(ns).Create(ctx, pod("probe", "nginx:latest"), dryRun)
		if !Contains(err, latestTagMessage) {
			return fmt.Errorf("the webhook does not judge Pods yet: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// kubectl create: refused, with Kyverno's message and the rule.
	manifest := `apiVersion: v1
kind: Pod
metadata:
  name: web-latest
  annotations: {qn-role: workloads}
spec:
  containers: [{name: web, image: "nginx:latest"}]
`
	out, err := cluster.RunKubectl(ctx, manifest, "create", "-n", ns, "-f", "-")
	if err == nil || !strings.Contains(out, `admission webhook "validate-additional.qn-pods.qn.dev" denied the request`) ||
		!strings.Contains(out, latestTagMessage) || !strings.Contains(out, latestTagRule) {
		t.Fatalf("kubectl create of a Pod with nginx:latest: %v\n%s", err, out)
	}
	t.Logf("kubectl create (refused):\n%s", out)

	// client-go: the same refusal, a Forbidden error; a pinned tag is
	// admitted and stored.
	_, err = cluster.Kube.CoreV1().Pods(ns).Create(ctx, pod("web-latest", "nginx:latest"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !Contains(err, latestTagMessage, latestTagRule) {
		t.Fatalf("client-go create of a Pod with nginx:latest: %v", err)
	}
	if _, err := cluster.Kube.CoreV1().Pods(ns).Create(ctx, pod("web-pinned", "nginx:1.27"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a Pod with nginx:1.27: %v", err)
	}

	// A Deployment: the rule Kyverno generates for Pod controllers.
	replicas := int32(1)
	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{"qn-role": "workloads"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:latest"}}},
			},
		},
	}
	_, err = cluster.Kube.AppsV1().Deployments(ns).Create(ctx, deployment, dryRun)
	if !apierrors.IsForbidden(err) || !Contains(err, latestTagMessage, "(ClusterPolicy disallow-latest-tag rule autogen-validate-image-tag)") {
		t.Fatalf("a Deployment with nginx:latest: %v", err)
	}
	deployment.Spec.Template.Spec.Containers[0].Image = "nginx:1.27"
	if _, err := cluster.Kube.AppsV1().Deployments(ns).Create(ctx, deployment, dryRun); err != nil {
		t.Fatalf("a Deployment with nginx:1.27: %v", err)
	}

	// kube-system is never judged, whatever its labels.
	if _, err := cluster.Kube.CoreV1().Pods("kube-system").Create(ctx, pod("web-latest", "nginx:latest"), dryRun); err != nil {
		t.Fatalf("a Pod in kube-system was judged: %v", err)
	}

	// qn-webhook down: Pods go through (failurePolicy Ignore, the
	// default of additional resources), QuantumNodes do not (Fail).
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Kube.CoreV1().Pods(ns).Create(ctx, pod("web-latest-unjudged", "nginx:latest"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("with qn-webhook down, a Pod must be admitted (failurePolicy Ignore): %v", err)
	}
	_, err = createQN(ctx, cluster.Dynamic, ns, qn("edge-down", "arm64", svc("a", 8080)), true)
	if err == nil || !Contains(err, `failed calling webhook "mutate.qn-pods.qn.dev"`) {
		t.Fatalf("with qn-webhook down, a QuantumNode must still be refused (failurePolicy Fail): %v", err)
	}
}
