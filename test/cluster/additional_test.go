package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
)

// Kyverno's answer to a container with a latest tag, and the entry the
// chart registers webhook.additionalResources under (failurePolicy Ignore).
const (
	latestTagMessage = "Using a mutable image tag e.g. 'latest' is not allowed."
	latestTagRule    = "(ClusterPolicy disallow-latest-tag rule validate-image-tag)"
	additionalEntry  = "validate-additional.qn.dev"
)

// webhook.additionalResources on the installed release: the validating
// webhook registered for core v1 Pods (failurePolicy Ignore by default) and
// a policy ConfigMap that adds Kyverno's disallow-latest-tag ClusterPolicy
// and a workloads role for it. Through the API server a Pod with
// nginx:latest is refused with Kyverno's message, a pinned tag is admitted,
// and a Pod in the release namespace is not judged. The release then gets
// its previous values back and the extra entry is gone.
func TestPodsJudgedWhenRegisteredAsAdditionalResources(t *testing.T) {
	s := cluster(t)
	s.namespace(t)
	ctx := context.Background()
	start := time.Now()

	cfg, err := s.helmConfig()
	if err != nil {
		t.Fatal(err)
	}
	previous, err := action.NewGetValues(cfg).Run(releaseName)
	if err != nil {
		t.Fatal(err)
	}
	entriesBefore := s.validatingEntries(t)
	if slices.Contains(entriesBefore, additionalEntry) {
		t.Fatalf("%s registered before the test: %v", additionalEntry, entriesBefore)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			s.restoreValues(t, previous)
		}
	}
	t.Cleanup(restore)

	chartPolicies := filepath.Join(chartrender.Dir(), "files", "policies")
	roles, err := os.ReadFile(filepath.Join(chartPolicies, "roles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	withWorkloads := strings.Replace(string(roles), "\nroles:\n", "\nroles:\n  workloads:\n    operations: [CREATE, UPDATE, DELETE]\n    policies: [disallow-latest-tag]\n", 1)
	if strings.Count(withWorkloads, "workloads:") != 1 {
		t.Fatalf("could not add the workloads role to the chart's roles.yaml")
	}
	policy, err := os.ReadFile(filepath.Join(harness.ModuleRoot(), "cmd/qnctl/app/testdata/kyverno/disallow-latest-tag/disallow-latest-tag.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// With the ConfigMap as the source qn-controller writes the
	// QuantumNodeRoleTable; going back to the bundled source (the restore
	// below) has the chart render it, and Helm adopts qn-controller's copy
	// by the ownership marks it carries (--role-table-helm-release).
	s.upgrade(t, map[string]any{
		"webhook": map[string]any{"additionalResources": []any{
			map[string]any{"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"pods"}},
		}},
		"policies": map[string]any{"source": "configMap", "configMap": map[string]any{"files": map[string]any{
			"roles.yaml": withWorkloads, "disallow-latest-tag.yaml": string(policy),
		}}},
	})
	upgraded := time.Since(start)

	pods := s.Kube.CoreV1()
	pod := func(name, image string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"qn-test": "additional"},
				Annotations: map[string]string{"qn-role": "workloads"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image}}},
		}
	}
	remove := func(ns, name string) {
		zero := int64(0)
		if err := pods.Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete Pod %s/%s: %v", ns, name, err)
		}
	}
	t.Cleanup(func() {
		remove(testNamespace, "additional-pinned")
		remove(releaseNamespace, "additional-unjudged")
	})
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	harness.WaitFor(t, time.Minute, "the webhook judges Pods", func() error {
		_, err := pods.Pods(testNamespace).Create(ctx, pod("additional-probe", "nginx:latest"), dryRun)
		if err == nil || !strings.Contains(err.Error(), latestTagMessage) {
			return fmt.Errorf("a dry-run Pod with nginx:latest: %v", err)
		}
		return nil
	})

	_, err = pods.Pods(testNamespace).Create(ctx, pod("additional-latest", "nginx:latest"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `admission webhook "`+additionalEntry+`" denied the request`) ||
		!strings.Contains(err.Error(), latestTagMessage) || !strings.Contains(err.Error(), latestTagRule) {
		t.Errorf("a Pod with nginx:latest in %s: want Kyverno's refusal from %s, got %v", testNamespace, additionalEntry, err)
	} else {
		t.Logf("refused: %v", err)
	}
	// Admitted and stored; it never runs (no registry here): only
	// admission matters.
	if _, err := pods.Pods(testNamespace).Create(ctx, pod("additional-pinned", "nginx:1.27"), metav1.CreateOptions{}); err != nil {
		t.Errorf("a Pod with nginx:1.27 in %s: %v", testNamespace, err)
	}
	remove(testNamespace, "additional-pinned")
	// The release namespace is excluded from every entry: qn-webhook's
	// own namespace is never judged.
	if _, err := pods.Pods(releaseNamespace).Create(ctx, pod("additional-unjudged", "nginx:latest"), metav1.CreateOptions{}); err != nil {
		t.Errorf("a Pod with nginx:latest in the release namespace was judged: %v", err)
	}
	remove(releaseNamespace, "additional-unjudged")

	restoreStart := time.Now()
	restore()
	if now, err := action.NewGetValues(cfg).Run(releaseName); err != nil || !reflect.DeepEqual(now, previous) {
		t.Errorf("after the restore the release's values are %v (%v), want %v", now, err, previous)
	}
	if entries := s.validatingEntries(t); !slices.Equal(entries, entriesBefore) {
		t.Errorf("after the restore the validating webhooks are %v, want %v as before", entries, entriesBefore)
	}
	if _, err := pods.Pods(testNamespace).Create(ctx, pod("additional-probe", "nginx:latest"), dryRun); err != nil {
		t.Errorf("after the restore, a Pod is still judged: %v", err)
	}
	round := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	t.Logf("upgrade %s, checks %s, restore %s: %s in all", round(upgraded), round(restoreStart.Sub(start)-upgraded),
		round(time.Since(restoreStart)), round(time.Since(start)))
}

// validatingEntries are the webhook names of the release's
// ValidatingWebhookConfigurations.
func (s *installed) validatingEntries(t *testing.T) []string {
	t.Helper()
	list, err := s.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(context.Background(),
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + releaseName})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range list.Items {
		for _, w := range c.Webhooks {
			names = append(names, w.Name)
		}
	}
	slices.Sort(names)
	return names
}

// restoreValues is `helm upgrade --reset-values --wait` with the values the
// release had (`helm get values`), then waits until no Pod of the release
// is terminating, so the tests after see two webhook Pods as installed.
func (s *installed) restoreValues(t *testing.T, values map[string]any) {
	t.Helper()
	ctx := context.Background()
	cfg, err := s.helmConfig()
	if err != nil {
		t.Fatal(err)
	}
	ch, err := loader.LoadDir(chartrender.Dir())
	if err != nil {
		t.Fatal(err)
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.ResetValues, up.Wait, up.Timeout = releaseNamespace, true, true, 5*time.Minute
	if _, err := up.RunWithContext(ctx, releaseName, ch, values); err != nil {
		t.Fatalf("helm upgrade to the previous values: %v\n%s", err, s.podReport(ctx))
	}
	harness.WaitFor(t, 2*time.Minute, "no Pod of the release terminating", func() error {
		list, err := s.Kube.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil {
				return fmt.Errorf("%s terminating", p.Name)
			}
		}
		return nil
	})
	s.waitWebhookReplicas(t, 2)
}
