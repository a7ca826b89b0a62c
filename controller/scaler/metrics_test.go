package scaler

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// qn_scaler_value carries the scaler's qnMetric.name; a renamed figure
// leaves one series, under its new name, and a deleted scaler none.
func TestTheValueSeriesCarriesTheFiguresName(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: "shop", Name: "orders"}
	m.setValue(key, "queue_depth", 40)
	m.setValue(key, "http_queue_length", 17.2)
	want := `
# HELP qn_scaler_value The last value a HorizontalQNScaler's query returned; metric is its qnMetric.name (empty when unnamed).
# TYPE qn_scaler_value gauge
qn_scaler_value{metric="http_queue_length",scaler="orders",scaler_namespace="shop"} 17.2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "qn_scaler_value"); err != nil {
		t.Error(err)
	}
	m.forget(key)
	if n := testutil.CollectAndCount(m.value); n != 0 {
		t.Errorf("%d qn_scaler_value series after the scaler was deleted, want 0", n)
	}
}

// qn_scaler_able_to_scale follows the AbleToScale condition.
func TestAbleToScaleFollowsItsCondition(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: "shop", Name: "orders"}
	for _, step := range []struct {
		status metav1.ConditionStatus
		want   float64
	}{{metav1.ConditionTrue, 1}, {metav1.ConditionFalse, 0}, {metav1.ConditionTrue, 1}} {
		m.setAbleToScale(key, &metav1.Condition{Type: "AbleToScale", Status: step.status})
		if got := testutil.ToFloat64(m.ableToScale.WithLabelValues("shop", "orders")); got != step.want {
			t.Errorf("AbleToScale %s: qn_scaler_able_to_scale = %v, want %v", step.status, got, step.want)
		}
	}
	m.forget(key)
	if n := testutil.CollectAndCount(m.ableToScale); n != 0 {
		t.Errorf("%d series after the scaler was deleted", n)
	}
}
