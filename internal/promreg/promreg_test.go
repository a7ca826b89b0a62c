package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestASecondRegistrationReplacesTheFirst(t *testing.T) {
	reg := prometheus.NewRegistry()
	first := prometheus.NewGauge(prometheus.GaugeOpts{Name: "qn_test_gauge", Help: "A gauge."})
	second := prometheus.NewGauge(prometheus.GaugeOpts{Name: "qn_test_gauge", Help: "A gauge."})
	first.Set(1)
	second.Set(2)
	if err := RegisterReplacing(reg, first); err != nil {
		t.Fatal(err)
	}
	if err := RegisterReplacing(reg, second); err != nil {
		t.Fatalf("the second registration failed: %v", err)
	}
	if got := testutil.ToFloat64(second); got != 2 {
		t.Fatal(got)
	}
	if n, err := testutil.GatherAndCount(reg, "qn_test_gauge"); err != nil || n != 1 {
		t.Fatalf("series = %d (%v), want 1", n, err)
	}
	mf, _ := reg.Gather()
	if v := mf[0].GetMetric()[0].GetGauge().GetValue(); v != 2 {
		t.Errorf("the registry serves %v, want the second gauge's 2", v)
	}
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "qn_test_gauge", Help: "Another type."})
	if err := RegisterReplacing(reg, other); err == nil {
		t.Error("a collector of another type under the same name was registered")
	}
}
