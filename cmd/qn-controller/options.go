package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options configure qn-controller. One struct, bound to flags by AddFlags;
// no package-level flag globals.
type Options struct {
	// Kubeconfig is the kubeconfig file; empty follows $KUBECONFIG,
	// ~/.kube/config, then the Pod's service account.
	Kubeconfig string
	// MetricsAddress serves /metrics over plain HTTP; "0" turns it off.
	MetricsAddress string
	// ProbeAddress serves /healthz and /readyz; "0" turns it off.
	ProbeAddress string
	// LeaderElect makes replicas take turns through a Lease, so that one
	// reconciles at a time. On by default only inside a cluster: a local
	// run should not take a Lease in someone's cluster unless asked.
	LeaderElect bool
	// LeaderElectionNamespace holds the Lease; inside a cluster it
	// defaults to the Pod's namespace.
	LeaderElectionNamespace string
	// MaxConcurrentReconciles bounds how many QuantumNodes reconcile at once.
	MaxConcurrentReconciles int
	// ShutdownTimeout bounds how long running reconciles may finish after
	// SIGTERM before the process exits anyway.
	ShutdownTimeout time.Duration
	// LogFormat is json or text.
	LogFormat string
	// LogLevel is the lowest level logged: debug, info, warn or error.
	LogLevel string
}

// LeaderElectionID names the Lease the replicas compete for.
const LeaderElectionID = "qn-controller.qn.dev"

// NewOptions returns the defaults. getenv is os.Getenv, passed in so that
// tests can say whether the process runs in a Pod.
func NewOptions(getenv func(string) string) *Options {
	return &Options{
		MetricsAddress:          ":8082",
		ProbeAddress:            ":8081",
		LeaderElect:             inCluster(getenv),
		MaxConcurrentReconciles: 2,
		ShutdownTimeout:         30 * time.Second,
		LogFormat:               "json",
		LogLevel:                "info",
	}
}

// inCluster reports whether the process runs in a Pod: the kubelet sets
// KUBERNETES_SERVICE_HOST in every container.
func inCluster(getenv func(string) string) bool {
	return getenv("KUBERNETES_SERVICE_HOST") != ""
}

// AddFlags binds the options to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig file; empty uses $KUBECONFIG, ~/.kube/config, then the in-cluster service account.")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress, `Address of /metrics (plain HTTP); "0" disables it.`)
	fs.StringVar(&o.ProbeAddress, "health-probe-bind-address", o.ProbeAddress, `Address of /healthz and /readyz; "0" disables them.`)
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Take turns with other replicas through a Lease. Defaults to true in a Pod, false elsewhere.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "Namespace of the leader-election Lease; in a Pod, defaults to the Pod's namespace.")
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", o.MaxConcurrentReconciles, "How many QuantumNodes may reconcile at once.")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "How long running reconciles may finish after SIGTERM.")
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "Log format: json or text.")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "Lowest level logged: debug, info, warn or error.")
}

// Validate reports the first option that cannot work, as a sentence.
// getenv is the one NewOptions was given.
func (o *Options) Validate(getenv func(string) string) error {
	switch {
	case o.LeaderElect && o.LeaderElectionNamespace == "" && !inCluster(getenv):
		return fmt.Errorf("--leader-elect outside a cluster needs --leader-election-namespace (or run with --leader-elect=false)")
	case o.MaxConcurrentReconciles < 1:
		return fmt.Errorf("--max-concurrent-reconciles must be at least 1, got %d", o.MaxConcurrentReconciles)
	case o.ShutdownTimeout <= 0:
		return fmt.Errorf("--shutdown-timeout must be positive, got %s", o.ShutdownTimeout)
	case o.LogFormat != "json" && o.LogFormat != "text":
		return fmt.Errorf("--log-format must be json or text, got %q", o.LogFormat)
	}
	if _, err := o.level(); err != nil {
		return err
	}
	for flag, addr := range map[string]string{"--metrics-bind-address": o.MetricsAddress, "--health-probe-bind-address": o.ProbeAddress} {
		if addr == "0" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s %q is not host:port or 0: %v", flag, addr, err)
		}
	}
	return nil
}

func (o *Options) level() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(o.LogLevel)); err != nil {
		return 0, fmt.Errorf("--log-level must be debug, info, warn or error, got %q", o.LogLevel)
	}
	return l, nil
}

// Logger builds the process logger. controller-runtime's V(1) lines map to
// slog levels between debug and info, so --log-level=debug shows them.
func (o *Options) Logger(w io.Writer) logr.Logger {
	level, _ := o.level() // checked by Validate
	handlerOpts := &slog.HandlerOptions{Level: level}
	if o.LogFormat == "text" {
		return logr.FromSlogHandler(slog.NewTextHandler(w, handlerOpts))
	}
	return logr.FromSlogHandler(slog.NewJSONHandler(w, handlerOpts))
}

// RESTConfig loads the API server address and credentials: --kubeconfig,
// else the usual kubeconfig search, else the Pod's service account.
func (o *Options) RESTConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load the cluster address and credentials (--kubeconfig, $KUBECONFIG, ~/.kube/config, or a Pod's service account): %w", err)
	}
	cfg.UserAgent = "qn-controller"
	return cfg, nil
}
