package app

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/quantumnode/qn-admission/internal/health"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/shadow"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/webhook"
)

// Options configure qn-webhook. One struct, bound to flags by AddFlags; no
// package-level flag globals.
type Options struct {
	// ListenAddress serves the admission webhooks over HTTPS.
	ListenAddress string
	// ProbeAddress serves /healthz, /readyz and /metrics over plain HTTP,
	// apart from admission traffic so probes never queue behind it.
	ProbeAddress string

	TLSCertFile string
	TLSKeyFile  string
	// ClientCAFile, when set, requires the apiserver to present a client
	// certificate signed by it.
	ClientCAFile string
	// TLSSelfSigned generates a CA and serving certificate for local runs.
	TLSSelfSigned      bool
	TLSSelfSignedDir   string
	TLSSelfSignedHosts []string
	// CABundleFile receives the self-signed CA, for a webhook's caBundle.
	CABundleFile string
	// CertPollInterval is how often certificate files are re-read besides
	// file-system events.
	CertPollInterval time.Duration

	// PolicyDir holds roles.yaml and the Rego policies; empty serves the
	// policies bundled in the binary.
	PolicyDir string
	// PolicyEvalTimeout bounds one policy evaluation; keep it well under
	// the webhook's timeoutSeconds.
	PolicyEvalTimeout time.Duration
	// AllowNetworkBuiltins keeps http.send and friends available to Rego.
	AllowNetworkBuiltins bool
	// PolicyPollInterval re-checks the policy directory besides events.
	PolicyPollInterval time.Duration
	// MaxPolicyFileBytes and MaxPolicySetBytes bound what reading a
	// policy directory takes: one file, and all files of one set.
	MaxPolicyFileBytes, MaxPolicySetBytes int64
	// DecisionLog is "-" for stdout or a file to append decision lines to.
	DecisionLog string
	// DecisionLogFlushInterval groups decision lines into one write per
	// interval (0: a write per line); lines not yet written are lost if
	// the process is killed.
	DecisionLogFlushInterval time.Duration

	// ShadowPolicyDir holds a candidate policy set judged beside the
	// served one, off the response path (shadow.Shadow); empty: none.
	ShadowPolicyDir string
	// ShadowQueue is how many requests may wait for the candidate; more
	// are dropped and counted.
	ShadowQueue int
	// ShadowCPU is the share of one CPU the candidate may use.
	ShadowCPU float64

	// MaxRequestBytes caps an AdmissionReview body (413 above).
	MaxRequestBytes int64
	// MaxRequestElements caps the JSON elements of a body, counted before
	// decoding (413 above).
	MaxRequestElements int
	// MaxConcurrentReviews caps the reviews decoded and evaluated at once;
	// more wait up to 2s for a slot, then get 429.
	MaxConcurrentReviews int
	// MaxConnections caps open connections on the admission listener, so
	// the probe listener, certificate and policy reloads always have file
	// descriptors. It is lowered to the process's descriptor limit minus
	// a reserve when that is smaller.
	MaxConnections int
	// HandshakeTimeout is how long a new admission connection has to
	// finish its TLS handshake and send its first request's headers.
	HandshakeTimeout time.Duration
	// RequestBodyTimeout is how long a request's body may take to arrive
	// once its headers have; a body that stalls gets 400.
	RequestBodyTimeout time.Duration
	// MinRequestBodyRate is how fast a body must arrive after its first
	// second, in bytes a second; 0: RequestBodyTimeout alone.
	MinRequestBodyRate int64
	// MaxRequestBytesInFlight caps the request bytes held at once, from
	// the first byte read to the answer; beyond it a review waits for room,
	// then gets 429. 0 derives it from the memory limit
	// (webhook.DefaultMaxRequestBytesInFlight).
	MaxRequestBytesInFlight int64
	// AnswerWriteTimeout bounds how long an answer may take to leave; a
	// caller that does not read it has its connection closed.
	AnswerWriteTimeout time.Duration
	// ShutdownGracePeriod bounds how long in-flight requests may drain.
	ShutdownGracePeriod time.Duration
	// LogFormat is json or text.
	LogFormat string

	// WindowStore is where rate windows are counted: "memory" (this
	// process only: with N replicas a requester gets up to N times a
	// role's limit) or "redis" (one window shared by every replica).
	WindowStore string
	// Redis is how to reach Redis when WindowStore is redis.
	Redis window.RedisConfig
	// WindowStoreTimeout bounds one window call; past it the role's
	// onStoreError decides.
	WindowStoreTimeout time.Duration

	// Strict are the thresholds of /healthz?strict=true.
	Strict health.StrictOptions
	// StrictCertMinValidity fails strict health when the serving
	// certificate expires sooner.
	StrictCertMinValidity time.Duration
	// Profiling serves net/http/pprof on the probe address.
	Profiling bool

	// OTLPEndpoint receives spans over OTLP/gRPC (host:port or a URL);
	// empty falls back to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and
	// OTEL_EXPORTER_OTLP_ENDPOINT, and with none of them tracing is off.
	OTLPEndpoint string
	// OTLPInsecure sends spans without TLS.
	OTLPInsecure bool
	// TraceSampleRatio is the share of requests traced when the caller
	// sent no sampling decision of its own.
	TraceSampleRatio float64

	// Inventory is the cluster inventory policies read (inventory.go).
	Inventory InventoryOptions

	// AdditionalResources are the resources, beyond QuantumNodes and
	// HorizontalQNScalers, its validating webhook is registered for (the
	// chart's webhook.additionalResources), in the form
	// RESOURCE.VERSION[.GROUP][:OPERATION,...]. They change no answer:
	// qn-webhook judges whatever it is sent. They say truly, in
	// /readyz?verbose and the log, what it is asked.
	AdditionalResources []string
}

// LoadOptions are how every policy set of the process loads.
func (o *Options) LoadOptions() policies.LoadOptions {
	return policies.LoadOptions{EvalTimeout: o.PolicyEvalTimeout, AllowNetwork: o.AllowNetworkBuiltins,
		MaxFileBytes: o.MaxPolicyFileBytes, MaxSetBytes: o.MaxPolicySetBytes}
}

// Window stores.
const (
	WindowStoreMemory = "memory"
	WindowStoreRedis  = "redis"
)

// NewOptions returns the defaults: they run locally with no flags but
// --tls-self-signed, and are safe in a cluster.
func NewOptions() *Options {
	return &Options{
		ListenAddress:            ":8443",
		ProbeAddress:             ":8080",
		TLSSelfSignedDir:         filepath.Join(os.TempDir(), "qn-webhook-certs"),
		TLSSelfSignedHosts:       []string{"localhost", "127.0.0.1", "::1"},
		CertPollInterval:         10 * time.Second,
		PolicyEvalTimeout:        time.Second,
		PolicyPollInterval:       10 * time.Second,
		MaxPolicyFileBytes:       policies.DefaultMaxPolicyFileBytes,
		MaxPolicySetBytes:        policies.DefaultMaxPolicySetBytes,
		DecisionLog:              "-",
		DecisionLogFlushInterval: 5 * time.Millisecond,
		ShadowQueue:              shadow.DefaultQueue,
		ShadowCPU:                shadow.DefaultCPU,
		MaxRequestBytes:          webhook.DefaultMaxRequestBytes,
		MaxRequestElements:       webhook.DefaultMaxRequestElements,
		MaxConcurrentReviews:     webhook.DefaultMaxConcurrentReviews(),
		MaxConnections:           DefaultMaxConnections,
		HandshakeTimeout:         webhook.DefaultHandshakeTimeout,
		RequestBodyTimeout:       webhook.DefaultRequestBodyTimeout,
		MinRequestBodyRate:       webhook.DefaultMinRequestBodyRate,
		AnswerWriteTimeout:       webhook.DefaultAnswerWriteTimeout,
		ShutdownGracePeriod:      20 * time.Second,
		LogFormat:                "json",
		WindowStore:              WindowStoreMemory,
		WindowStoreTimeout:       window.DefaultStoreTimeout,
		Strict:                   health.DefaultStrictOptions(),
		// cert-manager renews at two thirds of the lifetime (30 of 90
		// days left); a week left means renewal has failed for weeks.
		StrictCertMinValidity: 7 * 24 * time.Hour,
		// A sampled request is evaluated with a tracer that times each
		// policy package and costs about 1.7 times an untraced one
		// (docs/benchmarks.md): one in ten keeps the average under 10 %;
		// the API server's own decision wins.
		TraceSampleRatio: 0.1,
		Inventory:        DefaultInventoryOptions(),
	}
}

// AddFlags binds the options to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Inventory.AddFlags(fs)
	fs.StringVar(&o.ListenAddress, "listen-address", o.ListenAddress, "HTTPS address of the admission webhooks (/validate, /mutate).")
	fs.StringVar(&o.ProbeAddress, "probe-address", o.ProbeAddress, "Plain-HTTP address of /healthz, /readyz and /metrics.")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "Serving certificate (PEM); re-read when it rotates.")
	fs.StringVar(&o.TLSKeyFile, "tls-key-file", o.TLSKeyFile, "Serving key (PEM); re-read when it rotates.")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "If set, require client certificates signed by this CA (the apiserver's).")
	fs.BoolVar(&o.TLSSelfSigned, "tls-self-signed", o.TLSSelfSigned, "Generate a CA and serving certificate for local runs instead of --tls-cert-file/--tls-key-file.")
	fs.StringVar(&o.TLSSelfSignedDir, "tls-self-signed-dir", o.TLSSelfSignedDir, "Where --tls-self-signed writes ca.crt, tls.crt and tls.key (kept across restarts).")
	fs.StringSliceVar(&o.TLSSelfSignedHosts, "tls-self-signed-hosts", o.TLSSelfSignedHosts, "DNS names and IPs the self-signed certificate is valid for.")
	fs.StringVar(&o.CABundleFile, "ca-bundle-file", o.CABundleFile, "With --tls-self-signed, also write the CA bundle here (default: ca.crt in --tls-self-signed-dir).")
	fs.DurationVar(&o.CertPollInterval, "cert-poll-interval", o.CertPollInterval, "How often certificate files are re-read, besides file-system events.")
	fs.StringVar(&o.PolicyDir, "policy-dir", o.PolicyDir, "Policy directory (roles.yaml, *.rego, data.json); empty serves the bundled policies.")
	fs.DurationVar(&o.PolicyEvalTimeout, "policy-eval-timeout", o.PolicyEvalTimeout, "Deadline of one policy evaluation; keep it well under the webhook timeoutSeconds.")
	fs.DurationVar(&o.PolicyPollInterval, "policy-poll-interval", o.PolicyPollInterval, "How often --policy-dir is re-checked, besides file-system events (changes are hot-reloaded).")
	fs.Int64Var(&o.MaxPolicyFileBytes, "max-policy-file-bytes", o.MaxPolicyFileBytes, "Largest file read from --policy-dir (and --shadow-policy-dir); a larger one refuses the set, naming the file, and the last good set keeps serving.")
	fs.Int64Var(&o.MaxPolicySetBytes, "max-policy-set-bytes", o.MaxPolicySetBytes, "Most bytes read from a policy directory for one set, all files together; more refuses the set, naming the file that crossed it.")
	fs.StringVar(&o.DecisionLog, "decision-log", o.DecisionLog, "Where decision lines go: - for stdout, or a file to append to.")
	fs.DurationVar(&o.DecisionLogFlushInterval, "decision-log-flush-interval", o.DecisionLogFlushInterval, "Decision lines are written together at most this long after the first of them (and at 64 KiB, and on shutdown): one write instead of one per request. A process killed without shutdown (SIGKILL, OOM) loses at most this interval's lines; 0 writes each line at once.")
	fs.StringVar(&o.ShadowPolicyDir, "shadow-policy-dir", o.ShadowPolicyDir, "A candidate policy directory judged beside the served one on every request, off the response path: disagreements become qn_admission_shadow_disagreements_total and \"shadow disagreement\" decision lines; answers never depend on it. Hot-reloaded like --policy-dir.")
	fs.IntVar(&o.ShadowQueue, "shadow-queue", o.ShadowQueue, "Most requests waiting for the shadow policy set; more are not judged by it and are counted in qn_admission_shadow_dropped_total.")
	fs.Float64Var(&o.ShadowCPU, "shadow-cpu", o.ShadowCPU, "Share of one CPU the shadow policy set may use (0 < share <= 1). It judges in the server's idle moments (no request being served, no task waiting for a CPU), and at a tenth of this share while none comes; what it cannot judge in time waits in --shadow-queue.")
	fs.BoolVar(&o.AllowNetworkBuiltins, "allow-network-builtins", o.AllowNetworkBuiltins, "Let Rego policies call http.send, net.lookup_ip_addr and opa.runtime.")
	fs.Int64Var(&o.MaxRequestBytes, "max-request-bytes", o.MaxRequestBytes, "Largest AdmissionReview body accepted; larger ones get 413.")
	fs.IntVar(&o.MaxRequestElements, "max-request-elements", o.MaxRequestElements, "Most JSON elements (object members and array items) in one AdmissionReview, counted before decoding; more get 413.")
	fs.IntVar(&o.MaxConcurrentReviews, "max-concurrent-reviews", o.MaxConcurrentReviews, "Most reviews decoded and evaluated at once (bounds memory); more wait up to 2s for a slot, then get 429.")
	fs.IntVar(&o.MaxConnections, "max-connections", o.MaxConnections, "Most open connections on the admission listener; lowered to the file-descriptor limit minus a reserve for probes and reloads.")
	fs.DurationVar(&o.HandshakeTimeout, "handshake-timeout", o.HandshakeTimeout, "How long a new admission connection has to finish its TLS handshake and send its first request's headers; silent connections are closed.")
	fs.DurationVar(&o.RequestBodyTimeout, "request-body-timeout", o.RequestBodyTimeout, "How long a request body may take to arrive after its headers; a stalled body gets 400.")
	fs.Int64Var(&o.MinRequestBodyRate, "min-request-body-rate", o.MinRequestBodyRate, "Bytes a second a request body must arrive at, on average, after its first second; a slower body gets 400, so a sender that declares a large body and trickles it cannot hold the room of --max-request-bytes-in-flight for long. 0: only --request-body-timeout.")
	fs.Int64Var(&o.MaxRequestBytesInFlight, "max-request-bytes-in-flight", o.MaxRequestBytesInFlight, "Most request bytes held at once, from the first byte read until the answer (bounds memory under large reviews); more wait up to 2s, then get 429. 0: a sixteenth of the Go memory limit, at least --max-request-bytes (4 times it without a limit).")
	fs.DurationVar(&o.AnswerWriteTimeout, "answer-write-timeout", o.AnswerWriteTimeout, "How long an answer may take to leave once it is written; a caller that does not read it has its connection closed (qn_admission_answers_stalled_total, the strict answers check). Review slots are given back before answers are written.")
	fs.DurationVar(&o.ShutdownGracePeriod, "shutdown-grace-period", o.ShutdownGracePeriod, "How long in-flight requests may drain after SIGTERM.")
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "Log format: json or text.")
	fs.StringVar(&o.WindowStore, "window-store", o.WindowStore, "Where rate windows are counted: memory (this process; with N replicas a requester gets up to N times a role's limit) or redis (one window across every replica).")
	fs.StringVar(&o.Redis.Address, "redis-address", o.Redis.Address, "host:port of one Redis, with --window-store redis (default "+DefaultRedisAddress+" unless Sentinels or a cluster are given).")
	fs.StringSliceVar(&o.Redis.SentinelAddresses, "redis-sentinel-addresses", o.Redis.SentinelAddresses, "host:port of the Redis Sentinels watching --redis-sentinel-master (comma-separated): windows follow the master through a failover.")
	fs.StringVar(&o.Redis.SentinelMaster, "redis-sentinel-master", o.Redis.SentinelMaster, "Name of the master the Sentinels watch (sentinel.conf's 'sentinel monitor <name> ...').")
	fs.StringVar(&o.Redis.SentinelPasswordFile, "redis-sentinel-password-file", o.Redis.SentinelPasswordFile, "File holding the Sentinels' own password, when they require one (read at start).")
	fs.StringSliceVar(&o.Redis.ClusterAddresses, "redis-cluster-addresses", o.Redis.ClusterAddresses, "host:port of some nodes of a Redis Cluster (comma-separated); the others are discovered.")
	fs.StringVar(&o.Redis.PasswordFile, "redis-password-file", o.Redis.PasswordFile, "File holding the Redis password (a mounted Secret); re-read on every new connection.")
	fs.BoolVar(&o.Redis.TLS, "redis-tls", o.Redis.TLS, "Connect to Redis with TLS (1.2 or later), verifying its certificate.")
	fs.StringVar(&o.Redis.TLSCAFile, "redis-tls-ca-file", o.Redis.TLSCAFile, "With --redis-tls, the CA that signed Redis's certificate (default: the system roots).")
	o.Strict.AddFlags(fs)
	fs.DurationVar(&o.StrictCertMinValidity, "strict-cert-min-validity", o.StrictCertMinValidity, "Fail /healthz?strict=true when the serving certificate expires sooner than this.")
	fs.StringVar(&o.OTLPEndpoint, "otlp-endpoint", o.OTLPEndpoint, "OTLP/gRPC endpoint for traces (host:port, or http:// / https:// URL); empty uses OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, and with neither tracing is off.")
	fs.BoolVar(&o.OTLPInsecure, "otlp-insecure", o.OTLPInsecure, "Send traces to --otlp-endpoint without TLS.")
	fs.Float64Var(&o.TraceSampleRatio, "trace-sample-ratio", o.TraceSampleRatio, "Share of requests traced when the caller (the API server) sent no sampling decision; its decision is followed when it does.")
	fs.BoolVar(&o.Profiling, "pprof", o.Profiling, "Serve net/http/pprof under /debug/pprof/ on --probe-address (off by default: profiles show request data and cost CPU).")
	fs.StringArrayVar(&o.AdditionalResources, "additional-resources", o.AdditionalResources, "A resource besides QuantumNodes and HorizontalQNScalers the validating webhook is registered for, as RESOURCE.VERSION[.GROUP][:OPERATION,...] (pods.v1, deployments.v1.apps:CREATE,UPDATE; CREATE,UPDATE when none); repeat for several. The chart passes webhook.additionalResources; it changes no answer, it says in /readyz?verbose what the webhook is asked (qnctl eval takes the same flag).")
	fs.DurationVar(&o.WindowStoreTimeout, "window-store-timeout", o.WindowStoreTimeout, "How long one rate window call may wait for the store; past it each role's window.onStoreError (failOpen or failClosed) decides.")
}

// Validate reports the first option that cannot work, as a sentence.
func (o *Options) Validate() error {
	switch {
	case o.TLSSelfSigned && (o.TLSCertFile != "" || o.TLSKeyFile != ""):
		return fmt.Errorf("--tls-self-signed and --tls-cert-file/--tls-key-file exclude each other; pick one")
	case !o.TLSSelfSigned && (o.TLSCertFile == "" || o.TLSKeyFile == ""):
		return fmt.Errorf("no serving certificate: set --tls-cert-file and --tls-key-file, or --tls-self-signed for a local run")
	case o.PolicyEvalTimeout <= 0:
		return fmt.Errorf("--policy-eval-timeout must be positive, got %s", o.PolicyEvalTimeout)
	case o.MaxPolicyFileBytes <= 0:
		return fmt.Errorf("--max-policy-file-bytes must be positive, got %d", o.MaxPolicyFileBytes)
	case o.MaxPolicySetBytes < o.MaxPolicyFileBytes:
		return fmt.Errorf("--max-policy-set-bytes (%d) must be at least --max-policy-file-bytes (%d)", o.MaxPolicySetBytes, o.MaxPolicyFileBytes)
	case o.MaxRequestBytes <= 0:
		return fmt.Errorf("--max-request-bytes must be positive, got %d", o.MaxRequestBytes)
	case o.MaxRequestElements <= 0:
		return fmt.Errorf("--max-request-elements must be positive, got %d", o.MaxRequestElements)
	case o.MaxConcurrentReviews <= 0:
		return fmt.Errorf("--max-concurrent-reviews must be positive, got %d", o.MaxConcurrentReviews)
	case o.MaxConnections <= 0:
		return fmt.Errorf("--max-connections must be positive, got %d", o.MaxConnections)
	case o.HandshakeTimeout <= 0:
		return fmt.Errorf("--handshake-timeout must be positive, got %s", o.HandshakeTimeout)
	case o.RequestBodyTimeout <= 0:
		return fmt.Errorf("--request-body-timeout must be positive, got %s", o.RequestBodyTimeout)
	case o.AnswerWriteTimeout <= 0:
		return fmt.Errorf("--answer-write-timeout must be positive, got %s", o.AnswerWriteTimeout)
	case o.MinRequestBodyRate < 0:
		return fmt.Errorf("--min-request-body-rate must be 0 (off) or positive, got %d", o.MinRequestBodyRate)
	case o.MaxRequestBytesInFlight < 0:
		return fmt.Errorf("--max-request-bytes-in-flight must not be negative, got %d", o.MaxRequestBytesInFlight)
	case o.MaxRequestBytesInFlight > 0 && o.MaxRequestBytesInFlight < o.MaxRequestBytes:
		return fmt.Errorf("--max-request-bytes-in-flight (%d) must be at least --max-request-bytes (%d), or the largest review could never be read", o.MaxRequestBytesInFlight, o.MaxRequestBytes)
	case o.DecisionLogFlushInterval < 0 || o.DecisionLogFlushInterval > time.Second:
		return fmt.Errorf("--decision-log-flush-interval must be between 0 (a write per line) and 1s, got %s", o.DecisionLogFlushInterval)
	case o.ShadowQueue <= 0:
		return fmt.Errorf("--shadow-queue must be positive, got %d", o.ShadowQueue)
	case o.ShadowCPU <= 0 || o.ShadowCPU > 1:
		return fmt.Errorf("--shadow-cpu must be above 0 and at most 1 (a share of one CPU), got %g", o.ShadowCPU)
	case o.ShadowPolicyDir != "" && o.ShadowPolicyDir == o.PolicyDir:
		return fmt.Errorf("--shadow-policy-dir is --policy-dir (%s): the candidate would always agree; point it at the proposed set", o.PolicyDir)
	case o.LogFormat != "json" && o.LogFormat != "text":
		return fmt.Errorf("--log-format must be json or text, got %q", o.LogFormat)
	case o.WindowStore != WindowStoreMemory && o.WindowStore != WindowStoreRedis:
		return fmt.Errorf("--window-store must be memory or redis, got %q", o.WindowStore)
	case o.WindowStoreTimeout <= 0 || o.WindowStoreTimeout >= maxWindowStoreTimeout:
		return fmt.Errorf("--window-store-timeout must be positive and below %s (the longest webhook timeout), got %s", maxWindowStoreTimeout, o.WindowStoreTimeout)
	case o.TraceSampleRatio < 0 || o.TraceSampleRatio > 1:
		return fmt.Errorf("--trace-sample-ratio must be between 0 and 1, got %g", o.TraceSampleRatio)
	case o.StrictCertMinValidity < 0:
		return fmt.Errorf("--strict-cert-min-validity must not be negative, got %s", o.StrictCertMinValidity)
	}
	if err := o.Strict.Validate(); err != nil {
		return err
	}
	if err := o.Inventory.Validate(); err != nil {
		return err
	}
	if _, err := webhook.ParseAdditionalResources(o.AdditionalResources); err != nil {
		return fmt.Errorf("--additional-resources: %w", err)
	}
	if o.WindowStore == WindowStoreRedis {
		if err := o.RedisConfig().Validate(); err != nil {
			return fmt.Errorf("--window-store redis: %w", err)
		}
	}
	for _, addr := range []string{o.ListenAddress, o.ProbeAddress} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("address %q is not host:port: %v", addr, err)
		}
	}
	return nil
}

// DefaultRedisAddress is the Redis of --window-store redis when no other
// is given: redis-server on its default port, as `make run` expects.
const DefaultRedisAddress = "localhost:6379"

// RedisConfig is how qn-webhook reaches Redis: the --redis-* flags, with
// DefaultRedisAddress when they name no Redis, and the window deadline as
// the dial timeout.
func (o *Options) RedisConfig() window.RedisConfig {
	cfg := o.Redis
	if cfg.Address == "" && len(cfg.SentinelAddresses) == 0 && len(cfg.ClusterAddresses) == 0 {
		cfg.Address = DefaultRedisAddress
	}
	cfg.Timeout = o.WindowStoreTimeout
	return cfg
}

// maxWindowStoreTimeout is the apiserver's longest webhook timeout: a
// window call may never outlast the request it serves.
const maxWindowStoreTimeout = 10 * time.Second

// Logger builds the process logger in LogFormat, writing to w.
func (o *Options) Logger(w io.Writer) *slog.Logger {
	if o.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, nil))
	}
	return slog.New(slog.NewJSONHandler(w, nil))
}
