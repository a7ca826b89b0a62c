// Package health serves the probe port of both binaries: /healthz
// (liveness), /readyz (readiness), their strict form, /metrics and, behind
// a switch, net/http/pprof.
//
// Three questions, three answers:
//   - /healthz: does the process answer? Cheap, always "ok" while serving.
//     The kubelet restarts on it, so nothing a policy author or a Secret can
//     break may fail it.
//   - /readyz: may this replica take traffic? The checks' Ready conditions.
//   - ?strict=true on either: are the answers right? Ready conditions plus
//     every Strict condition (the newest policy set is served, evaluation
//     errors are rare, the certificate is not about to expire, the window
//     store answers). This is a service-level signal for monitoring, not
//     for the kubelet: failing it on every replica at once (one bad policy
//     push does that) must page a person, not stop admission.
//
// ?verbose lists each check with its value, as the apiserver's own probes
// do. qn_health_check_failing{check} carries the strict result to
// Prometheus, evaluated at each scrape.
package health

import (
	"context"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is one condition of the probes. Every field but Name is optional.
type Check struct {
	Name string
	// Ready fails /readyz (and the strict probes) when it returns an error.
	Ready func() error
	// Strict fails only the strict probes. ctx bounds checks that make a
	// call (the window store's ping).
	Strict func(ctx context.Context) error
	// Detail adds the check's value to ?verbose, e.g. the revision served.
	Detail func() string
}

// Options configure the probe handler.
type Options struct {
	// Registerer receives qn_health_check_failing when a check has a
	// Strict condition.
	Registerer prometheus.Registerer
	// Gatherer, when set, is served at /metrics.
	Gatherer prometheus.Gatherer
	Checks   []Check
	// Profiling serves net/http/pprof under /debug/pprof/. Off by default:
	// a profile shows request contents and costs CPU while it runs.
	Profiling bool
	// StrictTimeout bounds each strict evaluation (default 2s).
	StrictTimeout time.Duration
}

// DefaultStrictTimeout bounds a strict evaluation: well under a probe's
// or a scrape's timeout.
const DefaultStrictTimeout = 2 * time.Second

// NewHandler serves /healthz, /readyz, /metrics and, with Profiling,
// /debug/pprof/.
func NewHandler(opts Options) http.Handler {
	if opts.StrictTimeout <= 0 {
		opts.StrictTimeout = DefaultStrictTimeout
	}
	p := &prober{checks: opts.Checks, timeout: opts.StrictTimeout}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if !isStrict(r) {
			fmt.Fprintln(w, "ok")
			return
		}
		p.serve(w, r, true)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		p.serve(w, r, isStrict(r))
	})
	if opts.Registerer != nil && p.hasStrict() {
		opts.Registerer.MustRegister(&failingCollector{prober: p})
	}
	if opts.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{Registry: opts.Registerer}))
	}
	if opts.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func isStrict(r *http.Request) bool {
	v := r.URL.Query().Get("strict")
	return v == "true" || v == "1"
}

type prober struct {
	checks  []Check
	timeout time.Duration
}

func (p *prober) hasStrict() bool {
	for _, c := range p.checks {
		if c.Strict != nil {
			return true
		}
	}
	return false
}

// result is one check's outcome in one evaluation.
type result struct {
	name string
	err  error
	// strictOnly is set when only the strict condition failed.
	strictOnly bool
	detail     string
}

// evaluate runs the checks' Ready conditions and, when strict, their
// Strict conditions, each strict one under the prober's timeout.
func (p *prober) evaluate(ctx context.Context, strict bool) []result {
	results := make([]result, 0, len(p.checks))
	for _, c := range p.checks {
		r := result{name: c.Name}
		if c.Ready != nil {
			r.err = c.Ready()
		}
		if r.err == nil && strict && c.Strict != nil {
			r.err, r.strictOnly = p.strictOf(ctx, c), true
		}
		if r.err == nil && c.Detail != nil {
			r.detail = c.Detail()
		}
		results = append(results, r)
	}
	return results
}

func (p *prober) strictOf(ctx context.Context, c Check) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return c.Strict(ctx)
}

func (p *prober) serve(w http.ResponseWriter, r *http.Request, strict bool) {
	results := p.evaluate(r.Context(), strict)
	var b strings.Builder
	ok := true
	for _, res := range results {
		switch {
		case res.err != nil && res.strictOnly:
			ok = false
			fmt.Fprintf(&b, "[-]%s failed (strict): %v\n", res.name, res.err)
		case res.err != nil:
			ok = false
			fmt.Fprintf(&b, "[-]%s failed: %v\n", res.name, res.err)
		case res.detail != "":
			fmt.Fprintf(&b, "[+]%s ok: %s\n", res.name, res.detail)
		default:
			fmt.Fprintf(&b, "[+]%s ok\n", res.name)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	if _, verbose := r.URL.Query()["verbose"]; verbose || !ok {
		fmt.Fprint(w, b.String())
	}
	switch {
	case ok:
		fmt.Fprintln(w, "ok")
	case r.URL.Path == "/healthz":
		fmt.Fprintln(w, "unhealthy")
	default:
		fmt.Fprintln(w, "not ready")
	}
}

// failingCollector exports qn_health_check_failing{check}: 1 while a
// check's strict condition (or its readiness) fails, evaluated at scrape
// time so an alert does not depend on anyone calling the strict probe.
type failingCollector struct{ prober *prober }

var failingDesc = prometheus.NewDesc("qn_health_check_failing",
	"1 while a health check fails in strict mode (/healthz?strict=true), by check; 0 while it passes.",
	[]string{"check"}, nil)

func (c *failingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- failingDesc }

func (c *failingCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.prober.evaluate(context.Background(), true) {
		v := 0.0
		if r.err != nil {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(failingDesc, prometheus.GaugeValue, v, r.name)
	}
}
