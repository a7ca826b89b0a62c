// Package app is the composition root of qn-controller: its options, and
// the wiring that builds the controller-runtime manager, the policy source
// the audit judges with, each reconciler and the probe server (Build), then
// runs them until the context ends (Program.Start).
//
// It is the only place that knows every part, as cmd/qn-webhook/app is for
// the webhook: controller/quantumnode reconciles QuantumNodes (running the
// audit's, self-healing's and the rollout's steps), controller/roletable
// keeps the role table's parameters, controller/scaler scales, policies/
// decides, internal/health answers probes. cmd/qn-controller's main parses the flags and calls Run;
// the chart tests parse the chart's arguments with the same Options. No
// product package imports it.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/config/crd"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/controller/audit"
	"github.com/quantumnode/qn-admission/controller/quantumnode"
	"github.com/quantumnode/qn-admission/controller/roletable"
	"github.com/quantumnode/qn-admission/internal/dirwatch"
	"github.com/quantumnode/qn-admission/internal/health"
	"github.com/quantumnode/qn-admission/policies"
)

// Program is qn-controller assembled, not yet started: Build returns it,
// Start runs it. A new concern (a reconciler, a check, a policy consumer)
// is one more step in Build that fills these fields and adds its runnables
// to the Manager.
type Program struct {
	Options *Options
	// Logger is the process logger; controller-runtime and client-go log
	// through it too.
	Logger *slog.Logger
	// Config reaches the API server as the controller's identity.
	Config  *rest.Config
	Manager ctrl.Manager
	// Policies is the source the audit judges with and Engine serves it;
	// both nil when --audit=false.
	Policies policies.Source
	Engine   *policies.Engine
	// Checks make up /readyz and strict health, in order.
	Checks []health.Check
	// Answers counts reconciles and failed ones for strict health.
	Answers *health.Answers
}

// Run builds qn-controller from o and runs it until ctx ends and the
// manager has shut down: reconciles drained, the Lease released. Logs go
// to logs.
func Run(ctx context.Context, o *Options, getenv func(string) string, logs io.Writer) error {
	p, err := Build(ctx, o, getenv, logs)
	if err != nil {
		return err
	}
	return p.Start(ctx)
}

// Build validates o (getenv is the one NewOptions was given), connects to
// the API server, checks that it serves QuantumNodes, loads the policies
// and sets up every reconciler and the probes. Nothing runs yet.
func Build(ctx context.Context, o *Options, getenv func(string) string, logs io.Writer) (*Program, error) {
	if err := o.Validate(getenv); err != nil {
		return nil, err
	}
	p := &Program{Options: o, Logger: slog.New(o.logHandler(logs)), Answers: &health.Answers{}}
	logger := logr.FromSlogHandler(p.Logger.Handler())
	ctrl.SetLogger(logger)
	klog.SetLogger(logger) // client-go's leader election logs through klog
	for _, step := range []func(context.Context) error{p.buildManager, p.requireCRD, p.buildPolicies, p.buildRoleTable, p.buildQuantumNodes, p.buildScalers, p.buildProbes} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Start runs the manager until ctx ends.
func (p *Program) Start(ctx context.Context) error {
	o := p.Options
	p.Logger.Info("starting qn-controller", "apiserver", p.Config.Host, "leaderElect", o.LeaderElect,
		"metrics", o.MetricsAddress, "probes", o.ProbeAddress, "audit", o.Audit, "prometheus", o.Scalers.PrometheusURL)
	if err := p.Manager.Start(ctx); err != nil {
		return fmt.Errorf("run the manager: %w", err)
	}
	p.Logger.Info("qn-controller stopped")
	return nil
}

// withSyncPeriod sets the informers' resync period (--sync-period).
func withSyncPeriod(c cache.Options, d time.Duration) cache.Options {
	c.SyncPeriod = &d
	return c
}

// buildManager connects to the API server and creates the manager: the
// shared informer cache, leader election, and the metrics server.
func (p *Program) buildManager(ctx context.Context) error {
	o := p.Options
	cfg, err := o.RESTConfig()
	if err != nil {
		return err
	}
	scheme, err := controller.NewScheme()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Cache:   withSyncPeriod(controller.CacheOptions(), o.SyncPeriod),
		Metrics: metricsserver.Options{BindAddress: o.MetricsAddress},
		// The probes are ours (internal/health, buildProbes), so that
		// both binaries answer /healthz?strict=true alike.
		HealthProbeBindAddress:  "0",
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// The process exits right after the manager stops, so handing the
		// Lease back at once is safe and spares the next leader a wait.
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &o.ShutdownTimeout,
	})
	if err != nil {
		return fmt.Errorf("create the manager for %s: %w", cfg.Host, err)
	}
	p.Config, p.Manager = cfg, mgr
	// Ready once the informers have synced: before that a replica would
	// compute status from an empty cache.
	p.Checks = append(p.Checks, health.Check{Name: "informers", Ready: func() error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("the informer cache has not synced yet")
		}
		return nil
	}}, health.Check{
		Name: "errors", Strict: p.Answers.RatioCheck(o.Strict.MaxErrorRatio), Detail: p.Answers.Detail,
	})
	return p.buildSyncLag()
}

// buildSyncLag measures the informers' lag behind the API server on every
// replica (--strict-max-sync-lag): a strict check and
// qn_controller_sync_lag_seconds.
func (p *Program) buildSyncLag() error {
	o := p.Options
	ns := o.LeaderElectionNamespace
	if ns == "" {
		ns = podNamespace()
	}
	if o.Strict.MaxSyncLag == 0 || ns == "" {
		return nil // off, or outside a Pod without a namespace to write in
	}
	hostname, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("sync lag: %w", err)
	}
	lag, err := newSyncLag(p.Config, ns, hostname, o.Strict.MaxSyncLag/5, clock.RealClock{})
	if err != nil {
		return err
	}
	if err := ctrlmetrics.Registry.Register(syncLagMetric(lag)); err != nil {
		return fmt.Errorf("register qn_controller_sync_lag_seconds: %w", err)
	}
	p.Checks = append(p.Checks, health.Check{Name: "sync", Strict: lag.Check(o.Strict.MaxSyncLag), Detail: lag.Detail})
	return p.Manager.Add(everyReplica(lag.Run))
}

// requireCRD fails at once when the API server does not serve
// QuantumNodes or QuantumNodeHealthPolicies (a chart upgrade does not
// upgrade crds/): the manager would otherwise wait minutes for a cache
// that cannot sync.
func (p *Program) requireCRD(context.Context) error {
	for _, want := range []struct{ kind, resource, file string }{
		{qnv1alpha1.Kind, qnv1alpha1.Resource, crd.FileName},
		{qnv1alpha1.HealthPolicyKind, qnv1alpha1.HealthPolicyResource, crd.HealthPolicyFileName},
	} {
		gvk := qnv1alpha1.GroupVersion.WithKind(want.kind)
		if _, err := p.Manager.GetRESTMapper().RESTMapping(gvk.GroupKind(), qnv1alpha1.Version); err != nil {
			if meta.IsNoMatchError(err) {
				return fmt.Errorf("the API server at %s does not serve %s: install the CRD first (kubectl apply -f config/crd/%s)",
					p.Config.Host, qnv1alpha1.GroupResource(want.resource), want.file)
			}
			return fmt.Errorf("look up %s on %s: %w", gvk, p.Config.Host, err)
		}
	}
	return nil
}

// buildPolicies loads the policy set the audit judges with, from the same
// source qn-webhook serves (the bundled set, or --policy-dir followed and
// hot-reloaded, the last good set kept), and keeps it current on every
// replica, so a new leader audits with the newest set at once.
func (p *Program) buildPolicies(ctx context.Context) error {
	o := p.Options
	if !o.Audit && o.RoleTable == "" {
		return nil
	}
	metrics := policies.NewMetrics(ctrlmetrics.Registry)
	source, err := policies.Open(policies.OpenOptions{
		Dir:     o.PolicyDir,
		Load:    policies.LoadOptions{EvalTimeout: o.PolicyEvalTimeout},
		Watch:   dirwatch.Options{PollInterval: o.PolicyPollInterval, Logger: p.Logger},
		Metrics: metrics,
		Logger:  p.Logger,
	})
	if err != nil {
		return fmt.Errorf("--policy-dir: %w", err)
	}
	set, err := source.Load(ctx)
	if err != nil {
		return err
	}
	// The background audit's policies read the inventory from the
	// controller's own cache of QuantumNodes and Nodes.
	inv := &audit.CacheInventory{Reader: p.Manager.GetCache()}
	engine := policies.NewEngine(set, policies.EngineOptions{Metrics: metrics, Inventory: inv})
	inv.Engine = engine
	if err := p.Manager.Add(everyReplica(func(ctx context.Context) error { return source.Run(ctx, engine) })); err != nil {
		return fmt.Errorf("add the policy watcher: %w", err)
	}
	p.Policies, p.Engine = source, engine
	p.Checks = append(p.Checks, health.Check{
		Name: "policies", Detail: source.Status, Strict: health.PoliciesCheck(source.ReloadState, o.Strict, nil),
	})
	return nil
}

// buildRoleTable keeps the ValidatingAdmissionPolicy's parameters in step
// with the served policies, on the leader.
func (p *Program) buildRoleTable(context.Context) error {
	o := p.Options
	if o.RoleTable == "" {
		return nil
	}
	s := &roletable.Sync{
		Name: o.RoleTable, Engine: p.Engine, Source: p.Policies.Name(), Client: p.Manager.GetClient(), Reader: p.Manager.GetAPIReader(),
		PollInterval: o.PolicyPollInterval, Resync: o.RoleTableResync, Logger: p.Manager.GetLogger().WithName("roletable"),
	}
	if ns, name, ok := strings.Cut(o.RoleTableHelmRelease, "/"); ok {
		s.Labels, s.Annotations = roletable.HelmOwnership(ns, name)
	}
	if err := p.Manager.Add(s); err != nil {
		return fmt.Errorf("add the role table sync: %w", err)
	}
	return nil
}

// buildQuantumNodes sets up the QuantumNode reconciler: the owned Service,
// status, and (with the policies) the background audit.
func (p *Program) buildQuantumNodes(ctx context.Context) error {
	o := p.Options
	r := &quantumnode.Reconciler{
		MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		QuiescenceWindow:        o.QuiescenceWindow,
		MaxRequeueDelay:         o.MaxRequeueDelay,
		ProbeWorkers:            o.ProbeWorkers,
		Answers:                 p.Answers,
	}
	if p.Engine != nil && o.Audit {
		r.Policies = p.Engine
		r.Audit = &audit.Options{Interval: o.AuditInterval, Rate: o.AuditRate, Reports: o.PolicyReports}
	}
	return r.SetupWithManager(ctx, p.Manager)
}

// buildProbes serves /healthz and /readyz (and their strict form) from
// every check the steps before added, on every replica.
func (p *Program) buildProbes(context.Context) error {
	o := p.Options
	if o.ProbeAddress == "0" {
		return nil
	}
	probes := health.NewHandler(health.Options{Registerer: ctrlmetrics.Registry, Checks: p.Checks, Profiling: o.Profiling})
	if err := p.Manager.Add(everyReplica(func(ctx context.Context) error { return serveProbes(ctx, o.ProbeAddress, probes) })); err != nil {
		return fmt.Errorf("add the probe server: %w", err)
	}
	return nil
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
