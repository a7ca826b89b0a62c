// Package app is the composition root of qn-webhook: its options, and the
// wiring that builds the policy source, the serving certificate, the
// admission handler and the listeners (Build), then serves them until the
// context ends and drains (Program.Serve).
//
// It is the only place that knows every part: webhook is transport,
// policies decides, certs serves TLS. cmd/qn-webhook's main parses the
// flags and calls Run; the chart tests parse the chart's arguments with
// the same Options, and the profiling build (test/load/cmd/qnprof) runs
// the same Build, so both see the program as shipped. No product package
// imports it.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/utils/clock"

	"github.com/quantumnode/qn-admission/certs"
	"github.com/quantumnode/qn-admission/internal/activity"
	"github.com/quantumnode/qn-admission/internal/batchwrite"
	"github.com/quantumnode/qn-admission/internal/cpupressure"
	"github.com/quantumnode/qn-admission/internal/dirwatch"
	"github.com/quantumnode/qn-admission/internal/health"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/inventory"
	"github.com/quantumnode/qn-admission/policies/pattern"
	"github.com/quantumnode/qn-admission/policies/shadow"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
	"github.com/quantumnode/qn-admission/webhook"
)

// Program is qn-webhook assembled and listening, not yet serving: Build
// returns it, Serve runs it. A new part (a store, a readiness check, a
// watcher) is one more step in Build that fills these fields.
type Program struct {
	Options *Options
	Logger  *slog.Logger
	// Registry holds every series served at /metrics.
	Registry *prometheus.Registry
	// Policies is where the served set comes from; Engine serves it.
	Policies policies.Source
	Engine   *policies.Engine
	// Inventory is the cluster inventory, with --inventory; nil without.
	Inventory *inventory.Cluster
	// Shadow judges every request again with --shadow-policy-dir's set,
	// off the response path; nil without one.
	Shadow *shadow.Shadow
	// servedActivity counts the requests the handler is serving, so the
	// shadow judges in the moments between them; nil without a shadow.
	servedActivity *activity.Activity
	// DecisionLog receives one line per decision (and per shadow
	// disagreement).
	DecisionLog *slog.Logger
	// decisionLines is the writer under DecisionLog's JSON handler: the
	// handler writes each request's line to it directly.
	decisionLines io.Writer
	// Windows counts every role's rate window, in this process or in
	// Redis, under a deadline.
	Windows *window.Guard
	// Certificates holds the serving pair and follows its rotation.
	Certificates *certs.FileSource
	TLSConfig    *tls.Config
	// Handler answers POST /validate and POST /mutate.
	Handler http.Handler
	// Checks make up /readyz and strict health, in order; Serve adds a
	// draining check last.
	Checks []health.Check
	// Answers counts answers and failed answers for strict health.
	Answers *health.Answers
	// Tracer records each request's span tree; nil when tracing is off.
	Tracer trace.Tracer
	// Tasks run beside the servers until they have drained.
	Tasks []Task
	// AdmissionListener and ProbeListener are bound; Serve closes them.
	AdmissionListener net.Listener
	ProbeListener     net.Listener
	// MaxConnections is the admission listener's connection cap:
	// --max-connections, lowered to keep descriptors for probes and reloads.
	MaxConnections int

	closers []func()
}

// Task is work that runs beside the servers, such as a file watcher. It
// runs until the servers have drained, so a rotation during the drain still
// applies. An error is logged as "<Name> stopped".
type Task struct {
	Name string
	Run  func(ctx context.Context) error
}

// Run starts the process as shipped (the garbage collector tuned to the
// container's memory limit, the pattern matcher's logs silenced), builds
// qn-webhook from o and serves until ctx ends, then drains in-flight
// requests. Anything that prevents serving correctly is an error before
// listening. Every program that runs qn-webhook calls Run, so a profile
// or a benchmark measures what the image runs.
func Run(ctx context.Context, o *Options, logger *slog.Logger) error {
	pattern.DiscardMatcherLogs()
	tuneGC(logger)
	p, err := Build(ctx, o, logger)
	if err != nil {
		return err
	}
	return p.Serve(ctx)
}

// Build validates o, loads the policies and the serving certificate,
// builds the handler and binds both listeners. Nothing is served yet.
func Build(ctx context.Context, o *Options, logger *slog.Logger) (_ *Program, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	p := &Program{Options: o, Logger: logger, Registry: prometheus.NewRegistry(), Answers: &health.Answers{}}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	p.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, step := range []func(context.Context) error{p.buildTracing, p.buildWindows, p.connectInventory, p.buildPolicies, p.buildInventory, p.buildDecisionLog, p.buildShadow, p.buildHandler, p.buildCertificates, p.listen} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Serve runs the tasks and serves admission and probes until ctx ends, then
// drains in-flight requests, stops the tasks and closes what Build opened.
//
// Shutdown ends within the grace period after ctx ends, whatever the tasks
// do: a task still running then (a reload stuck in a read the kernel does
// not interrupt) is named in the log and left to end with the process.
func (p *Program) Serve(ctx context.Context) error {
	defer p.close()
	var stopping atomic.Int64 // when ctx ended, in Unix nanoseconds
	defer context.AfterFunc(ctx, func() { stopping.Store(time.Now().UnixNano()) })()
	taskCtx, stopTasks := context.WithCancel(context.WithoutCancel(ctx))
	running := make([]atomic.Bool, len(p.Tasks))
	var tasks sync.WaitGroup
	defer func() {
		stopTasks()
		began := time.Unix(0, stopping.Load())
		if stopping.Load() == 0 {
			began = time.Now()
		}
		// At least a moment to stop, even when the drain took the grace.
		wait := max(time.Until(began.Add(p.Options.ShutdownGracePeriod)), taskStopMinimum)
		if names := waitTasks(&tasks, running, p.Tasks, wait); len(names) > 0 {
			p.Logger.Error("tasks did not stop within the shutdown grace period; exiting without them", "tasks", names, "waited", wait.String())
		}
	}()
	for i, t := range p.Tasks {
		running[i].Store(true)
		tasks.Go(func() {
			defer running[i].Store(false)
			if err := t.Run(taskCtx); err != nil {
				p.Logger.Error(t.Name+" stopped", "error", err)
			}
		})
	}
	server := &webhook.Server{
		Handler:     p.Handler,
		TLSConfig:   p.TLSConfig,
		Registry:    p.Registry,
		Checks:      p.Checks,
		Profiling:   p.Options.Profiling,
		GracePeriod: p.Options.ShutdownGracePeriod,
		Logger:      p.Logger,

		MaxConnections:   p.MaxConnections,
		HandshakeTimeout: p.Options.HandshakeTimeout,
	}
	return server.Serve(ctx, p.AdmissionListener, p.ProbeListener)
}

// taskStopMinimum is how long tasks get to stop after the servers drained,
// when the drain took the whole grace period.
const taskStopMinimum = time.Second

// waitTasks waits up to wait for the tasks; it returns the names of those
// still running then.
func waitTasks(wg *sync.WaitGroup, running []atomic.Bool, tasks []Task, wait time.Duration) []string {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-timer.C:
	}
	var names []string
	for i := range running {
		if running[i].Load() {
			names = append(names, tasks[i].Name)
		}
	}
	return names
}

func (p *Program) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
}

// buildPolicies loads the first policy set from its source: the directory
// when --policy-dir is set (followed and hot-reloaded), else the bundled one.
func (p *Program) buildPolicies(ctx context.Context) error {
	o := p.Options
	metrics := policies.NewMetrics(p.Registry)
	source, err := policies.Open(policies.OpenOptions{
		Dir:     o.PolicyDir,
		Load:    o.LoadOptions(),
		Watch:   dirwatch.Options{PollInterval: o.PolicyPollInterval, Logger: p.Logger},
		Metrics: metrics,
		Logger:  p.Logger,
	})
	if err != nil {
		return fmt.Errorf("--policy-dir: %w", err)
	}
	p.Policies = source
	set, err := source.Load(ctx)
	if err != nil {
		return err
	}
	p.Logger.Info("policies loaded", "source", source.Name(), "revision", set.Revision, "roles", set.Roles.Names())
	p.Engine = policies.NewEngine(set, policies.EngineOptions{Metrics: metrics, Windows: p.Windows, Inventory: p.policyInventory()})
	// A failed reload does not make us unready: the last good set keeps
	// serving, and failing every replica's probe would lock writes out.
	// Strict health fails after the grace, so a person is paged instead.
	p.Checks = append(p.Checks, health.Check{
		Name: "policies", Detail: source.Status, Strict: health.PoliciesCheck(source.ReloadState, o.Strict, nil),
	}, health.Check{
		Name: "errors", Strict: p.Answers.RatioCheck(o.Strict.MaxErrorRatio), Detail: p.Answers.Detail,
	})
	p.Tasks = append(p.Tasks, Task{Name: "policy watcher", Run: func(ctx context.Context) error { return source.Run(ctx, p.Engine) }})
	if o.PolicyDir != "" && o.Strict.MaxSyncLag > 0 {
		lag := newSourceLag(o.PolicyDir, source.ReloadState, clock.RealClock{})
		lag.Sample()
		p.Registry.MustRegister(sourceLagMetric(lag))
		p.Checks = append(p.Checks, health.Check{Name: "sync", Strict: lag.Check(o.Strict.MaxSyncLag), Detail: lag.Detail})
		p.Tasks = append(p.Tasks, Task{Name: "policy sync lag", Run: func(ctx context.Context) error { return lag.Run(ctx, o.Strict.MaxSyncLag/5) }})
	}
	p.guardEvaluationMemory()
	return nil
}

// guardEvaluationMemory stops long policy evaluations while the live heap
// is above half the Go memory limit: a deadline bounds an evaluation's
// time, not what a built-in allocates within it. Without a limit there is
// nothing to guard against.
func (p *Program) guardEvaluationMemory() {
	limit := debug.SetMemoryLimit(-1)
	if limit <= 0 || limit == math.MaxInt64 {
		return
	}
	threshold := uint64(limit / 2)
	p.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "qn_admission_policy_evaluations_stopped_for_memory_total",
		Help: "Policy evaluations stopped because the live heap passed half the Go memory limit while they ran (answered with the role's onError).",
	}, func() float64 { return float64(rego.StoppedForMemory()) }))
	p.Tasks = append(p.Tasks, Task{Name: "policy evaluation memory guard", Run: func(ctx context.Context) error {
		rego.GuardMemory(ctx, threshold)
		return nil
	}})
	p.Logger.Info("policy evaluations are stopped when the live heap passes half the memory limit", "thresholdBytes", threshold)
}

// buildDecisionLog opens the decision log.
func (p *Program) buildDecisionLog(context.Context) error {
	decisionLog, lines, closeDecisionLog, err := openDecisionLog(p.Options.DecisionLog, p.Options.DecisionLogFlushInterval)
	if err != nil {
		return err
	}
	p.closers = append(p.closers, func() {
		if err := closeDecisionLog(); err != nil {
			p.Logger.Error("the decision log could not be written", "decisionLog", p.Options.DecisionLog, "error", err.Error())
		}
	})
	p.DecisionLog, p.decisionLines = decisionLog, lines
	return nil
}

// buildShadow loads --shadow-policy-dir's candidate set, followed and
// hot-reloaded like the served one. Nothing about the candidate stops the
// server: a directory that does not exist yet (a git-sync sidecar still
// cloning) is waited for, a set that does not load is reported in
// /readyz?verbose and the log, and the shadow judges nothing until a good
// one lands. Its readiness line never fails, and strict health does not
// read it.
func (p *Program) buildShadow(ctx context.Context) error {
	o := p.Options
	if o.ShadowPolicyDir == "" {
		return nil
	}
	logger := p.Logger.With("policies", "shadow")
	candidate := policies.NewEngine(nil, policies.EngineOptions{Windows: p.Windows})
	p.servedActivity = activity.New()
	// The shadow judges when no request is being served and no task waits
	// for a CPU; without pressure information, on the first alone.
	var cpuQuiet func() bool
	if pressure, err := cpupressure.Open(); err != nil {
		logger.Info("no CPU pressure information: the shadow judges whenever no request is being served", "error", err.Error())
	} else {
		cpuQuiet = pressure.Quiet
		logger.Info("the shadow judges while no request is being served and no task waits for a CPU", "pressure", pressure.Path())
	}
	p.Shadow = shadow.New(candidate, shadow.Options{
		Served: p.Engine, Windows: p.Windows, Queue: o.ShadowQueue, CPU: o.ShadowCPU,
		Activity: p.servedActivity, CPUQuiet: cpuQuiet,
		Log: p.DecisionLog, Registry: p.Registry,
	})
	var source atomic.Pointer[policies.Source]
	open := func(ctx context.Context) error {
		s, err := policies.Open(policies.OpenOptions{
			Dir:    o.ShadowPolicyDir,
			Load:   o.LoadOptions(),
			Watch:  dirwatch.Options{PollInterval: o.PolicyPollInterval, Logger: logger},
			Logger: logger,
		})
		if err != nil {
			return err
		}
		source.Store(&s)
		if set, err := s.Load(ctx); err != nil {
			logger.Error("the shadow policy set does not load; requests are served and not shadowed until it does", "error", err.Error())
		} else {
			candidate.Swap(set)
			logger.Info("shadow policies loaded", "source", s.Name(), "revision", set.Revision, "roles", set.Roles.Names())
		}
		return nil
	}
	openErr := open(ctx)
	if openErr != nil {
		logger.Warn("waiting for the shadow policy directory", "error", openErr.Error())
	}
	p.Checks = append(p.Checks, health.Check{Name: "shadow", Detail: func() string {
		if s := source.Load(); s != nil {
			return p.Shadow.Status() + "; " + candidateSourceStatus(o.ShadowPolicyDir, (*s).ReloadState())
		}
		return p.Shadow.Status() + "; waiting for " + o.ShadowPolicyDir + " to exist"
	}})
	p.Tasks = append(p.Tasks,
		Task{Name: "shadow policy watcher", Run: func(ctx context.Context) error {
			for openErr != nil {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(o.PolicyPollInterval):
				}
				openErr = open(ctx)
			}
			return (*source.Load()).Run(ctx, candidate)
		}},
		Task{Name: "shadow evaluation", Run: p.Shadow.Run},
	)
	return nil
}

// candidateSourceStatus is the shadow check's word on the candidate's
// directory: when its set was loaded and, when the newest content does
// not load, why. Not "serving": the candidate serves nothing, and a
// reader of /readyz?verbose takes "serving" for the served set.
func candidateSourceStatus(dir string, st health.ReloadState) string {
	out := "candidate loaded from " + dir
	if !st.LoadedAt.IsZero() {
		out += " at " + st.LoadedAt.UTC().Format(time.RFC3339)
	}
	if st.Err != nil {
		out += fmt.Sprintf("; its newest content fails to load (since %s), so the candidate stays %s: %v",
			st.FailingSince.UTC().Format(time.RFC3339), st.Revision, st.Err)
	}
	return out
}

// buildHandler builds the admission handler.
func (p *Program) buildHandler(context.Context) error {
	// What the API server sends us, as the chart registered it: said in
	// the log and /readyz?verbose, so a reader knows which kinds the
	// policies are asked about (Validate parsed the flag already).
	additional, err := webhook.ParseAdditionalResources(p.Options.AdditionalResources)
	if err != nil {
		return fmt.Errorf("--additional-resources: %w", err)
	}
	registeredFor := webhook.RegisteredFor(additional)
	p.Logger.Info("registration", "registeredFor", registeredFor)
	p.Checks = append(p.Checks, health.Check{Name: "registration", Detail: func() string { return registeredFor }})
	// QuantumNodes are judged by the policy engine (and again by the
	// shadow set when there is one); HorizontalQNScalers by the PromQL
	// check of their queries (their webhook entry is separate,
	// failurePolicy Ignore: the CRD's own rules hold without it).
	var served webhook.Decider = p.Engine
	if p.Shadow != nil {
		served = shadow.Shadowed{Served: p.Engine, Shadow: p.Shadow}
	}
	// Answers their callers do not read are cut at their write deadline,
	// counted, and shown to strict health.
	stalls := &webhook.Stalls{}
	strict, detail := stalls.Check(p.Options.AnswerWriteTimeout, nil)
	p.Checks = append(p.Checks, health.Check{Name: "answers", Strict: strict, Detail: detail})
	p.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "qn_admission_answers_stalled_total",
		Help: "Answers their callers did not read within --answer-write-timeout; each connection was closed. They held no review slot.",
	}, func() float64 { return float64(stalls.Total()) }))
	p.Handler = webhook.NewHandler(webhook.Served(served), webhook.HandlerOptions{
		MaxRequestBytes:      p.Options.MaxRequestBytes,
		MaxRequestElements:   p.Options.MaxRequestElements,
		MaxConcurrentReviews: p.Options.MaxConcurrentReviews,
		RequestBodyTimeout:   p.Options.RequestBodyTimeout,
		MinRequestBodyRate:   p.Options.MinRequestBodyRate,
		AnswerWriteTimeout:   p.Options.AnswerWriteTimeout,
		Stalls:               stalls,
		Logger:               p.Logger,

		MaxRequestBytesInFlight: p.Options.MaxRequestBytesInFlight,
		DecisionLog:             p.DecisionLog,
		DecisionLines:           p.decisionLines,
		Metrics:                 webhook.NewMetrics(p.Registry),
		Answers:                 p.Answers,
		Tracer:                  p.Tracer,
		Activity:                p.servedActivity,
	})
	return nil
}

// openDecisionLog returns the logger decision lines go to, and the writer
// under its JSON handler: stdout for "-", else a file appended to; lines
// written together every flushInterval (see batchwrite for what a kill
// loses). close writes what is pending; it runs after the server has
// drained, so every answered request has its line.
func openDecisionLog(dest string, flushInterval time.Duration) (logger *slog.Logger, lines io.Writer, close func() error, err error) {
	var out io.Writer = os.Stdout
	closeFile := func() error { return nil }
	if dest != "" && dest != "-" {
		f, err := os.OpenFile(dest, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o640)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--decision-log %s: %w", dest, err)
		}
		out, closeFile = f, f.Close
	}
	grouped := batchwrite.New(out, flushInterval, decisionLogBatchBytes)
	return slog.New(slog.NewJSONHandler(grouped, nil)), grouped, func() error {
		return errors.Join(grouped.Close(), closeFile())
	}, nil
}

// decisionLogBatchBytes is the most decision-log bytes held before they
// are written, whatever the interval: about a hundred lines.
const decisionLogBatchBytes = 64 << 10

// buildCertificates loads the serving pair into a rotating file source,
// generating a self-signed pair first when asked: one serving code path.
func (p *Program) buildCertificates(context.Context) error {
	o := p.Options
	certFile, keyFile := o.TLSCertFile, o.TLSKeyFile
	if o.TLSSelfSigned {
		bundle, err := p.selfSigned()
		if err != nil {
			return err
		}
		certFile, keyFile = bundle.CertFile, bundle.KeyFile
	}
	source := certs.NewFileSource(certFile, keyFile, certs.WithPollInterval(o.CertPollInterval), certs.WithLogger(p.Logger))
	if err := source.Load(); err != nil {
		return err
	}
	tlsConfig, err := certs.ServerTLSConfig(source, o.ClientCAFile)
	if err != nil {
		return err
	}
	p.Certificates, p.TLSConfig = source, tlsConfig
	// A rotated pair that cannot be served keeps the previous one serving
	// and the replica ready (failing readiness on every replica over one
	// bad Secret would stop admission); the detail and the metrics say it.
	p.Checks = append(p.Checks, health.Check{Name: "certificate", Ready: source.Ready,
		Strict: health.CertificateCheck(source.Healthy, source.NotAfter, o.StrictCertMinValidity, nil), Detail: func() string {
			if err := source.Healthy(); err != nil {
				return "WARNING: " + err.Error()
			}
			return "serving, expires " + source.NotAfter().UTC().Format(time.RFC3339)
		}})
	p.Registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "qn_certificate_reload_errors_total",
			Help: "Reads of the serving certificate files that failed (unreadable, unparsable, mismatched pair); the previous pair keeps serving.",
		}, func() float64 { return float64(source.ReloadErrors()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "qn_certificate_expiry_timestamp_seconds",
			Help: "When the serving certificate being served expires, as a Unix time.",
		}, func() float64 { return float64(source.NotAfter().Unix()) }),
	)
	p.Tasks = append(p.Tasks, Task{Name: "certificate watcher", Run: source.Start})
	return nil
}

// selfSigned generates (or reuses) a CA and serving pair for local runs and
// writes the CA bundle where --ca-bundle-file asks.
func (p *Program) selfSigned() (*certs.SelfSignedBundle, error) {
	o := p.Options
	var dns []string
	var ips []net.IP
	for _, h := range o.TLSSelfSignedHosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}
	bundle, err := certs.SelfSigned(certs.SelfSignedOptions{Dir: o.TLSSelfSignedDir, DNSNames: dns, IPAddresses: ips})
	if err != nil {
		return nil, fmt.Errorf("self-signed certificate in %s: %w", o.TLSSelfSignedDir, err)
	}
	caFile := bundle.CAFile
	if o.CABundleFile != "" {
		if err := bundle.WriteCABundle(o.CABundleFile); err != nil {
			return nil, err
		}
		caFile = o.CABundleFile
	}
	p.Logger.Info("self-signed serving certificate ready", "caBundle", caFile, "hosts", o.TLSSelfSignedHosts, "reused", bundle.Reused)
	return bundle, nil
}

// listen binds the admission and probe addresses; the last step of Build,
// so a program that cannot serve never holds a port.
func (p *Program) listen(context.Context) error {
	o := p.Options
	admissionLn, err := net.Listen("tcp", o.ListenAddress)
	if err != nil {
		return fmt.Errorf("listen for admission requests on %s: %w", o.ListenAddress, err)
	}
	p.closers = append(p.closers, func() { admissionLn.Close() })
	limit, fdLimit := connectionLimit(o.MaxConnections)
	if limit < o.MaxConnections {
		p.Logger.Warn("admission connections capped below --max-connections to keep descriptors for probes and reloads",
			"maxConnections", limit, "requested", o.MaxConnections, "fileDescriptorLimit", fdLimit)
	}
	p.MaxConnections = limit
	probeLn, err := net.Listen("tcp", o.ProbeAddress)
	if err != nil {
		return fmt.Errorf("listen for probes on %s: %w", o.ProbeAddress, err)
	}
	p.closers = append(p.closers, func() { probeLn.Close() })
	p.AdmissionListener, p.ProbeListener = admissionLn, probeLn
	return nil
}
