package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quantumnode/qn-admission/internal/tracing"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
)

const realtimeReview = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"%d","kind":{"group":"qn.dev","version":"v1alpha1","kind":"QuantumNode"},"resource":{"group":"qn.dev","version":"v1alpha1","resource":"quantumnodes"},"namespace":"edge","name":"edge-sh-1","operation":"CREATE","userInfo":{"username":"alice","groups":["edge-ops","system:authenticated"]},"object":{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"edge-sh-1","namespace":"edge","labels":{"topology.kubernetes.io/zone":"cn-shanghai"},"annotations":{"qn-role":"realtime","qn.dev/latency-budget-ms":"20"}},"spec":{"hardware":{"arch":"arm64"},"services":[{"name":"mqtt","port":8883},{"name":"metrics","port":9100},{"name":"ota","port":8443}]}}}}`

// withExtraRoles adds n roles, each with its own policy package, that
// realtime requests never touch: the cost of a decision must not grow with
// policies of other roles.
func withExtraRoles(n int) fstest.MapFS {
	fsys := fstest.MapFS{}
	bundled := rego.Bundled()
	mods, _ := rego.ReadModules(bundled)
	for _, m := range mods {
		fsys[m.Path] = &fstest.MapFile{Data: []byte(m.Source)}
	}
	roles, _ := io.ReadAll(must(bundled.Open("roles.yaml")))
	var b strings.Builder
	b.Write(roles)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  extra%d:\n    operations: [CREATE]\n    packages: [qn.extra.p%d]\n", i, i)
		fsys[fmt.Sprintf("extra/p%d.rego", i)] = &fstest.MapFile{Data: []byte(fmt.Sprintf(
			"package qn.extra.p%d\n\ndeny contains \"extra %d\" if {\n\tinput.request.object.metadata.labels.team == \"t%d\"\n\tcount(input.request.object.spec.services) > %d\n}\n", i, i, i, i%7))}
	}
	fsys["roles.yaml"] = &fstest.MapFile{Data: []byte(b.String())}
	return fsys
}

func must(f io.Reader, err error) io.Reader {
	if err != nil {
		panic(err)
	}
	return f
}

func benchmarkValidate(b *testing.B, fsys fstest.MapFS) { benchmarkReview(b, "/validate", fsys, nil) }

func benchmarkValidateTraced(b *testing.B, fsys fstest.MapFS, tracer trace.Tracer) {
	benchmarkReview(b, "/validate", fsys, tracer)
}

func benchmarkReview(b *testing.B, path string, fsys fstest.MapFS, tracer trace.Tracer) {
	var set *policies.Set
	var err error
	// A policy deadline no stall of a shared machine reaches: a benchmark
	// measures cost, and a sampled trace under a load average of 20 once
	// took its evaluation past 1 s.
	const evalTimeout = 10 * time.Second
	if fsys == nil {
		set, err = policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{EvalTimeout: evalTimeout})
	} else {
		set, err = policies.Load(context.Background(), fsys, policies.LoadOptions{EvalTimeout: evalTimeout, SkipTests: true})
	}
	if err != nil {
		b.Fatal(err)
	}
	// One change per simulated second keeps realtime (120/60s) below its
	// limit, so every iteration takes the full path including a window slot.
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC))
	engine := policies.NewEngine(set, policies.EngineOptions{Windows: window.NewMemoryStore(clk, window.MemoryOptions{})})
	h := NewHandler(engine, HandlerOptions{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Tracer: tracer})
	bodies := make([]string, 1024)
	for i := range bodies {
		bodies[i] = fmt.Sprintf(realtimeReview, i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPUPerOp(b)()
	for i := 0; i < b.N; i++ {
		clk.SetTime(clk.Now().Add(time.Second))
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(bodies[i%len(bodies)]))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"allowed":true`) ||
			(path == "/mutate") != strings.Contains(rec.Body.String(), `"patchType":"JSONPatch"`) {
			b.Fatalf("unexpected answer: %s", rec.Body.String())
		}
	}
}

// BenchmarkValidateRealtime is the whole validate path in-process: decode,
// context, role lookup, four policy packages, a window slot, encode, and the
// decision log line (to io.Discard).
func BenchmarkValidateRealtime(b *testing.B) { benchmarkValidate(b, nil) }

// BenchmarkMutateRealtime is the whole mutate path in-process for the same
// review, which gets the managed-by label as a JSONPatch.
func BenchmarkMutateRealtime(b *testing.B) { benchmarkReview(b, "/mutate", nil, nil) }

// BenchmarkValidateRealtimeWith1000OtherPolicies adds 1,000 roles with a
// policy each; realtime's cost must stay flat.
func BenchmarkValidateRealtimeWith1000OtherPolicies(b *testing.B) {
	benchmarkValidate(b, withExtraRoles(1000))
}

// BenchmarkValidateRealtimeTracing is the same path with a tracer: "not
// sampled" is what most requests cost with tracing on at a ratio below 1,
// "sampled" what a recorded request costs (spans built, not exported: the
// batch exporter sends them off the request path).
func BenchmarkValidateRealtimeTracing(b *testing.B) {
	for name, sampler := range map[string]sdktrace.Sampler{"not sampled": sdktrace.NeverSample(), "sampled": sdktrace.AlwaysSample()} {
		b.Run(name, func(b *testing.B) {
			provider := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler))
			defer provider.Shutdown(context.Background())
			benchmarkValidateTraced(b, nil, provider.Tracer(tracing.Scope))
		})
	}
}

// BenchmarkValidateLoadFixtures is the whole validate path for each review
// of the load mix (test/load/testdata), as the apiserver sends them
// (compact JSON):
// updates carry an oldObject, and objects their managed fields, status and
// last-applied annotation, which the realtime literal above lacks.
func BenchmarkValidateLoadFixtures(b *testing.B) {
	files, err := filepath.Glob("../test/load/testdata/*.json")
	if err != nil || len(files) == 0 {
		b.Fatalf("no load fixtures: %v", err)
	}
	set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{EvalTimeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	for _, file := range files {
		indented, err := os.ReadFile(file)
		if err != nil {
			b.Fatal(err)
		}
		// Compact, as the apiserver sends a review.
		var compact bytes.Buffer
		if err := json.Compact(&compact, indented); err != nil {
			b.Fatal(err)
		}
		body := compact.Bytes()
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		b.Run(name, func(b *testing.B) {
			clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC))
			engine := policies.NewEngine(set, policies.EngineOptions{Windows: window.NewMemoryStore(clk, window.MemoryOptions{})})
			h := NewHandler(engine, HandlerOptions{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
			var first string
			b.ReportAllocs()
			b.ResetTimer()
			defer reportCPUPerOp(b)()
			for i := 0; i < b.N; i++ {
				clk.SetTime(clk.Now().Add(time.Second))
				req := httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("unexpected answer: %d %s", rec.Code, rec.Body.String())
				}
				if first == "" {
					first = rec.Body.String()
				} else if rec.Body.String() != first {
					b.Fatalf("answer changed from %s to %s", first, rec.Body.String())
				}
			}
		})
	}
}

// BenchmarkCheckBudget is the element and depth count over a realtime
// CREATE's review, before decoding.
func BenchmarkCheckBudget(b *testing.B) {
	body := []byte(fmt.Sprintf(realtimeReview, 1))
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := checkBudget(body, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}

// reportCPUPerOp starts counting this process's CPU time and returns the
// func that reports it per operation as cpu-µs/op: CPU per request (GC
// included) moves less than the time per request on a shared machine,
// where this process waits for a core.
func reportCPUPerOp(b *testing.B) func() {
	cpu := cpuTime()
	return func() { b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N)/1e3, "cpu-µs/op") }
}
