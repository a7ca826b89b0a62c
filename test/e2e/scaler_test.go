package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

func scaler(name, query string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "qn.dev/v1alpha1",
		"kind":       "HorizontalQNScaler",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
			"maxReplicas":    int64(10),
			"qnMetric":       map[string]any{"query": query},
			"thresholds":     map[string]any{"upper": "15", "lower": "5"},
		},
	}}
}

// scalerCheckActive waits until the apiserver calls qn-webhook for
// HorizontalQNScalers (a dry run of a bad query is refused).
func scalerCheckActive(t *testing.T) {
	t.Helper()
	registered(t)
	err := harness.Eventually(context.Background(), 30*time.Second, func() error {
		_, err := cluster.Dynamic.Resource(harness.Scalers).Namespace(namespace).Create(context.Background(), scaler("probe", "x +"),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if !Contains(err, "parse error") {
			return fmt.Errorf("the scaler webhook is not active yet: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Through the real apiserver and qn-webhook: a scaler whose PromQL does
// not parse is refused with Prometheus' parser's message and position, on
// every verb that can bring one (create, update, patch), while a change
// that keeps a stored query (a pause) is admitted.
func TestAScalerWhoseQueryDoesNotParseIsRefused(t *testing.T) {
	scalerCheckActive(t)
	ctx := context.Background()
	scalers := cluster.Dynamic.Resource(harness.Scalers).Namespace(namespace)

	_, err := scalers.Create(ctx, scaler("orders", `sum(rate(orders_total[5m])`), metav1.CreateOptions{})
	want := `admission webhook "validate-scalers.qn-admission.qn.dev" denied the request: HorizontalQNScaler orders is invalid: spec.qnMetric.query: 1:27: parse error: unclosed left parenthesis`
	if !apierrors.IsInvalid(err) || !Contains(err, want) {
		t.Fatalf("create: %v\nwant 422 with %q", err, want)
	}

	if _, err := scalers.Create(ctx, scaler("orders", `sum(rate(orders_total[5m]))`), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a scaler whose query parses: %v", err)
	}
	defer func() { _ = scalers.Delete(ctx, "orders", metav1.DeleteOptions{}) }()

	stored, err := scalers.Get(ctx, "orders", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(stored.Object, "sum(orders", "spec", "qnMetric", "query"); err != nil {
		t.Fatal(err)
	}
	if _, err := scalers.Update(ctx, stored, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !Contains(err, "spec.qnMetric.query: 1:11: parse error") {
		t.Errorf("update to a bad query: %v", err)
	}
	patch := `[{"op":"add","path":"/spec/stages","value":[{"percent":50,"observeSeconds":60,"abortWhen":[{"name":"errors","query":"rate(errors[1m]","operator":">","threshold":"0.01"}]}]}]`
	_, err = scalers.Patch(ctx, "orders", types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) || !Contains(err, "spec.stages[0].abortWhen[0].query: 1:16: parse error: unclosed left parenthesis") {
		t.Errorf("patch adding a bad abort condition: %v", err)
	}
	pause := `{"metadata":{"annotations":{"qn.dev/paused":"true"}}}`
	if _, err := scalers.Patch(ctx, "orders", types.MergePatchType, []byte(pause), metav1.PatchOptions{}); err != nil {
		t.Errorf("pausing a scaler: %v", err)
	}
}
