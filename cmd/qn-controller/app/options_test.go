package app

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// env fakes os.Getenv: in a Pod or on a laptop.
func env(inPod bool) func(string) string {
	return func(key string) string {
		if inPod && key == "KUBERNETES_SERVICE_HOST" {
			return "10.96.0.1"
		}
		return ""
	}
}

func TestLeaderElectionDefaultsOnOnlyInAPod(t *testing.T) {
	tests := map[string]struct {
		inPod bool
		want  bool
	}{
		"in a Pod replicas take turns by default":        {inPod: true, want: true},
		"on a laptop make run-controller takes no Lease": {inPod: false, want: false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			opts := NewOptions(env(tt.inPod))
			if opts.LeaderElect != tt.want {
				t.Errorf("LeaderElect = %v, want %v", opts.LeaderElect, tt.want)
			}
			if err := opts.Validate(env(tt.inPod)); err != nil {
				t.Errorf("the defaults do not validate: %v", err)
			}
		})
	}
}

func TestFlags(t *testing.T) {
	tests := map[string]struct {
		inPod   bool
		args    []string
		wantErr string // empty: valid
		check   func(*testing.T, *Options)
	}{
		"every flag lands in its field": {
			args: []string{"--kubeconfig=/k", "--metrics-bind-address=127.0.0.1:9000", "--health-probe-bind-address=:9001",
				"--leader-elect", "--leader-election-namespace=qn-system", "--max-concurrent-reconciles=4",
				"--shutdown-timeout=5s", "--log-format=text", "--log-level=debug"},
			check: func(t *testing.T, o *Options) {
				if o.Kubeconfig != "/k" || o.MetricsAddress != "127.0.0.1:9000" || o.ProbeAddress != ":9001" ||
					!o.LeaderElect || o.LeaderElectionNamespace != "qn-system" || o.MaxConcurrentReconciles != 4 ||
					o.ShutdownTimeout.String() != "5s" || o.LogFormat != "text" || o.LogLevel != "debug" {
					t.Errorf("options = %+v", o)
				}
			},
		},
		"--leader-elect=false turns it off in a Pod": {
			inPod: true, args: []string{"--leader-elect=false"},
			check: func(t *testing.T, o *Options) {
				if o.LeaderElect {
					t.Error("LeaderElect is still on")
				}
			},
		},
		"0 turns metrics and probes off": {args: []string{"--metrics-bind-address=0", "--health-probe-bind-address=0"}},
		"leader election on a laptop needs a namespace for its Lease": {
			args: []string{"--leader-elect"}, wantErr: "--leader-elect outside a cluster needs --leader-election-namespace",
		},
		"leader election in a Pod finds its own namespace": {inPod: true, args: []string{"--leader-elect"}},
		"zero concurrent reconciles would never reconcile": {
			args: []string{"--max-concurrent-reconciles=0"}, wantErr: "--max-concurrent-reconciles must be at least 1",
		},
		"a log level outside the four is refused": {
			args: []string{"--log-level=verbose"}, wantErr: `--log-level must be debug, info, warn or error, got "verbose"`,
		},
		"a log format outside the two is refused": {
			args: []string{"--log-format=xml"}, wantErr: `--log-format must be json or text, got "xml"`,
		},
		"an address without a port is refused": {
			args: []string{"--metrics-bind-address=localhost"}, wantErr: `--metrics-bind-address "localhost" is not host:port or 0`,
		},
		"a shutdown timeout of zero is refused": {
			args: []string{"--shutdown-timeout=0s"}, wantErr: "--shutdown-timeout must be positive",
		},
		"the audit, quiescence and client flags land in their fields": {
			args: []string{"--kube-api-qps=50.5", "--kube-api-burst=80", "--audit=false", "--policy-dir=/p", "--policy-poll-interval=2s",
				"--policy-eval-timeout=500ms", "--audit-interval=0s", "--audit-rate=10", "--policy-reports=false",
				"--quiescence-window=0s", "--max-requeue-delay=1m"},
			check: func(t *testing.T, o *Options) {
				if o.KubeAPIQPS != 50.5 || o.KubeAPIBurst != 80 || o.Audit || o.PolicyDir != "/p" || o.PolicyPollInterval.String() != "2s" ||
					o.PolicyEvalTimeout.String() != "500ms" || o.AuditInterval != 0 || o.AuditRate != 10 || o.PolicyReports ||
					o.QuiescenceWindow != 0 || o.MaxRequeueDelay.String() != "1m0s" {
					t.Errorf("options = %+v", o)
				}
			},
		},
		"the defaults audit, hold status three seconds and cap the wait at thirty": {
			check: func(t *testing.T, o *Options) {
				if !o.Audit || !o.PolicyReports || o.QuiescenceWindow.String() != "3s" || o.MaxRequeueDelay.String() != "30s" || o.KubeAPIQPS != 20 || o.KubeAPIBurst != 30 {
					t.Errorf("options = %+v", o)
				}
			},
		},
		"the client's timeout and the caches' resync period land in their fields, 30s and 10h by default": {
			args: []string{"--kube-api-timeout=45s", "--sync-period=1h"},
			check: func(t *testing.T, o *Options) {
				if o.KubeAPITimeout != 45*time.Second || o.SyncPeriod != time.Hour {
					t.Errorf("timeout %s, sync period %s", o.KubeAPITimeout, o.SyncPeriod)
				}
				if d := NewOptions(env(false)); d.KubeAPITimeout != 30*time.Second || d.SyncPeriod != 10*time.Hour {
					t.Errorf("defaults: timeout %s, sync period %s", d.KubeAPITimeout, d.SyncPeriod)
				}
			},
		},
		"a negative request timeout is refused": {
			args: []string{"--kube-api-timeout=-1s"}, wantErr: "--kube-api-timeout must be 0 (none) or positive",
		},
		"a resync every few seconds is refused": {
			args: []string{"--sync-period=5s"}, wantErr: "--sync-period must be at least 1m",
		},
		"a client that may send nothing is refused": {
			args: []string{"--kube-api-qps=0"}, wantErr: "--kube-api-qps must be positive",
		},
		"an audit rate of zero would never finish a sweep": {
			args: []string{"--audit-rate=0"}, wantErr: "--audit-rate must be positive",
		},
		"a requeue cap below the quiescence window could never be met": {
			args: []string{"--quiescence-window=10s", "--max-requeue-delay=5s"}, wantErr: "--max-requeue-delay must be positive and at least --quiescence-window (10s)",
		},
		"a negative audit interval is refused": {
			args: []string{"--audit-interval=-1s"}, wantErr: "--audit-interval must be 0 (off) or positive",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			opts := NewOptions(env(tt.inPod))
			fs := pflag.NewFlagSet("qn-controller", pflag.ContinueOnError)
			opts.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatalf("parse %v: %v", tt.args, err)
			}
			err := opts.Validate(env(tt.inPod))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
			}
			if tt.check != nil {
				tt.check(t, opts)
			}
		})
	}
}

func TestRESTConfigNamesWhereItLooked(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", t.TempDir())
	opts := NewOptions(env(false))
	opts.Kubeconfig = t.TempDir() + "/missing"
	_, err := opts.RESTConfig()
	if err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("error = %v, want it to say where the configuration is looked for", err)
	}
}
