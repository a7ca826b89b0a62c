package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	testharness "github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/promtest"
)

// TestScalerLoad measures the real qn-controller with many
// HorizontalQNScalers against a real Prometheus and kube-apiserver: the CPU
// of every process involved, the query rate Prometheus sees, and the API
// requests the controller sends. It is a measurement, not a check of a
// figure: make bench-scalers runs it (QN_BENCH_SCALERS=1000), make test
// skips it.
//
//	QN_BENCH_SCALERS   scalers (and Deployments), e.g. 1000
//	QN_BENCH_INTERVAL  their pollingIntervalSeconds (default 15)
//	QN_BENCH_DURATION  the measured window after a warm-up of two intervals (default 3m)
//	QN_BENCH_FLAGS     more qn-controller flags, space-separated
func TestScalerLoad(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("QN_BENCH_SCALERS"))
	if n <= 0 {
		t.Skip("a measurement: set QN_BENCH_SCALERS=1000 (make bench-scalers)")
	}
	interval := 15
	if v := os.Getenv("QN_BENCH_INTERVAL"); v != "" {
		interval, _ = strconv.Atoi(v)
	}
	window := 3 * time.Minute
	if v := os.Getenv("QN_BENCH_DURATION"); v != "" {
		window, _ = time.ParseDuration(v)
	}

	exporter := promtest.NewExporter()
	defer exporter.Close()
	for i := range n {
		exporter.Set("qn_test_queue_depth", fmt.Sprintf("bench-%d", i), 50) // inside [10, 100]: no scale writes
	}
	prom := promtest.StartForTest(t, exporter.Target())
	prom.WaitFor(t, `count(qn_test_queue_depth)`, float64(n))

	env, cfg := testharness.ControlPlane(t, testharness.ControlPlaneOptions{})
	scheme, err := controller.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := kubeconfigOf(t, env, envtest.User{Name: "bench", Groups: []string{"system:masters"}})
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			name := fmt.Sprintf("bench-%d", i)
			replicas := int32(2)
			labels := map[string]string{"app": name}
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name},
				Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}}}
			s := &qnv1alpha1.HorizontalQNScaler{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name},
				Spec: qnv1alpha1.HorizontalQNScalerSpec{
					ScaleTargetRef:         qnv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
					MaxReplicas:            10,
					QNMetric:               qnv1alpha1.QNMetric{Query: fmt.Sprintf(`max(qn_test_queue_depth{scenario=%q})`, name)},
					Thresholds:             qnv1alpha1.Thresholds{Upper: resource.MustParse("100"), Lower: resource.MustParse("10")},
					PollingIntervalSeconds: int32(interval),
				}}
			for _, obj := range []client.Object{d, s} {
				if err := c.Create(ctx, obj); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("created %d Deployments and %d HorizontalQNScalers in %s", n, n, time.Since(created).Round(time.Millisecond))

	args := append([]string{"--leader-elect=false", "--audit=false", "--log-level=warn", "--prometheus-url=" + prom.URL},
		strings.Fields(os.Getenv("QN_BENCH_FLAGS"))...)
	p := startController(t, kubeconfig, testharness.ProcessOptions{KeepLast: 1 << 20}, args...)
	metricsAddr := p.Metrics

	warmup := 2 * time.Duration(interval) * time.Second
	time.Sleep(warmup)
	apiserver, etcd := pidOf(t, "kube-apiserver", cfg.Host), pidOf(t, "etcd", "")
	procs := map[string]int{"qn-controller": p.PID(), "prometheus": prom.Pid(), "kube-apiserver": apiserver, "etcd": etcd}
	before := map[string]float64{}
	for name, pid := range procs {
		before[name] = cpuSeconds(t, pid)
	}
	queriesBefore := counter(t, prom.URL+"/metrics", `prometheus_http_requests_total{code="200",handler="/api/v1/query"}`)
	requestsBefore := restRequests(t, "http://"+metricsAddr+"/metrics")
	metricsURL := "http://" + metricsAddr + "/metrics"
	querySecondsBefore, queryCountBefore := sumAll(t, metricsURL, "qn_scaler_query_duration_seconds_sum"), sumAll(t, metricsURL, "qn_scaler_query_duration_seconds_count")
	reconcileBefore := counter(t, metricsURL, `controller_runtime_reconcile_time_seconds_sum{controller="horizontalqnscaler"}`)
	reconcilesBefore := counter(t, metricsURL, `controller_runtime_reconcile_time_seconds_count{controller="horizontalqnscaler"}`)
	start := time.Now()
	time.Sleep(window)
	elapsed := time.Since(start).Seconds()
	var report []string
	for _, name := range []string{"qn-controller", "prometheus", "kube-apiserver", "etcd"} {
		used := cpuSeconds(t, procs[name]) - before[name]
		report = append(report, fmt.Sprintf("%s %.3f cores (%.1f CPU-s)", name, used/elapsed, used))
	}
	queries := counter(t, prom.URL+"/metrics", `prometheus_http_requests_total{code="200",handler="/api/v1/query"}`) - queriesBefore
	requests := restRequests(t, "http://"+metricsAddr+"/metrics")
	var verbs []string
	for _, verb := range []string{"GET", "PUT", "PATCH", "POST"} {
		verbs = append(verbs, fmt.Sprintf("%s %.1f/s", verb, (requests[verb]-requestsBefore[verb])/elapsed))
	}
	t.Logf("%d scalers at %ds, measured %.0fs after a %s warm-up:", n, interval, elapsed, warmup)
	t.Logf("  CPU: %s", strings.Join(report, ", "))
	t.Logf("  Prometheus instant queries: %.1f/s (one per poll: %.1f/s expected)", queries/elapsed, float64(n)/float64(interval))
	t.Logf("  qn-controller's API requests: %s", strings.Join(verbs, ", "))
	queryCount := sumAll(t, metricsURL, "qn_scaler_query_duration_seconds_count") - queryCountBefore
	reconciles := counter(t, metricsURL, `controller_runtime_reconcile_time_seconds_count{controller="horizontalqnscaler"}`) - reconcilesBefore
	t.Logf("  mean query %.0f ms (%.0f queries), mean reconcile %.0f ms (%.0f reconciles, busy retries included)",
		1000*(sumAll(t, metricsURL, "qn_scaler_query_duration_seconds_sum")-querySecondsBefore)/queryCount, queryCount,
		1000*(counter(t, metricsURL, `controller_runtime_reconcile_time_seconds_sum{controller="horizontalqnscaler"}`)-reconcileBefore)/reconciles, reconciles)
	if st, err := testharness.ReadProc(p.PID()); err == nil {
		t.Logf("  qn-controller RSS: %.1f MiB", float64(st.RSS)/(1<<20))
	}
}

// cpuSeconds reads a process's user+system CPU time from /proc.
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	st, err := testharness.ReadProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	return st.CPU.Seconds()
}

// pidOf finds the process whose command line names binary (and contains
// marker, e.g. the apiserver's port).
func pidOf(t *testing.T, binary, marker string) int {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	port := marker[strings.LastIndexByte(marker, ':')+1:]
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if filepath.Base(args[0]) != binary {
			continue
		}
		if marker == "" || strings.Contains(string(cmdline), port) {
			return pid
		}
	}
	t.Fatalf("no %s process (%s)", binary, marker)
	return 0
}

// counter reads one sample of a Prometheus text exposition.
func counter(t *testing.T, url, series string) float64 {
	t.Helper()
	body, err := get(url)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// sumAll sums every sample of a metric family (all label sets).
func sumAll(t *testing.T, url, name string) float64 {
	t.Helper()
	body, err := get(url)
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			total += v
		}
	}
	return total
}

// restRequests sums client-go's rest_client_requests_total by method.
func restRequests(t *testing.T, url string) map[string]float64 {
	t.Helper()
	body, err := get(url)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "rest_client_requests_total{") {
			continue
		}
		i := strings.Index(line, `method="`)
		if i < 0 {
			continue
		}
		method := line[i+len(`method="`):]
		method = method[:strings.IndexByte(method, '"')]
		v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		out[method] += v
	}
	return out
}
