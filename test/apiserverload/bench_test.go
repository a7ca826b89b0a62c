// Package apiserverload measures what an admission webhook adds to a
// QuantumNode create through the real kube-apiserver: one kube-apiserver
// and etcd with the CRD installed, and three configurations on it, each
// reached through a namespace of its own:
//
//   - none: no webhook is registered for the namespace (the baseline);
//   - ceiling: the bare-TLS webhook that admits everything
//     (test/load/cmd/ceiling), registered as validating and as mutating
//     webhook exactly as the chart registers qn-webhook;
//   - qn-webhook: the real qn-webhook as the chart runs it (its arguments
//     from the rendered Deployment: bundled policies, decision log to
//     stdout, Redis windows on a redis-server of its own, and the
//     GOMEMLIMIT it sets itself in the chart's container), registered by
//     the chart's webhook configurations.
//
// The chart renders both registrations; each excludes the other two
// namespaces through the chart's own webhook.namespaceSelector value, so
// the API server's webhook cache never changes while creates are timed.
// docs/benchmarks.md has the figures.
package apiserverload

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/quantumnode/qn-admission/certs"
	"github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
	"github.com/quantumnode/qn-admission/test/load"
)

// What the create latency of each configuration is, what the ceiling and
// qn-webhook add to its p50 over none, the ratio of the two against the
// target (qn-webhook adds at most 1.2 times what the ceiling adds), the
// CPU per create of kube-apiserver, etcd, each webhook and redis-server,
// and the mean duration of each webhook call as the API server timed it.
// The creates are real (stored), sequential, spread over 64 users so no
// rate window fills, the object the load suite's realtime fixture holds.
// The configurations take turns in blocks of 25 creates, in a rotating
// order, so a shared machine's load falls on all three alike; every block
// is checked to have gone through its webhooks and no other (the API
// server's per-webhook call counts, and qn-webhook's label on the stored
// object, present only there).
//
//	KUBEBUILDER_ASSETS=$(make -s k8s-bins) go test ./test/apiserverload/ -run XXX -bench . -benchtime 1000x -count 3
//
// With QN_APISERVERLOAD_PROFILE=<file>, qn-webhook runs with --pprof and
// each run writes a CPU profile of its first 30 seconds to <file>.<run>:
// where qn-webhook's time goes while the API server calls it. To measure a
// lever, QN_APISERVERLOAD_WEBHOOK_ARGS adds flags (space-separated) after
// the chart's, e.g. --window-store=memory, and QN_APISERVERLOAD_WEBHOOK_ENV
// environment variables, e.g. GOMAXPROCS=1. QN_APISERVERLOAD_TRACE=<file>
// takes an execution trace of qn-webhook's first 5 seconds of each run,
// QN_APISERVERLOAD_APISERVER_PROFILE=<file> a CPU profile of kube-apiserver.
//
// Each server's own time per call is reported beside the API server's
// (qn-webhook-validate-handler-ms, ceiling-both-handler-ms): the rest of a
// call is TLS, HTTP and the API server's work on the answer. With
// QN_APISERVERLOAD_CEILING_ARGS=--answer-like-qn=all the ceiling answers as
// qn-webhook does (status, audit annotations, the one-label patch), which
// tells what qn-webhook's answer costs the API server from what judging
// costs qn-webhook.
func BenchmarkWebhookCostThroughTheAPIServer(b *testing.B) {
	r := setUp(b)
	runs++
	ctx := context.Background()
	if profile := os.Getenv(profileEnv); profile != "" && b.N > 1 {
		done := r.profileWebhook(b, "profile?seconds=30", fmt.Sprintf("%s.%d", profile, runs))
		defer func() { <-done }()
	}
	if trace := os.Getenv(traceEnv); trace != "" && b.N > 1 {
		done := r.profileWebhook(b, "trace?seconds=5", fmt.Sprintf("%s.%d", trace, runs))
		defer func() { <-done }()
	}
	if profile := os.Getenv(apiserverProfileEnv); profile != "" && b.N > 1 {
		done := r.profileAPIServer(b, fmt.Sprintf("%s.%d", profile, runs))
		defer func() { <-done }()
	}
	machineBefore, _ := harness.ReadMachineCPU()
	b.Logf("load average before: %s", loadAverage())
	calls, err := r.webhookCalls(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range r.sides {
		s.reset()
	}
	handledBefore, err := r.handlerSeconds(ctx)
	if err != nil {
		b.Fatal(err)
	}
	const block = 25
	b.ResetTimer()
	for done, round := 0, 0; done < b.N; done, round = done+block, round+1 {
		n := min(block, b.N-done)
		for k := range r.sides {
			s := r.sides[(k+round)%len(r.sides)]
			before := r.processCPU()
			for i := done; i < done+n; i++ {
				s.latencies = append(s.latencies, s.create(b, fmt.Sprintf("r%d-%d", runs, i), i))
			}
			after := r.processCPU()
			for name, cpu := range after {
				s.cpu[name] += cpu - before[name]
			}
			b.StopTimer()
			now, err := r.webhookCalls(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := r.checkCalls(s, calls, now, n); err != nil {
				b.Fatalf("block %d of %s: %v", round, s.name, err)
			}
			for key, c := range now {
				s.callTime[key] += c.seconds - calls[key].seconds
			}
			calls = now
			handled, err := r.handlerSeconds(ctx)
			if err != nil {
				b.Fatal(err)
			}
			for webhook, sec := range handled {
				if strings.HasPrefix(webhook, s.name+" ") {
					s.handlerTime[strings.TrimPrefix(webhook, s.name+" ")] += sec - handledBefore[webhook]
				}
			}
			handledBefore = handled
			b.StartTimer()
		}
	}
	b.StopTimer()
	machineAfter, _ := harness.ReadMachineCPU()
	b.Logf("load average after: %s; machine busy %.0f%% of both cores during the run", loadAverage(),
		100*float64(machineAfter.Busy-machineBefore.Busy)/float64(machineAfter.Total-machineBefore.Total))
	r.report(b)
}

// runs numbers the benchmark's runs, for object names of their own.
var runs int

// users is how many requesters share the creates of a configuration: with
// the realtime role's window (120 a minute per user) and 1,000 creates a
// run, none fills.
const users = 64

// side is one configuration: its namespace, its requesters, and what one
// run measured.
type side struct {
	name string
	ns   string
	// webhooks are the names of the webhooks that must judge each of its
	// creates; patched says qn-webhook's label must be on the stored object.
	webhooks []string
	patched  bool
	nodes    []dynamic.ResourceInterface
	object   map[string]any
	// server is the webhook server behind the configuration (nil for
	// none), whose last output explains a failed create.
	server *load.Server

	latencies []time.Duration
	// cpu is the CPU time of each process (by name) during its blocks.
	cpu map[string]time.Duration
	// callTime is the time the API server spent in each of its webhooks'
	// calls (by webhookKey).
	callTime map[string]float64
	// handlerTime is the time qn-webhook's handler spent on its calls, as
	// its own request duration metric counts it (by webhook: validate,
	// mutate), from the request's headers read to the answer written and
	// the decision logged.
	handlerTime map[string]float64
}

func (s *side) reset() {
	s.latencies = s.latencies[:0]
	s.cpu = map[string]time.Duration{}
	s.callTime = map[string]float64{}
	s.handlerTime = map[string]float64{}
}

// create stores one QuantumNode named name as requester i, checks that it
// carries qn-webhook's label exactly when qn-webhook judged it, and
// returns the client's latency.
func (s *side) create(b *testing.B, name string, i int) time.Duration {
	obj := s.objectNamed(name)
	start := time.Now()
	stored, err := s.nodes[i%len(s.nodes)].Create(context.Background(), obj, metav1.CreateOptions{})
	took := time.Since(start)
	if err != nil {
		b.Fatalf("%s: create %s after %s: %v%s", s.name, name, took.Round(time.Millisecond), err, s.serverTail())
	}
	if got := stored.GetLabels()[managedByLabel]; (got == managedByValue) != s.patched {
		b.Fatalf("%s: stored %s with %s=%q: qn-webhook's mutation must be there exactly when qn-webhook judges", s.name, name, managedByLabel, got)
	}
	return took
}

// serverTail is the end of the webhook server's output, for a failure's
// message: qn-webhook's decision lines say which requests it answered and
// how long each took.
func (s *side) serverTail() string {
	if s.server == nil {
		return ""
	}
	logs := s.server.Logs()
	return fmt.Sprintf("\n%s's last output:\n%s", s.name, logs[max(0, len(logs)-16<<10):])
}

// The label the bundled mutation (qn.mutate.managedby) adds.
const (
	managedByLabel = "qn.dev/managed-by"
	managedByValue = "qn-admission"
)

// rig is what every run shares: the control plane, both webhook servers
// and the three configurations.
type rig struct {
	dir     string
	cluster *harness.Cluster
	ceiling *load.Server
	qn      *load.Server
	// qnProbe is qn-webhook's probe address (its /debug/pprof).
	qnProbe string
	// ceilingClient reads the ceiling's /handled.
	ceilingClient *http.Client
	// pids are the processes whose CPU time is counted, by name.
	pids  map[string]int
	sides []*side
}

var (
	rigOnce sync.Once
	theRig  *rig
	rigErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if theRig != nil {
		if err := theRig.stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// setUp starts the rig once for every run of the benchmark.
func setUp(b *testing.B) *rig {
	b.Helper()
	rigOnce.Do(func() {
		// envtest logs through controller-runtime's logger, which prints a
		// stack trace when nobody set it within 30 s.
		ctrllog.SetLogger(logr.Discard())
		theRig = &rig{pids: map[string]int{}}
		rigErr = theRig.start(context.Background())
	})
	if rigErr != nil {
		b.Fatal(rigErr)
	}
	return theRig
}

// The namespaces of the three configurations, and the release namespace
// the chart is rendered for.
const (
	nsNone    = "bench-none"
	nsCeiling = "bench-ceiling"
	nsQN      = "bench-qn-webhook"
	release   = "qn-system"
	// writers is the group the requesters are in, allowed to write
	// QuantumNodes by RBAC.
	writers = "qn:bench-writers"
)

func (r *rig) start(ctx context.Context) error {
	var err error
	if r.dir, err = os.MkdirTemp("", "qn-apiserverload-"); err != nil {
		return err
	}
	qnBin, err := harness.Build(ctx, r.dir, "./cmd/qn-webhook")
	if err != nil {
		return err
	}
	ceilingBin, err := harness.Build(ctx, r.dir, "./test/load/cmd/ceiling")
	if err != nil {
		return err
	}
	if r.cluster, err = harness.StartCluster(); err != nil {
		return err
	}
	if r.pids["kube-apiserver"], err = r.cluster.APIServerPID(); err != nil {
		return err
	}
	if r.pids["etcd"], err = r.cluster.EtcdPID(); err != nil {
		return err
	}
	// The benchmark's own process: the client, and the reader of
	// qn-webhook's stdout (its decision log, as a container runtime reads
	// it), which must not be what tells the configurations apart.
	r.pids["client"] = os.Getpid()
	if err := r.grantWriters(ctx); err != nil {
		return err
	}
	// The chart, rendered once per webhook: each configuration leaves the
	// namespaces of the other two out, through the chart's own value.
	ceilingRelease, err := renderExcluding(nsNone, nsQN)
	if err != nil {
		return err
	}
	qnRelease, err := renderExcluding(nsNone, nsCeiling)
	if err != nil {
		return err
	}
	args, env, err := webhookAsTheChartRunsIt(qnRelease)
	if err != nil {
		return err
	}
	if os.Getenv(profileEnv) != "" || os.Getenv(traceEnv) != "" {
		args = append(args, "--pprof")
	}
	args = append(args, strings.Fields(os.Getenv(extraArgsEnv))...)
	env = append(env, strings.Fields(os.Getenv(extraEnvEnv))...)
	qnCerts, ceilingCerts := filepath.Join(r.dir, "qn-certs"), filepath.Join(r.dir, "ceiling-certs")
	if r.qn, err = load.StartWebhookWithRedis("qn-webhook", qnBin, qnCerts, env, args...); err != nil {
		return err
	}
	r.pids["qn-webhook"] = r.qn.PID
	// Read now: the decision log soon pushes the line out of what is kept.
	r.qnProbe = r.qn.LogField(harness.ServingMessage, "probeAddress")
	r.pids["redis-server"] = r.qn.HelperPIDs[0]
	if r.ceiling, err = load.StartCeiling(ceilingBin, ceilingCerts, strings.Fields(os.Getenv(ceilingArgsEnv))...); err != nil {
		return err
	}
	r.ceilingClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: r.ceiling.RootCAs, MinVersion: tls.VersionTLS12}}}
	r.pids["ceiling"] = r.ceiling.PID
	ceilingHooks, err := register(ctx, r.cluster, ceilingRelease, "qn-bench-ceiling", "ceiling.", r.ceiling, ceilingCerts)
	if err != nil {
		return err
	}
	qnHooks, err := register(ctx, r.cluster, qnRelease, "qn-admission", "", r.qn, qnCerts)
	if err != nil {
		return err
	}
	object, err := realtimeNode()
	if err != nil {
		return err
	}
	r.sides = []*side{
		{name: "none", ns: nsNone},
		{name: "ceiling", ns: nsCeiling, webhooks: ceilingHooks, server: r.ceiling},
		{name: "qn-webhook", ns: nsQN, webhooks: qnHooks, patched: true, server: r.qn},
	}
	for _, s := range r.sides {
		s.object = object
		if _, err := r.cluster.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		for i := range users {
			dyn, err := r.cluster.As(fmt.Sprintf("bench-user-%02d", i), writers)
			if err != nil {
				return err
			}
			s.nodes = append(s.nodes, dyn.Resource(harness.QuantumNodes).Namespace(s.ns))
		}
	}
	// The API server picks new webhook configurations up within a second
	// or so: wait until every namespace reaches its webhooks and no other.
	if err := harness.Eventually(ctx, 60*time.Second, func() error { return r.probe(ctx) }); err != nil {
		return fmt.Errorf("waiting until each namespace reaches its own webhooks: %w", err)
	}
	// Warm every requester's path (client connection, the API server's
	// connections to the webhooks, qn-webhook's Redis connections).
	for _, s := range r.sides {
		for i := range s.nodes {
			if _, err := s.nodes[i].Create(ctx, s.objectNamed(fmt.Sprintf("warm-%d", i)), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("%s: warm-up create: %w", s.name, err)
			}
		}
	}
	return nil
}

func (s *side) objectNamed(name string) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: runtime.DeepCopyJSON(s.object)}
	obj.SetName(name)
	return obj
}

// probe makes one dry-run create in each namespace and checks that it went
// through that configuration's webhooks only.
func (r *rig) probe(ctx context.Context) error {
	calls, err := r.webhookCalls(ctx)
	if err != nil {
		return err
	}
	for _, s := range r.sides {
		stored, err := s.nodes[0].Create(ctx, s.objectNamed("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return fmt.Errorf("%s: dry-run create: %w", s.name, err)
		}
		now, err := r.webhookCalls(ctx)
		if err != nil {
			return err
		}
		if err := r.checkCalls(s, calls, now, 1); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		if got := stored.GetLabels()[managedByLabel]; (got == managedByValue) != s.patched {
			return fmt.Errorf("%s: %s=%q on the dry-run object", s.name, managedByLabel, got)
		}
		calls = now
	}
	return nil
}

func (r *rig) stop() error {
	var errs []string
	for _, s := range []*load.Server{r.qn, r.ceiling} {
		if s != nil {
			if err := s.Stop(); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if r.cluster != nil {
		if err := r.cluster.Stop(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	os.RemoveAll(r.dir)
	if len(errs) > 0 {
		return fmt.Errorf("stopping the benchmark's processes: %s", strings.Join(errs, "; "))
	}
	return nil
}

// grantWriters lets the writers group create QuantumNodes, so every
// requester is an ordinary user authorized by RBAC, as in a cluster.
func (r *rig) grantWriters(ctx context.Context) error {
	rbac := r.cluster.Kube.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "qn-bench-writer"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{harness.QuantumNodes.Group}, Resources: []string{harness.QuantumNodes.Resource}, Verbs: []string{"create"}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "qn-bench-writer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "qn-bench-writer"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: writers}},
	}, metav1.CreateOptions{})
	return err
}

// renderExcluding renders the chart with its default values but for the
// namespaces its webhooks leave out (kube-system, as by default, and
// exclude).
func renderExcluding(exclude ...string) (*chartrender.Release, error) {
	excluded := []any{"kube-system"} // values as YAML decodes them
	for _, ns := range exclude {
		excluded = append(excluded, ns)
	}
	return chartrender.Render("qn", release, map[string]any{
		"webhook": map[string]any{"namespaceSelector": map[string]any{"excludeNamespaces": excluded}},
	})
}

// decodeObject converts a rendered object into its typed form.
func decodeObject(obj *unstructured.Unstructured, into any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, into, true); err != nil {
		return fmt.Errorf("the chart's %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return nil
}

// webhookAsTheChartRunsIt returns the arguments of qn-webhook's container
// in the rendered Deployment, less those that only make sense in a Pod
// (listen addresses, the mounted serving certificate, the bundled Redis'
// Service name), which the load suite's helpers set for this machine; and
// the environment that gives the process the memory limit it sets itself
// in the chart's container: GOMEMLIMIT at three quarters of the
// container's limit (cmd/qn-webhook/app/memlimit.go), so GOGC=400.
func webhookAsTheChartRunsIt(rel *chartrender.Release) (args, env []string, err error) {
	var container *corev1.Container
	for _, obj := range rel.Objects {
		if obj.GetKind() != "Deployment" {
			continue
		}
		var dep appsv1.Deployment
		if err := decodeObject(obj, &dep); err != nil {
			return nil, nil, err
		}
		for i, c := range dep.Spec.Template.Spec.Containers {
			if c.Name == "qn-webhook" {
				container = &dep.Spec.Template.Spec.Containers[i]
			}
		}
	}
	if container == nil {
		return nil, nil, fmt.Errorf("the chart renders no qn-webhook container")
	}
	podOnly := []string{"--listen-address", "--probe-address", "--tls-cert-file", "--tls-key-file", "--redis-address"}
	for _, arg := range container.Args {
		flag, value, _ := strings.Cut(arg, "=")
		if slices.Contains(podOnly, flag) {
			continue
		}
		if strings.HasPrefix(value, "/etc/") {
			return nil, nil, fmt.Errorf("the chart's qn-webhook argument %s names a file mounted in its Pod, which this benchmark does not reproduce", arg)
		}
		args = append(args, arg)
	}
	if !slices.Contains(args, "--window-store=redis") {
		return nil, nil, fmt.Errorf("the chart no longer runs Redis windows by default (%v): the shipped configuration this benchmark measures has changed", args)
	}
	limit, ok := container.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		return nil, nil, fmt.Errorf("the chart's qn-webhook container has no memory limit, so no GOMEMLIMIT to reproduce")
	}
	return args, []string{"GOMEMLIMIT=" + strconv.FormatInt(limit.Value()/4*3, 10)}, nil
}

// webhookConfigurations are the two kinds of webhook configuration the
// chart renders: their resource, and the admission type the API server's
// metrics name their webhooks' calls by.
var webhookConfigurations = map[string]struct{ resource, admissionType string }{
	"ValidatingWebhookConfiguration": {"validatingwebhookconfigurations", "validating"},
	"MutatingWebhookConfiguration":   {"mutatingwebhookconfigurations", "admit"},
}

// register creates the chart's validating and mutating webhook
// configurations from rel, named name, pointing at target: the rules,
// timeouts, failurePolicy, sideEffects, matchPolicy, reinvocationPolicy
// and namespaceSelector as rendered; only the Service reference becomes
// target's URL (with the CA in certDir), and each webhook's name gets
// prefix. It returns the webhooks that judge a QuantumNode create, by
// webhookKey.
func register(ctx context.Context, c *harness.Cluster, rel *chartrender.Release, name, prefix string, target *load.Server, certDir string) ([]string, error) {
	caBundle, _, err := harness.ReadCA(filepath.Join(certDir, certs.CAFileName))
	if err != nil {
		return nil, err
	}
	var createHooks []string
	var found int
	for _, obj := range rel.Objects {
		kind, ok := webhookConfigurations[obj.GetKind()]
		if !ok {
			continue
		}
		found++
		cfg := obj.DeepCopy()
		cfg.Object["metadata"] = map[string]any{"name": name, "labels": obj.GetLabels()}
		hooks, _, err := unstructured.NestedSlice(cfg.Object, "webhooks")
		if err != nil {
			return nil, fmt.Errorf("the chart's %s: %w", obj.GetKind(), err)
		}
		for _, h := range hooks {
			w, _ := h.(map[string]any)
			var hook struct {
				Name         string                                       `json:"name"`
				ClientConfig admissionregistrationv1.WebhookClientConfig  `json:"clientConfig"`
				Rules        []admissionregistrationv1.RuleWithOperations `json:"rules"`
			}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(w, &hook); err != nil {
				return nil, fmt.Errorf("the chart's %s: %w", obj.GetKind(), err)
			}
			if hook.ClientConfig.Service == nil || hook.ClientConfig.Service.Path == nil {
				return nil, fmt.Errorf("the chart's %s: webhook %s has no Service path", obj.GetKind(), hook.Name)
			}
			w["name"] = prefix + hook.Name
			w["clientConfig"] = map[string]any{"url": target.BaseURL + *hook.ClientConfig.Service.Path, "caBundle": base64.StdEncoding.EncodeToString(caBundle)}
			if judgesCreate(hook.Rules) {
				createHooks = append(createHooks, webhookKey(prefix+hook.Name, kind.admissionType))
			}
		}
		if err := unstructured.SetNestedSlice(cfg.Object, hooks, "webhooks"); err != nil {
			return nil, err
		}
		gvr := admissionregistrationv1.SchemeGroupVersion.WithResource(kind.resource)
		if _, err := c.Dynamic.Resource(gvr).Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("register the chart's %s as %s: %w", obj.GetKind(), name, err)
		}
	}
	if found != 2 || len(createHooks) != 2 {
		return nil, fmt.Errorf("the chart renders %d webhook configurations with %d webhooks for QuantumNode creates (%v); this benchmark expects a validating and a mutating one", found, len(createHooks), createHooks)
	}
	return createHooks, nil
}

// judgesCreate says whether rules send QuantumNode creates.
func judgesCreate(rules []admissionregistrationv1.RuleWithOperations) bool {
	for _, rule := range rules {
		if slices.Contains(rule.Resources, harness.QuantumNodes.Resource) &&
			(slices.Contains(rule.Operations, admissionregistrationv1.Create) || slices.Contains(rule.Operations, admissionregistrationv1.OperationAll)) {
			return true
		}
	}
	return false
}

// realtimeNode is the QuantumNode of the load suite's realtime create
// fixture, as a client sends it: what the bundled policies admit after
// evaluating the role table, both realtime conditions and the window.
func realtimeNode() (map[string]any, error) {
	fixtures, err := load.LoadFixtures(load.DefaultFixtureDir(harness.ModuleRoot()))
	if err != nil {
		return nil, err
	}
	const name = "realtime-create-allowed.json"
	i := slices.IndexFunc(fixtures, func(f *load.Fixture) bool { return f.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("the load suite has no fixture %s", name)
	}
	var obj map[string]any
	if err := json.Unmarshal(fixtures[i].Object, &obj); err != nil {
		return nil, err
	}
	u := unstructured.Unstructured{Object: obj}
	// What the API server sets, not the client.
	for _, field := range []string{"uid", "namespace", "generation", "creationTimestamp", "managedFields", "resourceVersion"} {
		unstructured.RemoveNestedField(u.Object, "metadata", field)
	}
	return u.Object, nil
}

// webhookKey names a webhook's series in the API server's metrics: its
// name and the admission type (admit for mutating, validating).
func webhookKey(name, typ string) string { return name + " " + typ }

// webhookCall is what the API server's histogram
// apiserver_admission_webhook_admission_duration_seconds holds for one
// webhook's CREATE calls.
type webhookCall struct {
	count, seconds float64
}

var (
	webhookSeries = regexp.MustCompile(`^apiserver_admission_webhook_admission_duration_seconds_(count|sum)\{(.*)\} (\S+)$`)
	metricLabel   = regexp.MustCompile(`(\w+)="([^"]*)"`)
)

// webhookCalls reads the API server's /metrics: the calls it made to each
// webhook for CREATE requests, and the time they took. A rejected call is
// an error: every create here is admitted.
func (r *rig) webhookCalls(ctx context.Context) (map[string]webhookCall, error) {
	page, err := r.cluster.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("the API server's /metrics: %w", err)
	}
	out := map[string]webhookCall{}
	for line := range strings.SplitSeq(string(page), "\n") {
		m := webhookSeries.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range metricLabel.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = l[2]
		}
		if labels["operation"] != "CREATE" {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return nil, fmt.Errorf("the API server's /metrics: %q: %w", line, err)
		}
		key := webhookKey(labels["name"], labels["type"])
		if labels["rejected"] == "true" && m[1] == "count" && v > 0 {
			return nil, fmt.Errorf("the API server counts %v rejected CREATE calls to %s: every create here must be admitted", v, key)
		}
		c := out[key]
		if m[1] == "count" {
			c.count += v
		} else {
			c.seconds += v
		}
		out[key] = c
	}
	return out, nil
}

// handlerSeries is qn-webhook's own time per webhook.
var handlerSeries = regexp.MustCompile(`^qn_admission_request_duration_seconds_sum\{webhook="(\w+)"\} (\S+)$`)

// handlerSeconds is the time each webhook server's handler spent on its
// calls so far, as the server counts it: qn-webhook's by webhook
// ("qn-webhook validate", "qn-webhook mutate"), the ceiling's both
// together ("ceiling both").
func (r *rig) handlerSeconds(ctx context.Context) (map[string]float64, error) {
	out, err := r.qnHandlerSeconds(ctx)
	if err != nil {
		return nil, err
	}
	page, err := get(ctx, r.ceilingClient, r.ceiling.BaseURL+"/handled", "the ceiling's /handled")
	if err != nil {
		return nil, err
	}
	var handled struct{ Seconds float64 }
	if err := json.Unmarshal(page, &handled); err != nil {
		return nil, fmt.Errorf("the ceiling's /handled: %w", err)
	}
	out["ceiling both"] = handled.Seconds
	return out, nil
}

// get reads url with client; what names it in errors.
func get(ctx context.Context, client *http.Client, url, what string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, page)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return page, nil
}

// qnHandlerSeconds reads qn-webhook's /metrics: the time its handler
// spent on the requests of each webhook so far.
func (r *rig) qnHandlerSeconds(ctx context.Context) (map[string]float64, error) {
	page, err := get(ctx, http.DefaultClient, "http://"+r.qnProbe+"/metrics", "qn-webhook's /metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(page), "\n") {
		if m := handlerSeries.FindStringSubmatch(line); m != nil {
			v, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				return nil, fmt.Errorf("qn-webhook's /metrics: %q: %w", line, err)
			}
			out["qn-webhook "+m[1]] = v
		}
	}
	return out, nil
}

// checkCalls says whether, between before and after, the API server called
// each of s's webhooks n times and no other webhook at all.
func (r *rig) checkCalls(s *side, before, after map[string]webhookCall, n int) error {
	var wrong []string
	for key, c := range after {
		got := c.count - before[key].count
		want := 0.0
		if slices.Contains(s.webhooks, key) {
			want = float64(n)
		}
		if got != want {
			wrong = append(wrong, fmt.Sprintf("%s called %v times, want %v", key, got, want))
		}
	}
	for _, key := range s.webhooks {
		if _, ok := after[key]; !ok {
			wrong = append(wrong, key+" never called")
		}
	}
	if len(wrong) > 0 {
		slices.Sort(wrong)
		return fmt.Errorf("%d creates: %s", n, strings.Join(wrong, "; "))
	}
	return nil
}

// processCPU is the CPU time of every process counted.
func (r *rig) processCPU() map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, pid := range r.pids {
		if st, err := harness.ReadProc(pid); err == nil {
			out[name] = st.CPU
		}
	}
	return out
}

// report reports one run's figures.
func (r *rig) report(b *testing.B) {
	p50 := map[string]float64{}
	for _, s := range r.sides {
		slices.Sort(s.latencies)
		n := float64(len(s.latencies))
		p50[s.name] = ms(s.latencies[len(s.latencies)/2])
		b.ReportMetric(p50[s.name], s.name+"-p50-ms")
		b.ReportMetric(ms(s.latencies[len(s.latencies)*99/100]), s.name+"-p99-ms")
		processes := []string{"kube-apiserver", "etcd", "client"}
		switch s.name {
		case "ceiling":
			processes = append(processes, "ceiling")
		case "qn-webhook":
			processes = append(processes, "qn-webhook", "redis-server")
		}
		for _, p := range processes {
			b.ReportMetric(ms(s.cpu[p])/n, s.name+"-"+p+"-cpu-ms/op")
		}
		for _, key := range s.webhooks {
			typ := "validating"
			if strings.HasSuffix(key, " admit") {
				typ = "mutating"
			}
			b.ReportMetric(1000*s.callTime[key]/n, s.name+"-"+typ+"-call-ms")
		}
		for webhook, sec := range s.handlerTime {
			b.ReportMetric(1000*sec/n, s.name+"-"+webhook+"-handler-ms")
		}
	}
	ceilingAdds := p50["ceiling"] - p50["none"]
	qnAdds := p50["qn-webhook"] - p50["none"]
	b.ReportMetric(ceilingAdds, "ceiling-adds-p50-ms")
	b.ReportMetric(qnAdds, "qn-webhook-adds-p50-ms")
	if ceilingAdds > 0 {
		b.ReportMetric(qnAdds/ceilingAdds, "qn/ceiling-added-x")
	}
}

// profileEnv names the file prefix of qn-webhook's CPU profiles, and
// extraArgsEnv holds flags for qn-webhook beyond the chart's.
const (
	profileEnv = "QN_APISERVERLOAD_PROFILE"
	// traceEnv names the file prefix of qn-webhook's execution traces (5
	// seconds from each run's start; go tool trace -pprof=sched shows
	// where its goroutines waited for a CPU).
	traceEnv            = "QN_APISERVERLOAD_TRACE"
	apiserverProfileEnv = "QN_APISERVERLOAD_APISERVER_PROFILE"
	// ceilingArgsEnv holds flags for the ceiling, e.g. --answer-like-qn.
	ceilingArgsEnv = "QN_APISERVERLOAD_CEILING_ARGS"
	extraArgsEnv   = "QN_APISERVERLOAD_WEBHOOK_ARGS"
	// extraEnvEnv holds environment variables for qn-webhook
	// (space-separated NAME=value), e.g. GOGC=100.
	extraEnvEnv = "QN_APISERVERLOAD_WEBHOOK_ENV"
)

// profileAPIServer writes a 30-second CPU profile of kube-apiserver to
// file (its /debug/pprof, as the admin); the channel is closed once it is
// written.
func (r *rig) profileAPIServer(b *testing.B, file string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		data, err := r.cluster.Kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "30").DoRaw(context.Background())
		if err == nil {
			err = os.WriteFile(file, data, 0o644)
		}
		if err != nil {
			b.Errorf("kube-apiserver's CPU profile: %v", err)
			return
		}
		b.Logf("kube-apiserver's CPU profile: %s", file)
	}()
	return done
}

// profileWebhook writes what qn-webhook's /debug/pprof/<what> answers (a
// CPU profile, an execution trace) to file; the channel is closed once it
// is written.
func (r *rig) profileWebhook(b *testing.B, what, file string) <-chan struct{} {
	done := make(chan struct{})
	probe := r.qnProbe
	go func() {
		defer close(done)
		data, err := get(context.Background(), http.DefaultClient, "http://"+probe+"/debug/pprof/"+what, "qn-webhook's "+what)
		if err == nil {
			err = os.WriteFile(file, data, 0o644)
		}
		if err != nil {
			b.Error(err)
			return
		}
		b.Logf("qn-webhook's %s: %s", what, file)
	}()
	return done
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}
