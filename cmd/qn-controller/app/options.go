package app

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/quantumnode/qn-admission/internal/health"
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

	// KubeAPIQPS and KubeAPIBurst bound the client's request rate to the
	// API server (client-go's token bucket).
	KubeAPIQPS   float32
	KubeAPIBurst int
	// KubeAPITimeout bounds one request to the API server, watches
	// excepted (requestTimeout).
	KubeAPITimeout time.Duration
	// SyncPeriod is how often the informers' caches are resynced: every
	// cached object handed to the controllers again, as if it changed.
	SyncPeriod time.Duration

	// Audit turns the background audit on: every stored QuantumNode is
	// judged with the admission policies (PolicyCompliant condition,
	// Warning events, PolicyReports).
	Audit bool
	// PolicyDir is the policy directory qn-webhook serves (the same
	// ConfigMap or git-sync volume), hot-reloaded; empty audits with the
	// bundled policies.
	PolicyDir string
	// PolicyPollInterval re-checks PolicyDir besides file-system events.
	PolicyPollInterval time.Duration
	// PolicyEvalTimeout bounds one policy evaluation.
	PolicyEvalTimeout time.Duration
	// AuditInterval re-audits every QuantumNode periodically; 0 turns the
	// periodic sweep off (policy changes and node changes still audit).
	AuditInterval time.Duration
	// AuditRate is how many QuantumNodes per second a sweep queues.
	AuditRate float64
	// PolicyReports keeps a wgpolicyk8s.io/v1alpha2 PolicyReport per namespace.
	PolicyReports bool
	// RoleTable, when set, names the QuantumNodeRoleTable (the parameters
	// of the ValidatingAdmissionPolicy `qnctl vap` compiles) that
	// qn-controller keeps equal to the role table of the policies it
	// serves (--policy-dir, or the bundled ones).
	RoleTable string
	// RoleTableHelmRelease is NAMESPACE/NAME of the Helm release whose
	// ownership marks the role table carries; empty: none.
	RoleTableHelmRelease string
	// RoleTableResync rewrites the QuantumNodeRoleTable this often if it
	// was edited or deleted by hand.
	RoleTableResync time.Duration
	// QuiescenceWindow holds a status change until the node's generation
	// and conditions have been still this long.
	QuiescenceWindow time.Duration
	// MaxRequeueDelay caps the wait for quiescence.
	MaxRequeueDelay time.Duration
	// ProbeWorkers bounds the active health checks of QuantumNodeHealthPolicies
	// running at once.
	ProbeWorkers int

	// Strict are the thresholds of /healthz?strict=true, as qn-webhook's.
	Strict health.StrictOptions
	// Profiling serves net/http/pprof on the probe address.
	Profiling bool

	// Scalers configure the HorizontalQNScaler controller.
	Scalers ScalerOptions
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
		// controller-runtime's defaults, stated so the flags show them.
		KubeAPIQPS:     20,
		KubeAPIBurst:   30,
		KubeAPITimeout: 30 * time.Second,
		// controller-runtime's default, stated: status is level-triggered
		// and every input is watched, so a resync only guards against a
		// missed event.
		SyncPeriod:         10 * time.Hour,
		Audit:              true,
		PolicyPollInterval: 10 * time.Second,
		PolicyEvalTimeout:  time.Second,
		AuditInterval:      time.Hour,
		AuditRate:          50,
		PolicyReports:      true,
		RoleTableResync:    time.Minute,
		QuiescenceWindow:   3 * time.Second,
		MaxRequeueDelay:    30 * time.Second,
		ProbeWorkers:       16,
		Strict:             health.DefaultStrictOptions(),
		Scalers:            defaultScalerOptions(),
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
	fs.StringVar(&o.ProbeAddress, "health-probe-bind-address", o.ProbeAddress, `Address of /healthz and /readyz (and their ?strict=true form); "0" disables them.`)
	o.Strict.AddFlags(fs)
	fs.BoolVar(&o.Profiling, "pprof", o.Profiling, "Serve net/http/pprof under /debug/pprof/ on --health-probe-bind-address (off by default).")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Take turns with other replicas through a Lease. Defaults to true in a Pod, false elsewhere.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "Namespace of the leader-election Lease; in a Pod, defaults to the Pod's namespace.")
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", o.MaxConcurrentReconciles, "How many QuantumNodes may reconcile at once.")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "How long running reconciles may finish after SIGTERM.")
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "Log format: json or text.")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "Lowest level logged: debug, info, warn or error.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Requests per second the client may send the API server (sustained).")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Requests the client may send the API server in a burst above --kube-api-qps.")
	fs.DurationVar(&o.KubeAPITimeout, "kube-api-timeout", o.KubeAPITimeout, "Deadline of one request to the API server, its answer read (watches excepted: the API server ends those); 0: none.")
	fs.DurationVar(&o.SyncPeriod, "sync-period", o.SyncPeriod, "How often the informers hand every cached object to the controllers again (a resync), besides the watch events.")
	fs.BoolVar(&o.Audit, "audit", o.Audit, "Judge every stored QuantumNode with the admission policies: PolicyCompliant condition, Warning events, PolicyReports.")
	fs.StringVar(&o.PolicyDir, "policy-dir", o.PolicyDir, "Policy directory qn-webhook serves (roles.yaml, *.rego, data.json), hot-reloaded; empty audits with the bundled policies.")
	fs.DurationVar(&o.PolicyPollInterval, "policy-poll-interval", o.PolicyPollInterval, "How often --policy-dir is re-checked, besides file-system events.")
	fs.DurationVar(&o.PolicyEvalTimeout, "policy-eval-timeout", o.PolicyEvalTimeout, "Deadline of one policy evaluation.")
	fs.DurationVar(&o.AuditInterval, "audit-interval", o.AuditInterval, "Re-audit every QuantumNode this often; 0 only on policy and node changes.")
	fs.Float64Var(&o.AuditRate, "audit-rate", o.AuditRate, "QuantumNodes per second a re-audit of every node queues (after a policy change or --audit-interval).")
	fs.BoolVar(&o.PolicyReports, "policy-reports", o.PolicyReports, "Keep a wgpolicyk8s.io/v1alpha2 PolicyReport per namespace (when the cluster serves the kind).")
	fs.StringVar(&o.RoleTable, "role-table", o.RoleTable, "Keep the QuantumNodeRoleTable of this name (the parameters of the ValidatingAdmissionPolicy qnctl vap compiles) equal to the served policies' role table; empty: off.")
	fs.StringVar(&o.RoleTableHelmRelease, "role-table-helm-release", o.RoleTableHelmRelease, "NAMESPACE/NAME of the Helm release qn-controller belongs to: the --role-table object carries Helm's ownership label and annotations, so an upgrade whose chart renders the table itself (policies.source bundled) adopts it instead of refusing it; empty: none.")
	fs.DurationVar(&o.RoleTableResync, "role-table-resync", o.RoleTableResync, "Rewrite the --role-table object this often if it was edited or deleted by hand (it is also written whenever the policies change).")
	fs.DurationVar(&o.QuiescenceWindow, "quiescence-window", o.QuiescenceWindow, "Hold a status change until the QuantumNode's generation and conditions have been still this long; 0 writes at once.")
	fs.DurationVar(&o.MaxRequeueDelay, "max-requeue-delay", o.MaxRequeueDelay, "Longest wait for a QuantumNode to become quiescent before its status is written anyway.")
	fs.IntVar(&o.ProbeWorkers, "probe-workers", o.ProbeWorkers, "Active health checks (a QuantumNodeHealthPolicy's probe) running at once.")
	o.Scalers.AddFlags(fs)
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
	case o.KubeAPIQPS <= 0:
		return fmt.Errorf("--kube-api-qps must be positive, got %v", o.KubeAPIQPS)
	case o.KubeAPIBurst < 1:
		return fmt.Errorf("--kube-api-burst must be at least 1, got %d", o.KubeAPIBurst)
	case o.KubeAPITimeout < 0:
		return fmt.Errorf("--kube-api-timeout must be 0 (none) or positive, got %s", o.KubeAPITimeout)
	case o.SyncPeriod < time.Minute:
		return fmt.Errorf("--sync-period must be at least 1m (every resync hands every cached object to the controllers), got %s", o.SyncPeriod)
	case o.PolicyPollInterval <= 0:
		return fmt.Errorf("--policy-poll-interval must be positive, got %s", o.PolicyPollInterval)
	case o.PolicyEvalTimeout <= 0:
		return fmt.Errorf("--policy-eval-timeout must be positive, got %s", o.PolicyEvalTimeout)
	case o.AuditInterval < 0:
		return fmt.Errorf("--audit-interval must be 0 (off) or positive, got %s", o.AuditInterval)
	case o.AuditRate <= 0:
		return fmt.Errorf("--audit-rate must be positive, got %v", o.AuditRate)
	case o.RoleTableResync <= 0:
		return fmt.Errorf("--role-table-resync must be positive, got %s", o.RoleTableResync)
	case o.RoleTable != "" && len(validation.IsDNS1123Subdomain(o.RoleTable)) > 0:
		return fmt.Errorf("--role-table %q is not an object name (lowercase letters, digits, '-' and '.')", o.RoleTable)
	case o.RoleTableHelmRelease != "" && !validHelmRelease(o.RoleTableHelmRelease):
		return fmt.Errorf("--role-table-helm-release %q is not NAMESPACE/NAME", o.RoleTableHelmRelease)
	case o.QuiescenceWindow < 0:
		return fmt.Errorf("--quiescence-window must be 0 (off) or positive, got %s", o.QuiescenceWindow)
	case o.ProbeWorkers < 1:
		return fmt.Errorf("--probe-workers must be at least 1, got %d", o.ProbeWorkers)
	case o.MaxRequeueDelay <= 0 || o.MaxRequeueDelay < o.QuiescenceWindow:
		return fmt.Errorf("--max-requeue-delay must be positive and at least --quiescence-window (%s), got %s", o.QuiescenceWindow, o.MaxRequeueDelay)
	}
	if _, err := o.level(); err != nil {
		return err
	}
	if err := o.Strict.Validate(); err != nil {
		return err
	}
	if err := o.Scalers.Validate(); err != nil {
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

// logHandler is where the process logs go. controller-runtime's V(1)
// lines map to slog levels between debug and info, so --log-level=debug
// shows them.
func (o *Options) logHandler(w io.Writer) slog.Handler {
	level, _ := o.level() // checked by Validate
	handlerOpts := &slog.HandlerOptions{Level: level}
	if o.LogFormat == "text" {
		return slog.NewTextHandler(w, handlerOpts)
	}
	return slog.NewJSONHandler(w, handlerOpts)
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
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	cfg.Wrap(requestTimeout(o.KubeAPITimeout))
	return cfg, nil
}

// validHelmRelease says s is NAMESPACE/NAME: a namespace and a release
// name, both DNS labels.
func validHelmRelease(s string) bool {
	ns, name, ok := strings.Cut(s, "/")
	return ok && len(validation.IsDNS1123Label(ns)) == 0 && len(validation.IsDNS1123Label(name)) == 0
}
