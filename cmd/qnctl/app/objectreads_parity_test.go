package app

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/webhook"
)

// wholeObjects is the engine as a Decider that does not say what it reads
// of the objects, so the webhook decodes them whole.
type wholeObjects struct {
	webhook.WholeObjects
	engine *policies.Engine
}

func (w wholeObjects) Validate(ctx context.Context, in *policies.Input) policies.Decision {
	return w.engine.Validate(ctx, in)
}

func (w wholeObjects) Mutate(ctx context.Context, in *policies.Input) policies.Decision {
	return w.engine.Mutate(ctx, in)
}

// Current keeps the roles known to the metrics, as for the engine.
func (w wholeObjects) Current() *policies.Set { return w.engine.Current() }

// chartServer is qn-webhook's handler as the chart wires it (QuantumNodes
// to the engine, scalers to their validator) over the bundled policies,
// its decision log and request metrics kept for comparison. whole makes
// the webhook decode the objects whole.
func chartServer(t *testing.T, now time.Time, n int, whole bool) (http.Handler, *bytes.Buffer, *prometheus.Registry) {
	t.Helper()
	set, err := bundledSet()
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakePassiveClock(now)
	store := &serverStore{mem: window.NewMemoryStore(clk, window.MemoryOptions{}), n: n}
	engine := policies.NewEngine(set, policies.EngineOptions{Windows: store})
	var decider webhook.Decider = engine
	if whole {
		decider = wholeObjects{engine: engine}
	}
	deciders := webhook.Served(decider)
	if reads := deciders.ObjectReads(); (reads == nil) != whole {
		t.Fatalf("the webhook reads %v of the objects; whole: %v", reads.Review(), whole)
	}
	var log bytes.Buffer
	reg := prometheus.NewRegistry()
	h := webhook.NewHandler(deciders, webhook.HandlerOptions{Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		DecisionLog: slog.New(slog.NewJSONHandler(&log, nil)), Metrics: webhook.NewMetrics(reg)})
	return h, &log, reg
}

// latencies are the decision log's timings, which differ run to run.
var latencies = regexp.MustCompile(`"(latencyMs|time)":("[^"]*"|[0-9.e+-]+)`)

// The webhook decodes only what the policies may read of the objects; for
// every bundled fixture case (through the mutating and then the
// validating webhook, as the apiserver calls them) and every review the
// repository keeps, the answers, decision log lines and request metrics
// are those of decoding the objects whole.
func TestDecodingWhatThePoliciesReadAnswersAlike(t *testing.T) {
	cases := bundledCases(t, time.Now().UTC())
	type review struct {
		name, webhook string
		now           time.Time
		windows       int
		body          []byte
	}
	var reviews []review
	for _, c := range cases {
		body, err := c.Spec.reviewBytes()
		if err != nil {
			t.Fatal(err)
		}
		mode := c.Webhook
		if mode == "" {
			mode = webhookBoth
		}
		reviews = append(reviews, review{c.Name, mode, c.Now, c.Windows, body})
	}
	for _, pattern := range []string{"../../../test/load/testdata/*.json", "../../../test/testdata/*.json"} {
		paths, _ := filepath.Glob(pattern)
		for _, p := range paths {
			body, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			reviews = append(reviews, review{p, "", time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC), 0, body})
		}
	}
	if len(reviews) < 60 {
		t.Fatalf("only %d reviews", len(reviews))
	}
	for _, r := range reviews {
		t.Run(r.name, func(t *testing.T) {
			inPart, partLog, partMetrics := chartServer(t, r.now, r.windows, false)
			whole, wholeLog, wholeMetrics := chartServer(t, r.now, r.windows, true)
			got, want := askServerAnyStatus(t, inPart, r.body, r.webhook), askServerAnyStatus(t, whole, r.body, r.webhook)
			if len(got) != len(want) {
				t.Fatalf("%d answers in part, %d whole", len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Errorf("answer %d differs\nin part: %s\nwhole:   %s", i+1, got[i], want[i])
				}
			}
			if g, w := latencies.ReplaceAllString(partLog.String(), ""), latencies.ReplaceAllString(wholeLog.String(), ""); g != w {
				t.Errorf("decision log differs\nin part: %s\nwhole:   %s", g, w)
			}
			if partLog.Len() == 0 {
				t.Error("no decision log line")
			}
			g, _ := testutil.CollectAndFormat(partMetrics, expfmt.TypeTextPlain, "qn_admission_requests_total")
			w, _ := testutil.CollectAndFormat(wholeMetrics, expfmt.TypeTextPlain, "qn_admission_requests_total")
			if !bytes.Equal(g, w) || len(g) == 0 {
				t.Errorf("request metrics differ\nin part: %s\nwhole:   %s", g, w)
			}
		})
	}
}

// askServerAnyStatus is askServer for the fixture cases, and for a
// review file, which may be malformed, its mutating and validating
// answers whatever their status.
func askServerAnyStatus(t *testing.T, h http.Handler, body []byte, mode string) [][]byte {
	t.Helper()
	if mode != "" {
		return askServer(t, h, body, mode)
	}
	var out [][]byte
	for _, path := range []string{"/mutate", "/validate"} {
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		out = append(out, append([]byte(strconv.Itoa(rec.Code)+" "), rec.Body.Bytes()...))
	}
	return out
}
