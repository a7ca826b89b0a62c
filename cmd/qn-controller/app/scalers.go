package app

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/config/crd"
	"github.com/quantumnode/qn-admission/controller/scaler"
	"github.com/quantumnode/qn-admission/internal/health"
)

// ScalerOptions configure the HorizontalQNScaler controller.
type ScalerOptions struct {
	// Enabled runs the scaler controller (when the API server serves the
	// HorizontalQNScaler CRD).
	Enabled bool
	// PrometheusURL is where scalers without qnMetric.serverAddress query.
	PrometheusURL string
	// PrometheusTimeout bounds one query.
	PrometheusTimeout time.Duration
	// PrometheusMaxInFlight caps the queries in flight to one Prometheus.
	PrometheusMaxInFlight int
	// Workers bounds the scalers polled at once.
	Workers int
	// StatusRefresh is how stale a scaler's status.currentValue may grow.
	StatusRefresh time.Duration
	// KubeAPIQPS and KubeAPIBurst are the scalers' own API budget, apart
	// from the QuantumNode reconciler's.
	KubeAPIQPS   float32
	KubeAPIBurst int
}

func defaultScalerOptions() ScalerOptions {
	return ScalerOptions{
		Enabled:               true,
		PrometheusTimeout:     5 * time.Second,
		PrometheusMaxInFlight: 8,
		Workers:               16,
		StatusRefresh:         time.Minute,
		KubeAPIQPS:            100,
		KubeAPIBurst:          200,
	}
}

// AddFlags binds the scaler options to fs.
func (o *ScalerOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "scalers", o.Enabled, "Run the HorizontalQNScaler controller (when the API server serves the CRD).")
	fs.StringVar(&o.PrometheusURL, "prometheus-url", o.PrometheusURL, "Prometheus base URL for HorizontalQNScalers without qnMetric.serverAddress, e.g. http://prometheus.monitoring:9090.")
	fs.DurationVar(&o.PrometheusTimeout, "prometheus-timeout", o.PrometheusTimeout, "Deadline of one Prometheus query.")
	fs.IntVar(&o.PrometheusMaxInFlight, "prometheus-max-inflight", o.PrometheusMaxInFlight, "Queries in flight to one Prometheus at most; the scalers waiting for it are served in turn.")
	fs.IntVar(&o.Workers, "scaler-workers", o.Workers, "How many HorizontalQNScalers may be polled at once; more than --prometheus-max-inflight, so a slow Prometheus cannot hold them all.")
	fs.DurationVar(&o.StatusRefresh, "scaler-status-refresh", o.StatusRefresh, "A scaler's status is written when replicas, conditions or its memory change, and at least this often while only the value moves.")
	fs.Float32Var(&o.KubeAPIQPS, "scaler-kube-api-qps", o.KubeAPIQPS, "Requests per second the scalers may send the API server (/scale reads and writes, status), apart from --kube-api-qps.")
	fs.IntVar(&o.KubeAPIBurst, "scaler-kube-api-burst", o.KubeAPIBurst, "Burst above --scaler-kube-api-qps.")
}

// Validate reports the first scaler option that cannot work.
func (o *ScalerOptions) Validate() error {
	switch {
	case o.PrometheusTimeout <= 0:
		return fmt.Errorf("--prometheus-timeout must be positive, got %s", o.PrometheusTimeout)
	case o.PrometheusMaxInFlight < 1:
		return fmt.Errorf("--prometheus-max-inflight must be at least 1, got %d", o.PrometheusMaxInFlight)
	case o.Workers <= o.PrometheusMaxInFlight:
		return fmt.Errorf("--scaler-workers (%d) must exceed --prometheus-max-inflight (%d), or one slow Prometheus could hold every worker", o.Workers, o.PrometheusMaxInFlight)
	case o.StatusRefresh <= 0:
		return fmt.Errorf("--scaler-status-refresh must be positive, got %s", o.StatusRefresh)
	case o.KubeAPIQPS <= 0:
		return fmt.Errorf("--scaler-kube-api-qps must be positive, got %v", o.KubeAPIQPS)
	case o.KubeAPIBurst < 1:
		return fmt.Errorf("--scaler-kube-api-burst must be at least 1, got %d", o.KubeAPIBurst)
	}
	if o.PrometheusURL != "" {
		u, err := url.Parse(o.PrometheusURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
			return fmt.Errorf("--prometheus-url %q must be an http or https URL without a query, e.g. http://prometheus.monitoring:9090", o.PrometheusURL)
		}
	}
	return nil
}

// buildScalers sets up the HorizontalQNScaler controller with its own
// workers and its own API budget, so neither a slow Prometheus nor a
// thousand scalers delay the QuantumNode reconciles. Without the CRD in
// the API server (a chart upgrade does not install new CRDs) the scalers
// are off and /readyz?verbose says why; QuantumNodes are reconciled as
// before.
func (p *Program) buildScalers(ctx context.Context) error {
	o := p.Options.Scalers
	if !o.Enabled {
		return nil
	}
	mapper := p.Manager.GetRESTMapper()
	gvk := qnv1alpha1.ScalerGroupVersionKind
	if _, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
		if !meta.IsNoMatchError(err) {
			return fmt.Errorf("look up %s on %s: %w", gvk, p.Config.Host, err)
		}
		off := fmt.Sprintf("HorizontalQNScalers are off: the API server does not serve %s; install it (kubectl apply -f config/crd/%s) and restart qn-controller",
			qnv1alpha1.ScalerGroupVersionResource.GroupResource(), crd.ScalerFileName)
		p.Logger.Warn(off)
		p.Checks = append(p.Checks, health.Check{Name: "scalers", Detail: func() string { return off }})
		return nil
	}
	cfg := rest.CopyConfig(p.Config)
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(o.KubeAPIQPS, o.KubeAPIBurst) // shared by the clients below
	c, err := client.New(cfg, client.Options{Scheme: p.Manager.GetScheme(), Mapper: mapper, Cache: &client.CacheOptions{Reader: p.Manager.GetCache()}})
	if err != nil {
		return fmt.Errorf("build the scalers' client: %w", err)
	}
	scales, kinds, err := scaler.ScalesFor(cfg, mapper)
	if err != nil {
		return err
	}
	r := &scaler.Reconciler{
		Client: c, Scales: scales, ScaleKinds: kinds,
		Prometheus:              scaler.NewPrometheus(o.PrometheusTimeout, o.PrometheusMaxInFlight),
		DefaultServer:           o.PrometheusURL,
		MaxConcurrentReconciles: o.Workers,
		StatusRefresh:           o.StatusRefresh,
	}
	if err := r.SetupWithManager(ctx, p.Manager); err != nil {
		return err
	}
	p.Checks = append(p.Checks, health.Check{Name: "scalers", Detail: func() string {
		if o.PrometheusURL == "" {
			return "HorizontalQNScalers on; no --prometheus-url: each scaler needs qnMetric.serverAddress"
		}
		return "HorizontalQNScalers on; default Prometheus " + o.PrometheusURL
	}})
	return nil
}
