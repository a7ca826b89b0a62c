package chart

import (
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	controllerapp "github.com/quantumnode/qn-admission/cmd/qn-controller/app"
	"github.com/quantumnode/qn-admission/cmd/qn-webhook/app"
)

// The arguments the chart gives each binary are flags it has, with values
// it accepts in a Pod: they go through its own flag set and Validate, for
// every variation.
func TestArgsParse(t *testing.T) {
	cases := map[string]string{"default values": "", "profiling on": "profiling: {enabled: true}"}
	for name, v := range variations {
		cases[name] = v.values
	}
	inPod := func(key string) string {
		if key == "KUBERNETES_SERVICE_HOST" {
			return "10.96.0.1"
		}
		return ""
	}
	// Each binary's flag set and Validate, as its main uses them.
	binaries := map[string]func(fs *pflag.FlagSet) (validate func() error){
		"qn-webhook": func(fs *pflag.FlagSet) func() error {
			opts := app.NewOptions()
			opts.AddFlags(fs)
			return opts.Validate
		},
		"qn-controller": func(fs *pflag.FlagSet) func() error {
			opts := controllerapp.NewOptions(inPod)
			opts.AddFlags(fs)
			return func() error { return opts.Validate(inPod) }
		},
	}
	for name, snippet := range cases {
		t.Run(name, func(t *testing.T) {
			rel := render(t, snippet)
			for binary, flags := range binaries {
				c := deployedContainer(t, rel, binary)
				if c == nil {
					if binary == "qn-webhook" {
						t.Errorf("no %s container", binary)
					}
					continue
				}
				fs := pflag.NewFlagSet(binary, pflag.ContinueOnError)
				validate := flags(fs)
				if err := fs.Parse(c.Args); err != nil {
					t.Errorf("%s %v: %v", binary, c.Args, err)
					continue
				}
				if fs.NArg() != 0 {
					t.Errorf("%s: stray arguments %v", binary, fs.Args())
				}
				if err := validate(); err != nil {
					t.Errorf("%s %v: %v", binary, c.Args, err)
				}
			}
			if ctl := deployedContainer(t, rel, "qn-controller"); ctl != nil {
				for _, want := range []string{"leader-elect", "leader-election-namespace", "health-probe-bind-address", "strict-reload-grace"} {
					if _, ok := flag(ctl.Args, want); !ok {
						t.Errorf("qn-controller is not given --%s", want)
					}
				}
				if _, ok := flag(ctl.Args, "pprof"); name == "profiling on" && !ok {
					t.Error("profiling is enabled but qn-controller is not given --pprof")
				}
			}
		})
	}
}

// deployedContainer is the container of that name in the rendered
// Deployments, or nil.
func deployedContainer(t *testing.T, rel *chartrender.Release, name string) *corev1.Container {
	t.Helper()
	for _, dep := range deployments(t, rel) {
		for i := range dep.Spec.Template.Spec.Containers {
			if dep.Spec.Template.Spec.Containers[i].Name == name {
				return &dep.Spec.Template.Spec.Containers[i]
			}
		}
	}
	return nil
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
