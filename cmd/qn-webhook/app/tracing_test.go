package app

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// collector is an OTLP/gRPC trace receiver, as an OpenTelemetry collector
// serves it, that keeps what it is sent.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans map[string]string // span name → service.name of its resource
}

func (c *collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans[s.GetName()] = service
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (c *collector) received() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]string, len(c.spans))
	for k, v := range c.spans {
		out[k] = v
	}
	return out
}

func startCollector(t *testing.T) (*collector, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{spans: map[string]string{}}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return c, ln.Addr().String()
}

// With --otlp-endpoint, qn-webhook exports each review's spans over
// OTLP/gRPC, named for its service, and flushes them when it stops.
func TestProgramExportsTracesOverOTLP(t *testing.T) {
	col, addr := startCollector(t)
	s := start(t, t.TempDir(), "--otlp-endpoint="+addr, "--otlp-insecure", "--trace-sample-ratio=1")
	if got := s.admit(t, "/validate", review("uid-traced", validSpec)); !got.Allowed {
		t.Fatalf("review: %+v", got.Result)
	}
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("qn-webhook did not stop")
	}
	s.done <- nil // for the cleanup's receive
	got := col.received()
	for _, name := range []string{"admission.validate", "decode", "role", "policy evaluation", "policy qn.quantumnode", "encode"} {
		if got[name] != "qn-webhook" {
			t.Errorf("the collector has no span %q from service qn-webhook; it has %v", name, got)
		}
	}
}

// Without an endpoint (flag or OTEL_EXPORTER_OTLP_* variables) there is no
// tracer at all.
func TestTracingIsOffWithoutAnEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	s := start(t, t.TempDir())
	if s.Tracer != nil {
		t.Errorf("a tracer was set up with no endpoint")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
	if got := options(t).otlpEndpoint(); got != "http://127.0.0.1:4317" {
		t.Errorf("the standard variable is not followed: endpoint %q", got)
	}
}
