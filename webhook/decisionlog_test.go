package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"

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

// blockingWriter holds every Write until release is closed, as a stdout
// whose reader has stalled would.
type blockingWriter struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	return len(p), nil
}

// The answer leaves before the decision line is written: a stalled log
// destination holds back the line, not the answer of the request whose
// line it is (nor, with the decision log's grouped writes, anything until
// 64 KiB of lines wait). A connection still waiting for its handler to
// return reads no next request, so each request here comes on its own.
func TestTheAnswerLeavesBeforeTheDecisionLine(t *testing.T) {
	set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stalled := &blockingWriter{entered: make(chan struct{}), release: make(chan struct{})}
	h := NewHandler(policies.NewEngine(set, policies.EngineOptions{}), HandlerOptions{
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		DecisionLog: slog.New(slog.NewJSONHandler(stalled, nil)),
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer close(stalled.release)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for _, path := range []string{"/mutate", "/validate"} {
		resp, err := client.Post(srv.URL+path, "application/json", strings.NewReader(reviewBody("CREATE", validObject)))
		if err != nil {
			t.Fatalf("%s with the decision log stalled: %v", path, err)
		}
		var rev admissionv1.AdmissionReview
		err = json.NewDecoder(resp.Body).Decode(&rev)
		resp.Body.Close()
		if err != nil || rev.Response == nil || !rev.Response.Allowed || resp.ContentLength <= 0 {
			t.Fatalf("%s: want the allowed answer with its length while the log is stalled, got %v %+v (Content-Length %d)", path, err, rev.Response, resp.ContentLength)
		}
	}
	select {
	case <-stalled.entered:
	default:
		t.Fatal("the decision line was never written")
	}
}
