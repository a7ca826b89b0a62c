package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quantumnode/qn-admission/internal/health"
)

// Server serves the admission handler over TLS and the probes over plain
// HTTP, each on a listener of its own so that probes never queue behind
// admission traffic. It is transport only: what the handler decides, where
// the certificate comes from and what the checks look at is the caller's.
type Server struct {
	// Handler answers admission requests (NewHandler).
	Handler http.Handler
	// TLSConfig presents the serving certificate.
	TLSConfig *tls.Config
	// Registry is served at /metrics.
	Registry *prometheus.Registry
	// Checks make up /readyz and strict health; Serve adds one that fails
	// readiness while draining.
	Checks []health.Check
	// Profiling serves net/http/pprof on the probe listener.
	Profiling bool
	// GracePeriod bounds how long in-flight requests may drain.
	GracePeriod time.Duration
	// MaxConnections caps open admission connections (0: no cap). At the
	// cap an idle or silent connection is closed to admit a new one; only
	// connections serving a request are kept.
	MaxConnections int
	// HandshakeTimeout is how long a new connection has to finish its TLS
	// handshake and send its first request's headers. Default
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// Logger receives the serving, draining and stopped lines.
	Logger *slog.Logger
}

// Serve serves admission requests on admissionLn and probes on probeLn
// until ctx ends or a server fails. Then it stops advertising readiness and
// drains in-flight requests for at most GracePeriod. It closes both
// listeners.
func (s *Server) Serve(ctx context.Context, admissionLn, probeLn net.Listener) error {
	checks := append([]health.Check(nil), s.Checks...)
	var pool *connPool
	if s.MaxConnections > 0 {
		var reg prometheus.Registerer
		if s.Registry != nil {
			reg = s.Registry
		}
		pool = newConnPool(admissionLn, s.MaxConnections, s.HandshakeTimeout, reg)
		admissionLn = pool
		strict, detail := pool.saturationCheck(time.Now)
		checks = append(checks, health.Check{Name: "connections", Strict: func(context.Context) error { return strict() }, Detail: detail})
	}
	var draining atomic.Bool
	checks = append(checks, health.Check{Name: "shutdown", Ready: func() error {
		if draining.Load() {
			return errors.New("draining in-flight requests")
		}
		return nil
	}})
	// HTTP/1.1 only: HTTP/2 adds attack surface (rapid reset) and the
	// apiserver's webhook client is served well by keep-alive HTTP/1.1.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	// While the process stops, every answer says Connection: close, so a
	// caller's kept-alive connection ends cleanly with its next answer.
	var leaving atomic.Bool
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if leaving.Load() {
			w.Header().Set("Connection", "close")
		}
		s.Handler.ServeHTTP(w, r)
	})
	var open atomic.Int64
	admission := &http.Server{
		Handler:           handler,
		TLSConfig:         s.TLSConfig,
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    MaxHeaderBytes,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          newThrottledErrorLog(s.Logger, serverLogBurst, serverLogInterval),
		// The connection rides in each request's context, so a review whose
		// caller reset it is not judged (callerGone).
		ConnContext: withConn,
	}
	admission.ConnState = func(c net.Conn, state http.ConnState) {
		switch state {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
		if pool != nil {
			pool.connState(c, state)
		}
	}
	probes := health.NewHandler(health.Options{Registerer: s.Registry, Gatherer: s.Registry, Checks: checks, Profiling: s.Profiling})
	probe := &http.Server{Handler: probes, ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: MaxHeaderBytes}

	errs := make(chan error, 2)
	// TLS is served here rather than by ServeTLS so each connection can
	// be wrapped: net/http's plain-text refusals of requests it cannot
	// read leave as AdmissionReviews (unreadable.go).
	tlsConfig := s.TLSConfig.Clone()
	if !slices.Contains(tlsConfig.NextProtos, "http/1.1") {
		tlsConfig.NextProtos = append(tlsConfig.NextProtos, "http/1.1")
	}
	answering := &answeringListener{Listener: tls.NewListener(admissionLn, tlsConfig), errorLog: admission.ErrorLog}
	go func() { errs <- serveErr("admission", admission.Serve(answering)) }()
	go func() { errs <- serveErr("probe", probe.Serve(probeLn)) }()
	s.Logger.Info("serving admission webhooks",
		"address", admissionLn.Addr().String(), "paths", []string{pathValidate, pathMutate},
		"probeAddress", probeLn.Addr().String())

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errs:
	}
	// Stop advertising readiness first, then let callers leave, then drain
	// what is in flight.
	draining.Store(true)
	s.Logger.Info("shutting down: draining in-flight admission requests", "gracePeriod", s.GracePeriod.String())
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.GracePeriod)
	defer cancel()
	leaving.Store(true)
	waitForCallersToLeave(shutdownCtx, &open, callersLeaveWait(s.GracePeriod))
	if err := admission.Shutdown(shutdownCtx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("drain admission requests: %w", err))
	}
	if err := probe.Shutdown(shutdownCtx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("stop probe server: %w", err))
	}
	s.Logger.Info("stopped")
	return runErr
}

// callersLeaveWait is how long, once the process is told to stop, answers
// say Connection: close before the connections still open are closed:
// half the grace period, at most 5 s. Closing a kept-alive connection
// that is idle races a caller that sends on it at that moment: the API
// server's POST then fails with EOF and is not retried, a failed write
// with failurePolicy Fail. A caller whose connection ended with an
// answer's Connection: close dials again, to a replica still serving.
func callersLeaveWait(grace time.Duration) time.Duration {
	return min(grace/2, 5*time.Second)
}

// waitForCallersToLeave returns once no admission connection is open, wait
// has passed, or ctx ends.
func waitForCallersToLeave(ctx context.Context, open *atomic.Int64, wait time.Duration) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for open.Load() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

// MaxHeaderBytes caps the request headers the servers read (431 above).
// The API server sends a few hundred bytes; Go's default of 1 MiB would let
// each of a thousand slow connections hold a megabyte.
const MaxHeaderBytes = 64 << 10

func serveErr(name string, err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("%s server: %w", name, err)
}
