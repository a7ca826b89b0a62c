package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/quantumnode/qn-admission/certs"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/dirwatch"
	"github.com/quantumnode/qn-admission/rego"
)

// Run loads the policies and the serving certificate, serves the admission
// webhooks and the probes until ctx ends, then drains in-flight requests.
// Anything that prevents serving correctly is an error before listening.
func Run(ctx context.Context, o *Options, logger *slog.Logger) error {
	if err := o.Validate(); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	policyMetrics := policies.NewMetrics(reg)
	loadOpts := policies.LoadOptions{EvalTimeout: o.PolicyEvalTimeout, AllowNetwork: o.AllowNetworkBuiltins}
	var reloader *policies.Reloader
	if o.PolicyDir != "" {
		reloader = policies.NewReloader(o.PolicyDir, policies.ReloaderOptions{
			Load:    loadOpts,
			Watch:   dirwatch.Options{PollInterval: o.PolicyPollInterval, Logger: logger},
			Metrics: policyMetrics,
			Logger:  logger,
		})
	}
	set, err := loadPolicies(ctx, o, reloader, loadOpts)
	if err != nil {
		return err
	}
	policyMetrics.Reloaded(set.Revision, nil)
	logger.Info("policies loaded", "source", policySource(o), "revision", set.Revision, "roles", set.Roles.Names())
	engine := policies.NewEngine(set, policies.EngineOptions{Metrics: policyMetrics})
	decisionLog, closeDecisionLog, err := openDecisionLog(o.DecisionLog)
	if err != nil {
		return err
	}
	defer closeDecisionLog()

	source, err := certificateSource(o, logger)
	if err != nil {
		return err
	}
	tlsConfig, err := certs.ServerTLSConfig(source, o.ClientCAFile)
	if err != nil {
		return err
	}

	handler := NewHandler(engine, HandlerOptions{
		MaxRequestBytes: o.MaxRequestBytes,
		Logger:          logger,
		DecisionLog:     decisionLog,
		Metrics:         NewMetrics(reg),
	})

	admissionLn, err := net.Listen("tcp", o.ListenAddress)
	if err != nil {
		return fmt.Errorf("listen for admission requests on %s: %w", o.ListenAddress, err)
	}
	probeLn, err := net.Listen("tcp", o.ProbeAddress)
	if err != nil {
		admissionLn.Close()
		return fmt.Errorf("listen for probes on %s: %w", o.ProbeAddress, err)
	}

	var shuttingDown atomic.Bool
	probes := NewProbeHandler(reg, []Check{
		// A failed reload does not make us unready: the last good set keeps
		// serving, and failing every replica's probe would lock writes out.
		{Name: "policies", Check: func() error { return nil }, Detail: func() string { return policyStatus(engine, reloader) }},
		{Name: "certificate", Check: source.Healthy},
		{Name: "shutdown", Check: func() error {
			if shuttingDown.Load() {
				return errors.New("draining in-flight requests")
			}
			return nil
		}},
	})

	// HTTP/1.1 only: HTTP/2 adds attack surface (rapid reset) and the
	// apiserver's webhook client is served well by keep-alive HTTP/1.1.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	admission := &http.Server{
		Handler:           handler,
		TLSConfig:         tlsConfig,
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	probe := &http.Server{Handler: probes, ReadHeaderTimeout: 5 * time.Second}

	certCtx, stopCerts := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCerts()
	if reloader != nil {
		go func() {
			if err := reloader.Run(certCtx, engine); err != nil {
				logger.Error("policy directory watcher stopped", "error", err)
			}
		}()
	}
	go func() {
		if err := source.Start(certCtx); err != nil {
			logger.Error("certificate watcher stopped", "error", err)
		}
	}()

	errs := make(chan error, 2)
	go func() { errs <- serveErr("admission", admission.ServeTLS(admissionLn, "", "")) }()
	go func() { errs <- serveErr("probe", probe.Serve(probeLn)) }()
	logger.Info("serving admission webhooks",
		"address", admissionLn.Addr().String(), "paths", []string{pathValidate, pathMutate},
		"probeAddress", probeLn.Addr().String())

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errs:
	}
	// Stop advertising readiness first, then drain what is in flight.
	shuttingDown.Store(true)
	logger.Info("shutting down: draining in-flight admission requests", "gracePeriod", o.ShutdownGracePeriod.String())
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.ShutdownGracePeriod)
	defer cancel()
	if err := admission.Shutdown(shutdownCtx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("drain admission requests: %w", err))
	}
	if err := probe.Shutdown(shutdownCtx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("stop probe server: %w", err))
	}
	logger.Info("stopped")
	return runErr
}

func serveErr(name string, err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("%s server: %w", name, err)
}

func policySource(o *Options) string {
	if o.PolicyDir == "" {
		return "bundled"
	}
	return o.PolicyDir
}

// loadPolicies loads the first policy set. Unlike a reload, a broken set
// at start is an error: there is no last good set to keep serving.
func loadPolicies(ctx context.Context, o *Options, reloader *policies.Reloader, opts policies.LoadOptions) (*policies.Set, error) {
	if reloader == nil {
		set, err := policies.Load(ctx, rego.Bundled(), opts)
		if err != nil {
			return nil, fmt.Errorf("load bundled policies: %w", err)
		}
		return set, nil
	}
	if _, err := os.Stat(filepath.Join(o.PolicyDir, policies.RolesFile)); err != nil {
		return nil, fmt.Errorf("--policy-dir %s: %w", o.PolicyDir, err)
	}
	return reloader.Load(ctx)
}

func policyStatus(engine *policies.Engine, reloader *policies.Reloader) string {
	if reloader == nil {
		return "serving bundled policies " + engine.Current().Revision
	}
	revision, lastErr, at := reloader.Status()
	if lastErr != nil {
		return fmt.Sprintf("serving %s; the last reload (%s) failed and was not applied: %v", revision, at.UTC().Format(time.RFC3339), lastErr)
	}
	return "serving " + revision
}

// openDecisionLog returns the logger decision lines go to.
func openDecisionLog(dest string) (*slog.Logger, func(), error) {
	if dest == "" || dest == "-" {
		return slog.New(slog.NewJSONHandler(os.Stdout, nil)), func() {}, nil
	}
	f, err := os.OpenFile(dest, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o640)
	if err != nil {
		return nil, nil, fmt.Errorf("--decision-log %s: %w", dest, err)
	}
	return slog.New(slog.NewJSONHandler(f, nil)), func() { f.Close() }, nil
}

// certificateSource returns the rotating file source of the serving pair,
// generating a self-signed pair first when asked: one serving code path.
func certificateSource(o *Options, logger *slog.Logger) (*certs.FileSource, error) {
	certFile, keyFile := o.TLSCertFile, o.TLSKeyFile
	if o.TLSSelfSigned {
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
		logger.Info("self-signed serving certificate ready", "caBundle", caFile, "hosts", o.TLSSelfSignedHosts, "reused", bundle.Reused)
		certFile, keyFile = bundle.CertFile, bundle.KeyFile
	}
	source := certs.NewFileSource(certFile, keyFile, certs.WithPollInterval(o.CertPollInterval), certs.WithLogger(logger))
	if err := source.Load(); err != nil {
		return nil, err
	}
	return source, nil
}
