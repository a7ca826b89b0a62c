package app

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestScalerFlags(t *testing.T) {
	tests := map[string]struct {
		args    []string
		wantErr string // empty: valid
		check   func(*testing.T, ScalerOptions)
	}{
		"the defaults": {check: func(t *testing.T, o ScalerOptions) {
			if !o.Enabled || o.PrometheusURL != "" || o.PrometheusTimeout != 5*time.Second || o.PrometheusMaxInFlight != 8 ||
				o.Workers != 16 || o.StatusRefresh != time.Minute || o.KubeAPIQPS != 100 || o.KubeAPIBurst != 200 {
				t.Errorf("defaults = %+v", o)
			}
		}},
		"every flag lands in its field": {
			args: []string{"--scalers=false", "--prometheus-url=https://prometheus.monitoring:9090/prom", "--prometheus-timeout=2s",
				"--prometheus-max-inflight=8", "--scaler-workers=32", "--scaler-status-refresh=30s", "--scaler-kube-api-qps=5", "--scaler-kube-api-burst=7"},
			check: func(t *testing.T, o ScalerOptions) {
				if o.Enabled || o.PrometheusURL != "https://prometheus.monitoring:9090/prom" || o.PrometheusTimeout != 2*time.Second ||
					o.PrometheusMaxInFlight != 8 || o.Workers != 32 || o.StatusRefresh != 30*time.Second || o.KubeAPIQPS != 5 || o.KubeAPIBurst != 7 {
					t.Errorf("options = %+v", o)
				}
			},
		},
		"a Prometheus URL without a scheme is refused": {args: []string{"--prometheus-url=prometheus:9090"},
			wantErr: `--prometheus-url "prometheus:9090" must be an http or https URL without a query`},
		"a Prometheus URL with a query is refused": {args: []string{"--prometheus-url=http://p:9090/api/v1/query?query=up"},
			wantErr: "must be an http or https URL without a query"},
		"as many workers as queries in flight per server is refused": {args: []string{"--scaler-workers=4", "--prometheus-max-inflight=4"},
			wantErr: "--scaler-workers (4) must exceed --prometheus-max-inflight (4), or one slow Prometheus could hold every worker"},
		"a zero timeout is refused":        {args: []string{"--prometheus-timeout=0s"}, wantErr: "--prometheus-timeout must be positive"},
		"a zero status refresh is refused": {args: []string{"--scaler-status-refresh=0s"}, wantErr: "--scaler-status-refresh must be positive"},
		"a zero API rate is refused":       {args: []string{"--scaler-kube-api-qps=0"}, wantErr: "--scaler-kube-api-qps must be positive"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			o := NewOptions(env(false))
			fs := pflag.NewFlagSet("qn-controller", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := o.Validate(env(false))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Validate = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, o.Scalers)
		})
	}
}
