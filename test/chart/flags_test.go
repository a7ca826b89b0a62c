package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/quantumnode/qn-admission/cmd/qn-webhook/app"
)

// The arguments the chart gives qn-webhook are flags qn-webhook has, with
// values it accepts: they go through its own flag set and Validate, for
// every variation.
func TestWebhookArgsParse(t *testing.T) {
	cases := map[string]string{"default values": ""}
	for name, v := range variations {
		cases[name] = v.values
	}
	for name, snippet := range cases {
		t.Run(name, func(t *testing.T) {
			rel := render(t, snippet)
			var c *corev1.Container
			for _, dep := range deployments(t, rel) {
				for i := range dep.Spec.Template.Spec.Containers {
					if dep.Spec.Template.Spec.Containers[i].Name == "qn-webhook" {
						c = &dep.Spec.Template.Spec.Containers[i]
					}
				}
			}
			if c == nil {
				t.Fatal("no qn-webhook container")
			}
			opts := app.NewOptions()
			fs := pflag.NewFlagSet("qn-webhook", pflag.ContinueOnError)
			opts.AddFlags(fs)
			if err := fs.Parse(c.Args); err != nil {
				t.Fatalf("qn-webhook %v: %v", c.Args, err)
			}
			if fs.NArg() != 0 {
				t.Errorf("stray arguments %v", fs.Args())
			}
			if err := opts.Validate(); err != nil {
				t.Errorf("qn-webhook %v: %v", c.Args, err)
			}
		})
	}
}

// controllerFlag matches a flag definition in cmd/qn-controller/options.go,
// e.g. fs.StringVar(&o.LogLevel, "log-level", ...). The command is a main
// package, so its flag set cannot be imported; its source is read instead.
var controllerFlag = regexp.MustCompile(`fs\.\w+Var\(&o\.\w+, "([a-z0-9-]+)"`)

// Every argument the chart gives qn-controller is one of its flags.
func TestControllerArgsAreItsFlags(t *testing.T) {
	known := map[string]bool{}
	// Its own flags, and the strict health flags both binaries share.
	for _, file := range []string{"cmd/qn-controller/options.go", "internal/health/checks.go"} {
		src, err := os.ReadFile(filepath.Join(Dir(), "..", "..", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range controllerFlag.FindAllStringSubmatch(string(src), -1) {
			known[m[1]] = true
		}
	}
	if len(known) < 5 {
		t.Fatalf("found only flags %v in cmd/qn-controller/options.go: has the way flags are declared changed?", keys(known))
	}
	rel := render(t, "profiling: {enabled: true}")
	c := container(t, &get[appsv1.Deployment](t, rel, "Deployment", fullname+"-controller").Spec.Template.Spec, "qn-controller")
	for _, arg := range c.Args {
		name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if !strings.HasPrefix(arg, "--") || !known[name] {
			t.Errorf("qn-controller has no flag for %q (its flags: %v)", arg, keys(known))
		}
	}
	for _, want := range []string{"leader-elect", "leader-election-namespace", "health-probe-bind-address", "strict-reload-grace", "pprof"} {
		if _, ok := flag(c.Args, want); !ok {
			t.Errorf("qn-controller is not given --%s", want)
		}
	}
}

// Tracing and profiling are off unless switched on: the default rendering
// gives neither binary --otlp-endpoint nor --pprof.
func TestTracingAndProfilingAreOffByDefault(t *testing.T) {
	rel := render(t, "")
	web := container(t, &webhookDeployment(t, rel).Spec.Template.Spec, "qn-webhook")
	ctl := container(t, &get[appsv1.Deployment](t, rel, "Deployment", fullname+"-controller").Spec.Template.Spec, "qn-controller")
	for _, c := range []*corev1.Container{web, ctl} {
		for _, name := range []string{"otlp-endpoint", "pprof"} {
			if v, ok := flag(c.Args, name); ok {
				t.Errorf("%s is given --%s=%s by default", c.Name, name, v)
			}
		}
	}
}
