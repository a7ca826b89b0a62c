package quantumnode

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/controller/health"
	testharness "github.com/quantumnode/qn-admission/test/harness"
)

// BenchmarkEnvtestSelfHealingOf10000NodesWithANodeFlapping runs one
// QuantumNodeHealthPolicy over 10,000 QuantumNodes (QN_HEAL_BENCH_NODES for
// fewer), 100 per Node, in a manager of its own whose API requests are
// counted, and measures a quiet minute, then a minute with one Node
// flapping (NotReady 5s, Ready 5s): requests to the API server by verb,
// reconciles, the manager's process CPU and kube-apiserver's. The claim it
// checks: health costs no API call per node; only the nodes whose health
// changes write.
func BenchmarkEnvtestSelfHealingOf10000NodesWithANodeFlapping(b *testing.B) {
	nodes := 10000
	if n, err := strconv.Atoi(os.Getenv("QN_HEAL_BENCH_NODES")); err == nil && n > 0 {
		nodes = n
	}
	const perNode = 100
	window := time.Minute
	if d, err := time.ParseDuration(os.Getenv("QN_HEAL_BENCH_WINDOW")); err == nil && d > 0 {
		window = d
	}
	h := startControlPlane(b)
	ctx := context.Background()
	label := fmt.Sprintf("heal%d", namespaces.Add(1))
	policy := "bench-" + label
	p := &qnv1alpha1.QuantumNodeHealthPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policy, Labels: map[string]string{auditTestLabel: label}},
		Spec: qnv1alpha1.QuantumNodeHealthPolicySpec{
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{testLabel: policy}},
			Node:        qnv1alpha1.NodeReadyCheck{DegradedAfter: dur(2 * time.Second), FailedAfter: dur(time.Hour)},
			Remediation: &qnv1alpha1.RemediationPolicy{Restart: &qnv1alpha1.RestartStep{}},
		},
	}
	if err := h.client.Create(ctx, p); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.client.Delete(context.Background(), p) })

	requests := &verbCounter{counts: map[string]int{}}
	r := h.startSelfHealing(b, label, requests)
	ns := h.namespace(b)
	setup := rest.CopyConfig(h.cfg)
	setup.QPS, setup.Burst = 1000, 2000
	fast, err := client.New(setup, client.Options{Scheme: h.scheme})
	if err != nil {
		b.Fatal(err)
	}
	var nodeNames []string
	for i := range (nodes + perNode - 1) / perNode {
		n := fmt.Sprintf("%s-w%03d", label, i)
		nodeNames = append(nodeNames, n)
		h.createNode(b, n, "arm64", true, nil)
	}
	began := time.Now()
	parallel(b, 8, nodes, func(i int) error {
		qn := &qnv1alpha1.QuantumNode{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("n-%05d", i), Labels: map[string]string{auditTestLabel: label, testLabel: policy}},
			Spec: qnv1alpha1.QuantumNodeSpec{Hardware: qnv1alpha1.Hardware{Arch: qnv1alpha1.ArchARM64}, Services: []qnv1alpha1.Service{{Name: "grpc", Port: 9090}},
				NodeName: nodeNames[i/perNode]},
		}
		return fast.Create(ctx, qn)
	})
	b.Logf("created %d QuantumNodes in %.0fs", nodes, time.Since(began).Seconds())
	countHealthy := func() (healthy, ready int) {
		list := &qnv1alpha1.QuantumNodeList{}
		if err := fast.List(ctx, list, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		for i := range list.Items {
			if list.Items[i].Status.Health == qnv1alpha1.HealthHealthy {
				healthy++
			}
			if list.Items[i].Status.Rollout != nil && list.Items[i].Status.Rollout.ReadyRevision != "" {
				ready++
			}
		}
		return healthy, ready
	}
	eventuallyWithin(b, time.Duration(nodes)*200*time.Millisecond, fmt.Sprintf("all %d nodes Healthy with a Ready revision", nodes), func() error {
		time.Sleep(15 * time.Second) // listing every node is itself work
		if hl, rd := countHealthy(); hl != nodes || rd != nodes {
			if os.Getenv("QN_HEAL_BENCH_DEBUG") != "" {
				fmt.Fprintf(os.Stderr, "%s: %d Healthy, %d with a Ready revision\n", time.Since(began).Round(time.Second), hl, rd)
			}
			return fmt.Errorf("%d Healthy, %d with a Ready revision", hl, rd)
		}
		return nil
	})
	b.Logf("settled %.0fs after the first create (Service, revision and status of each)", time.Since(began).Seconds())

	// One census of every node, as maxUnhealthy and the policy's status
	// take it, timed directly.
	list := &qnv1alpha1.QuantumNodeHealthPolicyList{}
	if err := h.client.List(ctx, list); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	census, err := r.heal.Books().Count(ctx, health.Compile(list.Items))
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("a census of %d cached QuantumNodes took %s (%d selected)", nodes, time.Since(start).Round(time.Microsecond), census[policy].Selected)

	apiserver := apiserverPID(b, h.cfg.Host)
	b.ResetTimer()
	for range b.N {
		quiet := measure(b, requests, apiserver, window, nil)
		flipped := 0
		flapping := measure(b, requests, apiserver, window, func(stop <-chan struct{}) {
			ready := true
			tick := time.NewTicker(5 * time.Second)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					h.setNodeReady(b, nodeNames[0], true)
					return
				case <-tick.C:
					ready = !ready
					h.setNodeReady(b, nodeNames[0], ready)
					flipped++
				}
			}
		})
		b.StopTimer()
		for _, m := range []struct {
			name string
			s    sample
		}{{"quiet", quiet}, {"flapping", flapping}} {
			b.Logf("%s %s: %.2f requests/s (%s), %.1f reconciles/s, manager CPU %.1f%% (%.0f µs per reconcile), kube-apiserver CPU %.1f%%",
				m.name, window, m.s.requestsPerSecond(), m.s.verbs(), m.s.reconcilesPerSecond(), 100*m.s.cpu/m.s.elapsed.Seconds(),
				1e6*m.s.cpu/max(float64(m.s.reconciles), 1), 100*m.s.apiserverCPU/m.s.elapsed.Seconds())
		}
		b.Logf("%d flips of node %s (%d QuantumNodes on it): %.1f writes per flip", flipped, nodeNames[0], perNode, float64(flapping.writes())/max(float64(flipped), 1))
		b.ReportMetric(flapping.requestsPerSecond(), "requests/s")
		b.ReportMetric(float64(flapping.writes())/max(float64(flipped), 1), "writes/flip")
		b.ReportMetric(quiet.requestsPerSecond(), "quiet-requests/s")
		b.ReportMetric(1e6*flapping.cpu/max(float64(flapping.reconciles), 1), "µs-cpu/reconcile")
		b.StartTimer()
	}
}

// startSelfHealing runs a manager of its own over the QuantumNodes
// labelled auditTestLabel=label (the shared manager ignores them), its
// requests counted by verb: 8 reconciles at once and a client of QPS 200
// (the command's defaults are 2 and 20), so that the first sync of 10,000
// new nodes (a Service, a revision and a status each) ends in minutes on
// a shared machine; the windows measured after it are quiet or nearly.
func (h *harness) startSelfHealing(b *testing.B, label string, requests *verbCounter) *Reconciler {
	b.Helper()
	cfg := rest.CopyConfig(h.cfg)
	cfg.QPS, cfg.Burst = 200, 400
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return verbTransport{next: rt, counter: requests} })
	mine, err := labels.Parse(auditTestLabel + "=" + label)
	if err != nil {
		b.Fatal(err)
	}
	cacheOpts := controller.CacheOptions()
	cacheOpts.ByObject[&qnv1alpha1.QuantumNode{}] = cache.ByObject{Label: mine}
	cacheOpts.ByObject[&qnv1alpha1.QuantumNodeHealthPolicy{}] = cache.ByObject{Label: mine}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: h.scheme, Cache: cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		b.Fatal(err)
	}
	r := &Reconciler{Metrics: prometheus.NewRegistry(), MaxConcurrentReconciles: 8, QuiescenceWindow: 3 * time.Second, MaxRequeueDelay: 30 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		cancel()
		b.Fatal(err)
	}
	runManager(b, ctx, cancel, mgr, "self-healing", nil)
	return r
}

// verbCounter counts a manager's API requests by verb (a GET with
// watch=true is a watch).
type verbCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

type verbTransport struct {
	next    http.RoundTripper
	counter *verbCounter
}

func (t verbTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	verb := req.Method
	if req.Method == http.MethodGet && req.URL.Query().Get("watch") == "true" {
		verb = "WATCH"
	}
	t.counter.mu.Lock()
	t.counter.counts[verb]++
	if os.Getenv("QN_HEAL_BENCH_DEBUG") != "" {
		parts := strings.Split(req.URL.Path, "/")
		if len(parts) > 6 {
			parts = parts[:6]
		}
		t.counter.counts["debug "+verb+" "+strings.Join(parts, "/")]++
	}
	t.counter.mu.Unlock()
	return t.next.RoundTrip(req)
}

func (c *verbCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// sample is one measurement window.
type sample struct {
	elapsed      time.Duration
	byVerb       map[string]int
	reconciles   int64
	cpu          float64 // seconds, this process
	apiserverCPU float64 // seconds
}

func (s sample) total() int {
	n := 0
	for verb, v := range s.byVerb {
		if !strings.HasPrefix(verb, "debug ") {
			n += v
		}
	}
	return n
}

func (s sample) writes() int {
	n := 0
	for verb, v := range s.byVerb {
		if verb != http.MethodGet && verb != "WATCH" && !strings.HasPrefix(verb, "debug ") {
			n += v
		}
	}
	return n
}

func (s sample) requestsPerSecond() float64   { return float64(s.total()) / s.elapsed.Seconds() }
func (s sample) reconcilesPerSecond() float64 { return float64(s.reconciles) / s.elapsed.Seconds() }

func (s sample) verbs() string {
	if len(s.byVerb) == 0 {
		return "none"
	}
	var parts []string
	for _, verb := range []string{"GET", "WATCH", "POST", "PUT", "PATCH", "DELETE"} {
		if n := s.byVerb[verb]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", verb, n))
		}
	}
	for k, n := range s.byVerb {
		if strings.HasPrefix(k, "debug ") {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
		}
	}
	return strings.Join(parts, ", ")
}

// measure runs load (nil: nothing) for window and returns what the
// manager and kube-apiserver did meanwhile.
func measure(b *testing.B, c *verbCounter, apiserver int, window time.Duration, load func(stop <-chan struct{})) sample {
	b.Helper()
	before, rec0 := c.snapshot(), reconciles(b)
	cpu0, api0 := processCPU(b, 0), processCPU(b, apiserver)
	start := time.Now()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if load != nil {
			load(stop)
		} else {
			<-stop
		}
	}()
	time.Sleep(window)
	close(stop)
	<-done
	s := sample{elapsed: time.Since(start), byVerb: map[string]int{}}
	for verb, n := range c.snapshot() {
		if d := n - before[verb]; d > 0 {
			s.byVerb[verb] = d
		}
	}
	s.reconciles = reconciles(b) - rec0
	s.cpu, s.apiserverCPU = processCPU(b, 0)-cpu0, processCPU(b, apiserver)-api0
	return s
}

// processCPU is a process's user+system CPU seconds (0: this one).
func processCPU(b *testing.B, pid int) float64 {
	b.Helper()
	if pid == 0 {
		pid = os.Getpid()
	}
	st, err := testharness.ReadProc(pid)
	if err != nil {
		b.Fatal(err)
	}
	return st.CPU.Seconds()
}

// apiserverPID finds the kube-apiserver serving host among this user's
// processes.
func apiserverPID(b *testing.B, host string) int {
	b.Helper()
	u, err := url.Parse(host)
	if err != nil {
		b.Fatal(err)
	}
	entries, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, e := range entries {
		cmd, err := os.ReadFile(e)
		if err != nil || !bytes.Contains(cmd, []byte("kube-apiserver")) || !bytes.Contains(cmd, []byte("--secure-port="+u.Port())) {
			continue
		}
		pid, _ := strconv.Atoi(strings.Split(e, "/")[2])
		return pid
	}
	b.Fatalf("no kube-apiserver process serves %s", host)
	return 0
}

// parallel runs f(0..n-1) on workers goroutines and fails at the first error.
func parallel(b *testing.B, workers, n int, f func(i int) error) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			b.Fatal(err)
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

// reconciles is controller-runtime's count of quantumnode reconciles in
// this process (the shared manager's cache holds none of the benchmark's
// nodes, so they are this manager's).
func reconciles(b *testing.B) int64 {
	b.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "quantumnode" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return int64(n)
}
