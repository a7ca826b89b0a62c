package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/cmd/qn-controller/app"
	"github.com/quantumnode/qn-admission/config/crd"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/test/harness"
)

// binDir holds qn-controller as the Makefile builds it (binary), built
// once for the tests that run it as its own process: flags parsed from
// argv, SIGTERM handled by the signal handler, a process exit code.
var binDir string

var binary = sync.OnceValues(func() (string, error) {
	return harness.Build(context.Background(), binDir, "./cmd/qn-controller")
})

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "qn-controller-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// startController runs the built qn-controller against kubeconfig with
// args, stopped when the test ends; its output is in the test's log when
// the test fails.
func startController(t testing.TB, kubeconfig string, opts harness.ProcessOptions, args ...string) *harness.Controller {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	p, err := harness.StartController(bin, harness.ControllerOptions{Kubeconfig: kubeconfig, Args: args, Process: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Stop()
		if t.Failed() {
			t.Logf("qn-controller's output:\n%s", p.Logs())
		}
	})
	return p
}

// TestTheCommandAgainstAKubeconfig runs qn-controller the way
// `make run-controller` does, as its own process, against a real
// kube-apiserver reached through a kubeconfig file, with leader election
// on: it serves probes and metrics, reconciles, and on SIGTERM hands the
// Lease back and exits 0.
func TestTheCommandAgainstAKubeconfig(t *testing.T) {
	ours, err := crd.All()
	if err != nil {
		t.Fatal(err)
	}
	// The CRD is installed after the first run, which must refuse to start.
	env, cfg := harness.ControlPlane(t, harness.ControlPlaneOptions{WithoutCRDs: true})
	scheme, err := controller.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The controller runs as its ServiceAccount with exactly the rules of
	// config/rbac (envtest's API server authorizes with RBAC), so a verb
	// missing there fails here.
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "qn-system"}}); err != nil {
		t.Fatal(err)
	}
	applyManifests(t, c, "../../config/rbac")
	kubeconfig := kubeconfigOf(t, env, controllerUser)

	t.Run("without the CRD it says to install it and exits 1", func(t *testing.T) {
		p := startController(t, kubeconfig, harness.ProcessOptions{}, "--metrics-bind-address=0", "--health-probe-bind-address=0")
		select {
		case <-p.Exited():
		case <-time.After(60 * time.Second):
			t.Fatal("qn-controller did not exit within 60s")
		}
		if code := p.ExitCode(); code != 1 {
			t.Fatalf("exit = %d, want status 1; output:\n%s", code, p.Logs())
		}
		if want := "does not serve quantumnodes.qn.dev: install the CRD first (kubectl apply -f config/crd/qn.dev_quantumnodes.yaml)"; !strings.Contains(p.Logs(), want) {
			t.Errorf("output does not say %q:\n%s", want, p.Logs())
		}
	})
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: ours}); err != nil {
		t.Fatalf("install the QuantumNode CRD: %v", err)
	}

	// The audit judges with a policy directory of its own: one rule that
	// fails every QuantumNode, with a message the test looks for.
	policyDir := t.TempDir()
	for name, content := range map[string]string{
		"roles.yaml": "defaultRole: default\nroles:\n  default:\n    operations: [CREATE, UPDATE, DELETE]\n    packages: [t.all]\n",
		"all.rego":   "package t.all\n\ndeny contains \"every node fails this test policy\" if input.request.kind.kind == \"QuantumNode\"\n",
	} {
		if err := os.WriteFile(filepath.Join(policyDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := startController(t, kubeconfig, harness.ProcessOptions{StopGrace: 30 * time.Second},
		"--leader-elect", "--leader-election-namespace=qn-system",
		"--policy-dir="+policyDir, "--quiescence-window=0s", "--role-table=qn-admission",
		"--policy-poll-interval=100ms", "--strict-reload-grace=1s", "--pprof",
		"--log-format=text")
	metricsAddr, probeAddr := p.Metrics, p.Probe
	// alive fails the wait at once when the process has died.
	alive := func(check func() error) func() error {
		return func() error {
			select {
			case <-p.Exited():
				return fmt.Errorf("qn-controller exited with code %d", p.ExitCode())
			default:
				return check()
			}
		}
	}
	ctx := context.Background()

	eventually(t, "/healthz and /readyz answer 200", alive(func() error {
		for _, path := range []string{"/healthz", "/readyz"} {
			if _, err := get("http://" + probeAddr + path); err != nil {
				return err
			}
		}
		return nil
	}))
	// The samples double as the test's QuantumNodes: the API server's
	// schema checks them, and neither has its Node yet.
	applyManifests(t, c, "../../config/samples")
	qn := &qnv1alpha1.QuantumNode{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "edge-1"}}
	eventually(t, "the leader reconciles both samples", alive(func() error {
		list := &qnv1alpha1.QuantumNodeList{}
		if err := c.List(ctx, list, client.InNamespace("default")); err != nil {
			return err
		}
		if len(list.Items) != 2 {
			return fmt.Errorf("%d QuantumNodes, want the 2 samples", len(list.Items))
		}
		for _, got := range list.Items {
			if got.Status.Phase != qnv1alpha1.PhasePending {
				return fmt.Errorf("%s is %q", got.Name, got.Status.Phase)
			}
		}
		return nil
	}))
	eventually(t, "/metrics carries the reconcile metrics and the phase gauge", alive(func() error {
		body, err := get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return err
		}
		for _, want := range []string{
			`controller_runtime_reconcile_total{controller="quantumnode",result="success"}`,
			`controller_runtime_reconcile_time_seconds_count{controller="quantumnode"}`,
			`qn_controller_quantumnodes{phase="Pending"} 2`,
		} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("no %s", want)
			}
		}
		return nil
	}))
	eventually(t, "an event records the first phase", alive(func() error {
		events := &eventsv1.EventList{}
		if err := c.List(ctx, events, client.InNamespace("default")); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Regarding.Name == qn.Name && e.Reason == qnv1alpha1.ReasonNodeNotFound {
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(events.Items))
	}))
	eventually(t, "the audit judges the samples with --policy-dir", alive(func() error {
		got := &qnv1alpha1.QuantumNode{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(qn), got); err != nil {
			return err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == qnv1alpha1.ConditionPolicyCompliant && cond.Reason == qnv1alpha1.ReasonPolicyViolation &&
				strings.Contains(cond.Message, "every node fails this test policy") {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", got.Status.Conditions)
	}))
	eventually(t, "the role table's policy parameters follow --policy-dir (--role-table)", alive(func() error {
		rt := &qnv1alpha1.QuantumNodeRoleTable{}
		if err := c.Get(ctx, client.ObjectKey{Name: "qn-admission"}, rt); err != nil {
			return err
		}
		if rt.Spec.Source != policyDir || rt.Spec.DefaultRole != "default" || len(rt.Spec.Roles) != 1 {
			return fmt.Errorf("source %s, default %s, roles %v", rt.Spec.Source, rt.Spec.DefaultRole, rt.Spec.RoleNames)
		}
		return nil
	}))
	// Strict health as qn-webhook's: a broken policy push keeps the last
	// good set auditing and the replica live and ready, fails strict
	// health after the grace, and the fix clears it.
	eventually(t, "strict health passes and lists the checks", alive(func() error {
		return probeSays("http://"+probeAddr+"/healthz?strict=true&verbose", 200, "[+]informers ok", "[+]errors ok: ", "[+]policies ok: serving sha256:", "[+]sync ok: informers ", "behind the API server (heartbeat Lease qn-system/qn-controller-sync.qn.dev)")
	}))
	broken := filepath.Join(policyDir, "broken.rego")
	if err := os.WriteFile(broken, []byte("package t.broken\ndeny contains msg if {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "strict health fails on the broken push", alive(func() error {
		return probeSays("http://"+probeAddr+"/healthz?strict=true", 503, "[-]policies failed (strict): the policy source has failed to load for", "broken.rego")
	}))
	for _, path := range []string{"/healthz", "/readyz"} {
		if err := probeSays("http://"+probeAddr+path, 200, "ok"); err != nil {
			t.Errorf("a broken push must not fail plain %s: %v", path, err)
		}
	}
	eventually(t, "the failing gauge is on /metrics", alive(func() error {
		return probeSays("http://"+metricsAddr+"/metrics", 200, `qn_health_check_failing{check="policies"} 1`)
	}))
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	eventually(t, "strict health passes again after the fix", alive(func() error {
		return probeSays("http://"+probeAddr+"/healthz?strict=true", 200, "ok")
	}))
	if err := probeSays("http://"+probeAddr+"/debug/pprof/", 200, "goroutine"); err != nil {
		t.Errorf("--pprof serves the profile index on the probe address: %v", err)
	}

	lease := &coordinationv1.Lease{}
	leaseKey := client.ObjectKey{Namespace: "qn-system", Name: app.LeaderElectionID}
	if err := c.Get(ctx, leaseKey, lease); err != nil {
		t.Fatalf("the leader holds no Lease: %v", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Fatalf("Lease %s has no holder", leaseKey)
	}

	// Stop sends SIGTERM and waits up to 30s for an exit 0.
	if err := p.Stop(); err != nil {
		t.Fatalf("after SIGTERM: %v", err)
	}
	if err := c.Get(context.Background(), leaseKey, lease); err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("Lease still held by %s after shutdown; the next leader would wait for it to expire", *h)
	}
}

// controllerUser is qn-controller's ServiceAccount as the API server
// authenticates it.
var controllerUser = envtest.User{
	Name:   "system:serviceaccount:qn-system:qn-controller",
	Groups: []string{"system:serviceaccounts", "system:serviceaccounts:qn-system"},
}

// kubeconfigOf adds user to env's API server and returns a kubeconfig
// file that authenticates as it.
func kubeconfigOf(t *testing.T, env *envtest.Environment, user envtest.User) string {
	t.Helper()
	u, err := env.ControlPlane.AddUser(user, nil)
	if err != nil {
		t.Fatalf("add the user %s: %v", user.Name, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// applyManifests creates every object of every YAML file in dir.
func applyManifests(t *testing.T, c client.Client, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", dir, err)
	}
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		decoder := yaml.NewYAMLOrJSONDecoder(f, 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := decoder.Decode(&obj.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("decode %s: %v", file, err)
			}
			if len(obj.Object) == 0 {
				continue
			}
			if err := c.Create(context.Background(), obj); err != nil {
				t.Fatalf("create %s %s from %s: %v", obj.GetKind(), obj.GetName(), file, err)
			}
		}
		_ = f.Close()
	}
}

func get(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body), nil
}

// probeSays is nil when GET url answers code with a body containing every
// want.
func probeSays(url string, code int, want ...string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != code {
		return fmt.Errorf("GET %s: %s, want %d: %s", url, resp.Status, code, body)
	}
	for _, w := range want {
		if !strings.Contains(string(body), w) {
			return fmt.Errorf("GET %s: no %q in %s", url, w, body)
		}
	}
	return nil
}

// eventually waits up to 30 seconds until check returns nil.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	harness.WaitFor(t, 30*time.Second, what, check)
}
