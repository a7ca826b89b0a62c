package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
)

func TestDecisionLogLineCarriesEveryField(t *testing.T) {
	set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	h := NewHandler(policies.NewEngine(set, policies.EngineOptions{}), HandlerOptions{
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		DecisionLog: slog.New(slog.NewJSONHandler(&buf, nil)),
		Metrics:     metrics,
	})
	secret := "s3cr3t-value-that-must-not-be-logged"
	denied := reviewBody("CREATE", strings.Replace(validObject, `[{"name":"mqtt","port":8883}]`, `[{"name":"mqtt","port":8883},{"name":"`+secret+`","port":8883}]`, 1))
	post(t, h, http.MethodPost, "/validate", "application/json", denied)
	post(t, h, http.MethodPost, "/validate", "application/json", reviewBody("CREATE", validObject))
	post(t, h, http.MethodPost, "/mutate", "application/json", reviewBody("CREATE", validObject))

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want one line per decision, got %d:\n%s", len(lines), buf.String())
	}
	var d map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &d); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"time", "uid", "user", "groups", "role", "operation", "kind", "namespace", "name", "allowed", "code", "reasons", "patchOps", "window", "revision", "latencyMs", "remote"} {
		if _, ok := d[field]; !ok && field != "window" {
			t.Errorf("the denied line lacks %q: %s", field, lines[0])
		}
	}
	if d["allowed"] != false || d["code"] != float64(403) || d["user"] != "alice" || d["role"] != "default" {
		t.Errorf("wrong values in %s", lines[0])
	}
	var allowed map[string]any
	_ = json.Unmarshal([]byte(lines[1]), &allowed)
	w, _ := allowed["window"].(map[string]any)
	if allowed["allowed"] != true || w["count"] != float64(1) || w["limit"] != float64(600) {
		t.Errorf("the allowed line should carry the window count and limit: %s", lines[1])
	}
	var mutated map[string]any
	_ = json.Unmarshal([]byte(lines[2]), &mutated)
	if mutated["patchOps"] != float64(1) || mutated["webhook"] != "mutate" {
		t.Errorf("the mutate line should count its patch operations: %s", lines[2])
	}
	if strings.Contains(buf.String(), secret) || strings.Contains(buf.String(), `"spec"`) || strings.Contains(buf.String(), "8883}") {
		t.Errorf("object bodies must never be logged:\n%s", buf.String())
	}

	if got := testutil.ToFloat64(metrics.requests.WithLabelValues("validate", "default", "denied", "403")); got != 1 {
		t.Errorf("qn_admission_requests_total{denied,403} = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(reg, "qn_admission_request_duration_seconds"); n != 2 {
		t.Errorf("latency histograms for validate and mutate: got %d series", n)
	}
}
