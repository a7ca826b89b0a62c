package app

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/quantumnode/qn-admission/internal/tracing"
)

// otlpEndpoint is where spans go: --otlp-endpoint, else the standard
// OpenTelemetry environment variables, else nowhere (tracing off).
func (o *Options) otlpEndpoint() string {
	if o.OTLPEndpoint != "" {
		return o.OTLPEndpoint
	}
	for _, env := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := os.Getenv(env); v != "" {
			return v
		}
	}
	return ""
}

// buildTracing sets up the OTLP/gRPC exporter and the tracer the handler
// records with, when an endpoint is configured. Without one the handler
// gets no tracer and tracing costs nothing. The exporter connects lazily:
// a collector that is down loses spans (counted by the SDK's own log), never
// requests.
func (p *Program) buildTracing(ctx context.Context) error {
	o := p.Options
	endpoint := o.otlpEndpoint()
	if endpoint == "" {
		return nil
	}
	var opts []otlptracegrpc.Option
	if strings.Contains(endpoint, "://") {
		// A URL: http:// means plaintext, https:// TLS.
		opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
	} else {
		opts = append(opts, otlptracegrpc.WithEndpoint(endpoint))
	}
	if o.OTLPInsecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exporter, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return fmt.Errorf("--otlp-endpoint %s: %w", endpoint, err)
	}
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter),
		sdktrace.WithResource(serviceResource()),
		// The API server's sampling decision wins when it sends one; our
		// own root spans are sampled at the ratio.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.TraceSampleRatio))),
	)
	p.closers = append(p.closers, func() {
		// Flush what is batched; bounded, so a dead collector cannot hold
		// the exit.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := provider.Shutdown(ctx); err != nil {
			p.Logger.Warn("traces not flushed at exit", "endpoint", endpoint, "error", err)
		}
	})
	p.Tracer = provider.Tracer(tracing.Scope)
	p.Logger.Info("tracing", "endpoint", endpoint, "sampleRatio", o.TraceSampleRatio)
	return nil
}

// serviceResource names the process in every span: service.name and,
// when the binary knows it, service.version.
func serviceResource() *resource.Resource {
	attrs := []attribute.KeyValue{attribute.String("service.name", "qn-webhook")}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		attrs = append(attrs, attribute.String("service.version", info.Main.Version))
	}
	if host, err := os.Hostname(); err == nil {
		attrs = append(attrs, attribute.String("service.instance.id", host))
	}
	return resource.NewSchemaless(attrs...)
}
