// Command qn-controller reconciles QuantumNodes: it keeps the Service of
// each one in its declared shape and its status true to the cluster's
// Nodes. See docs/controller.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/config/crd"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/internal/dirwatch"
	"github.com/quantumnode/qn-admission/internal/health"
	"github.com/quantumnode/qn-admission/policies"
)

func main() {
	opts := NewOptions(os.Getenv)
	fs := pflag.NewFlagSet("qn-controller", pflag.ContinueOnError)
	opts.AddFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if err := opts.Validate(os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "qn-controller:", err)
		os.Exit(2)
	}
	// SIGTERM or SIGINT cancels the context; a second one exits at once.
	if err := run(ctrl.SetupSignalHandler(), opts, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "qn-controller:", err)
		os.Exit(1)
	}
}

// run starts the manager and blocks until ctx ends and the manager has
// shut down: reconciles drained, the Lease released.
func run(ctx context.Context, opts *Options, logs io.Writer) error {
	logger := opts.Logger(logs)
	ctrl.SetLogger(logger)
	klog.SetLogger(logger) // client-go's leader election logs through klog

	cfg, err := opts.RESTConfig()
	if err != nil {
		return err
	}
	scheme, err := controller.NewScheme()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Cache:   controller.CacheOptions(),
		Metrics: metricsserver.Options{BindAddress: opts.MetricsAddress},
		// The probes are ours (internal/health, served below), so that
		// both binaries answer /healthz?strict=true alike.
		HealthProbeBindAddress:  "0",
		LeaderElection:          opts.LeaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		// The process exits right after the manager stops, so handing the
		// Lease back at once is safe and spares the next leader a wait.
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &opts.ShutdownTimeout,
	})
	if err != nil {
		return fmt.Errorf("create the manager for %s: %w", cfg.Host, err)
	}
	// Without the CRD the manager would wait minutes for a cache that
	// cannot sync; say what is missing instead.
	if _, err := mgr.GetRESTMapper().RESTMapping(qnv1alpha1.GroupVersionKind.GroupKind(), qnv1alpha1.Version); err != nil {
		if meta.IsNoMatchError(err) {
			return fmt.Errorf("the API server at %s does not serve %s: install the CRD first (kubectl apply -f config/crd/%s)",
				cfg.Host, qnv1alpha1.GroupVersionResource.GroupResource(), crd.FileName)
		}
		return fmt.Errorf("look up %s on %s: %w", qnv1alpha1.GroupVersionKind, cfg.Host, err)
	}
	r := &controller.Reconciler{
		MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
		QuiescenceWindow:        opts.QuiescenceWindow,
		MaxRequeueDelay:         opts.MaxRequeueDelay,
	}
	r.Answers = &health.Answers{}
	checks := []health.Check{{
		// Ready once the informers have synced: before that a replica
		// would compute status from an empty cache.
		Name: "informers",
		Ready: func() error {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if !mgr.GetCache().WaitForCacheSync(ctx) {
				return errors.New("the informer cache has not synced yet")
			}
			return nil
		},
	}, {
		Name: "errors", Strict: r.Answers.RatioCheck(opts.Strict.MaxErrorRatio), Detail: r.Answers.Detail,
	}}
	if opts.Audit {
		engine, source, err := startPolicies(ctx, mgr, opts, logs)
		if err != nil {
			return err
		}
		check := health.Check{Name: "policies", Detail: source.Status}
		if reloader, ok := source.(*policies.Reloader); ok {
			check.Strict = health.PoliciesCheck(reloader.ReloadState, opts.Strict, nil)
		}
		checks = append(checks, check)
		r.Policies = engine
		r.Audit = &controller.AuditOptions{Interval: opts.AuditInterval, Rate: opts.AuditRate, Reports: opts.PolicyReports}
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if opts.ProbeAddress != "0" {
		probes := health.NewHandler(health.Options{Registerer: ctrlmetrics.Registry, Checks: checks, Profiling: opts.Profiling})
		if err := mgr.Add(everyReplica(func(ctx context.Context) error { return serveProbes(ctx, opts.ProbeAddress, probes) })); err != nil {
			return fmt.Errorf("add the probe server: %w", err)
		}
	}

	logger.Info("starting qn-controller", "apiserver", cfg.Host, "leaderElect", opts.LeaderElect,
		"metrics", opts.MetricsAddress, "probes", opts.ProbeAddress, "audit", opts.Audit)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("run the manager: %w", err)
	}
	logger.Info("qn-controller stopped")
	return nil
}

// startPolicies loads the policy set the audit judges with, from the same
// source qn-webhook serves (the bundled set, or --policy-dir followed and
// hot-reloaded, the last good set kept), and keeps it current on every
// replica, so a new leader audits with the newest set at once.
func startPolicies(ctx context.Context, mgr ctrl.Manager, opts *Options, logs io.Writer) (*policies.Engine, policies.Source, error) {
	level, _ := opts.level() // checked by Validate
	handlerOpts := &slog.HandlerOptions{Level: level}
	slogger := slog.New(slog.NewJSONHandler(logs, handlerOpts))
	if opts.LogFormat == "text" {
		slogger = slog.New(slog.NewTextHandler(logs, handlerOpts))
	}
	metrics := policies.NewMetrics(ctrlmetrics.Registry)
	loadOpts := policies.LoadOptions{EvalTimeout: opts.PolicyEvalTimeout}
	source := policies.Bundled(loadOpts)
	if opts.PolicyDir != "" {
		if _, err := os.Stat(filepath.Join(opts.PolicyDir, policies.RolesFile)); err != nil {
			return nil, nil, fmt.Errorf("--policy-dir %s: %w", opts.PolicyDir, err)
		}
		source = policies.NewReloader(opts.PolicyDir, policies.ReloaderOptions{
			Load: loadOpts, Watch: dirwatch.Options{PollInterval: opts.PolicyPollInterval, Logger: slogger},
			Metrics: metrics, Logger: slogger,
		})
	}
	set, err := source.Load(ctx)
	if err != nil {
		return nil, nil, err
	}
	metrics.Reloaded(set.Revision, nil)
	engine := policies.NewEngine(set, policies.EngineOptions{Metrics: metrics})
	if err := mgr.Add(everyReplica(func(ctx context.Context) error { return source.Run(ctx, engine) })); err != nil {
		return nil, nil, fmt.Errorf("add the policy watcher: %w", err)
	}
	return engine, source, nil
}

// serveProbes serves the probe handler on address until ctx ends. Unlike
// admission traffic there is nothing to drain: a probe is retried.
func serveProbes(ctx context.Context, address string, h http.Handler) error {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("listen for probes on %s: %w", address, err)
	}
	server := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: 64 << 10}
	stop := context.AfterFunc(ctx, func() { server.Close() })
	defer stop()
	if err := server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("probe server on %s: %w", address, err)
	}
	return nil
}

// everyReplica is a manager Runnable that runs on every replica, not only
// the leader.
type everyReplica func(context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }

func (everyReplica) NeedLeaderElection() bool { return false }
