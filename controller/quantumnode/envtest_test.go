package quantumnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	testharness "github.com/quantumnode/qn-admission/test/harness"
)

// The control plane (a real kube-apiserver and etcd) and one manager running
// the reconciler are shared by every envtest test of the package: starting
// them costs seconds, and each test isolates itself with its own namespace
// and Node names. They start on first use, so the unit tests of the
// package run without the binaries.
var controlPlane struct {
	once sync.Once
	err  error
	h    *harness
	stop func()
}

// harness is what a test sees of the running control plane.
type harness struct {
	// client talks to the API server directly, never through a cache, so
	// assertions see what is stored.
	client     client.Client
	reconciler *Reconciler
	metrics    *prometheus.Registry
	// cache reads what the manager's informers see.
	cache client.Reader
	// writes counts the reconciler's write requests per object.
	writes *writeCounter
	// cfg reaches the API server, for tests that start managers of their own.
	cfg    *rest.Config
	scheme *runtime.Scheme
	// kubeconfig is an administrator's, for kube-controller-manager.
	kubeconfig []byte
}

// writeCounter counts write requests per object, by Go type and key.
type writeCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (w *writeCounter) add(obj client.Object) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts[fmt.Sprintf("%T %s", obj, client.ObjectKeyFromObject(obj))]++
}

// of returns how many writes obj has had, status writes included.
func (w *writeCounter) of(obj client.Object) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts[fmt.Sprintf("%T %s", obj, client.ObjectKeyFromObject(obj))]
}

// countingClient counts every write the reconciler sends: the API server
// turns a write that changes nothing into a no-op that keeps the
// resourceVersion, so only counting requests shows that none was sent.
type countingClient struct {
	client.Client
	writes *writeCounter
}

func (c countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.writes.add(obj)
	return c.Client.Create(ctx, obj, opts...)
}

func (c countingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.writes.add(obj)
	return c.Client.Update(ctx, obj, opts...)
}

func (c countingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.writes.add(obj)
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c countingClient) Status() client.SubResourceWriter {
	return countingStatus{SubResourceWriter: c.Client.Status(), writes: c.writes}
}

type countingStatus struct {
	client.SubResourceWriter
	writes *writeCounter
}

func (c countingStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	c.writes.add(obj)
	return c.SubResourceWriter.Update(ctx, obj, opts...)
}

func (c countingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	c.writes.add(obj)
	return c.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// namespaces counts namespaces handed out, for unique names.
var namespaces atomic.Int32

func TestMain(m *testing.M) {
	code := m.Run()
	if controlPlane.stop != nil {
		controlPlane.stop()
	}
	os.Exit(code)
}

// startControlPlane returns the shared harness, starting it on first use, or
// fails the test when it cannot.
func startControlPlane(t testing.TB) *harness {
	t.Helper()
	if _, err := testharness.AssetsDir(); err != nil {
		t.Fatal(err)
	}
	controlPlane.once.Do(func() {
		controlPlane.h, controlPlane.stop, controlPlane.err = start()
	})
	if controlPlane.err != nil {
		t.Fatalf("start the control plane: %v", controlPlane.err)
	}
	return controlPlane.h
}

func start() (h *harness, stop func(), err error) {
	began := time.Now()
	policyReports, err := policyReportCRD()
	if err != nil {
		return nil, nil, err
	}
	scheme, err := controller.NewScheme()
	if err != nil {
		return nil, nil, err
	}
	env, cfg, err := testharness.StartControlPlane(testharness.ControlPlaneOptions{
		MoreCRDs: []*apiextensionsv1.CustomResourceDefinition{policyReports},
		Configure: func(env *envtest.Environment) {
			env.Scheme = scheme
			// Every QuantumNode gets a ClusterIP Service: the default /24
			// runs out at 253, which the 1,000-node audit benchmark passes.
			env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", "10.96.0.0/16")
		},
	})
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			_ = env.Stop()
		}
	}()

	ctrl.SetLogger(testLogger())
	// QuantumNodes labelled for an audit test belong to that test's own
	// manager (startAudit), which judges them with its own policies.
	cacheOpts := controller.CacheOptions()
	notAudited, err := labels.Parse("!" + auditTestLabel)
	if err != nil {
		return nil, nil, err
	}
	cacheOpts.ByObject[&qnv1alpha1.QuantumNode{}] = cache.ByObject{Label: notAudited}
	// So are health policies labelled so (the self-healing benchmark's).
	cacheOpts.ByObject[&qnv1alpha1.QuantumNodeHealthPolicy{}] = cache.ByObject{Label: notAudited}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("create the manager: %w", err)
	}
	admin, err := env.AddUser(envtest.User{Name: "kube-controller-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("provision a user for kube-controller-manager: %w", err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("write the kubeconfig of kube-controller-manager: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h = &harness{metrics: prometheus.NewRegistry(), cache: mgr.GetClient(), writes: &writeCounter{counts: map[string]int{}}, cfg: cfg, scheme: scheme, kubeconfig: kubeconfig}
	h.reconciler = &Reconciler{
		Client:                  countingClient{Client: mgr.GetClient(), writes: h.writes},
		Metrics:                 h.metrics,
		MaxConcurrentReconciles: 2,
	}
	if err := h.reconciler.SetupWithManager(ctx, mgr); err != nil {
		cancel()
		return nil, nil, err
	}
	h.client, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("create the direct client: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		cancel()
		return nil, nil, errors.Join(errors.New("the manager's cache did not sync within a minute"), <-done)
	}
	fmt.Fprintf(os.Stderr, "envtest: control plane and manager up in %s\n", time.Since(began).Round(time.Millisecond))
	return h, func() {
		stopControllerManager()
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "envtest: the manager stopped with: %v\n", err)
		}
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "envtest: stop the control plane: %v\n", err)
		}
	}, nil
}

// namespace creates a fresh namespace for one test. envtest runs no
// namespace controller, so it is left behind; the control plane is thrown
// away at the end anyway.
func (h *harness) namespace(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("qn-test-%d", namespaces.Add(1))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := h.client.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// nodeName returns a Node name unique to this test: Nodes are cluster-wide.
func nodeName(t *testing.T, suffix string) string {
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return strings.Trim(name, "-") + "-" + suffix
}

// createQuantumNode creates an arm64 QuantumNode exposing grpc:9090 in ns.
func (h *harness) createQuantumNode(t testing.TB, ns, name string, change ...func(*qnv1alpha1.QuantumNode)) *qnv1alpha1.QuantumNode {
	t.Helper()
	qn := &qnv1alpha1.QuantumNode{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: qnv1alpha1.QuantumNodeSpec{
			Hardware: qnv1alpha1.Hardware{Arch: qnv1alpha1.ArchARM64},
			Services: []qnv1alpha1.Service{{Name: "grpc", Port: 9090}},
		},
	}
	for _, c := range change {
		c(qn)
	}
	if err := h.client.Create(context.Background(), qn); err != nil {
		t.Fatalf("create QuantumNode %s/%s: %v", ns, name, err)
	}
	return qn
}

// createNode creates a Node and then sets its status through the status
// subresource, the only way the API server accepts it, as a kubelet would.
func (h *harness) createNode(t testing.TB, name, arch string, ready bool, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := h.client.Create(ctx, n); err != nil {
		t.Fatalf("create Node %s: %v", name, err)
	}
	t.Cleanup(func() { _ = h.client.Delete(context.Background(), n) })
	h.updateNode(t, name, func(n *corev1.Node) {
		n.Status.NodeInfo.Architecture = arch
		setReady(n, ready)
	})
}

// updateNode changes a Node's status through the status subresource,
// retrying on conflicts with the manager or other tests.
func (h *harness) updateNode(t testing.TB, name string, change func(*corev1.Node)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := h.client.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
			return err
		}
		change(n)
		return h.client.Status().Update(context.Background(), n)
	})
	if err != nil {
		t.Fatalf("update the status of Node %s: %v", name, err)
	}
}

func setReady(n *corev1.Node, ready bool) {
	c := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"}
	if !ready {
		c = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", Message: "container runtime is down"}
	}
	c.LastHeartbeatTime, c.LastTransitionTime = metav1.Now(), metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{c}
}

// update applies change to the stored object and writes it back, retrying
// on conflicts with the controller.
func (h *harness) update(t testing.TB, obj client.Object, change func()) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := h.client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return h.client.Update(context.Background(), obj)
	})
	if err != nil {
		t.Fatalf("update %T %s: %v", obj, client.ObjectKeyFromObject(obj), err)
	}
}

// eventually polls check until it returns nil, and fails the test with the
// last error when the deadline passes first. No test sleeps a fixed time.
func eventually(t testing.TB, what string, check func() error) {
	t.Helper()
	eventuallyWithin(t, 30*time.Second, what, check)
}

// eventuallyWithin is eventually with its own deadline, for benchmarks
// whose work is measured, not bounded.
func eventuallyWithin(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	testharness.WaitFor(t, timeout, what, check)
}

// waitForPhase waits until the stored QuantumNode has phase and its Ready
// condition has reason, and returns it.
func (h *harness) waitForPhase(t *testing.T, key client.ObjectKey, phase qnv1alpha1.Phase, readyReason string) *qnv1alpha1.QuantumNode {
	t.Helper()
	qn := &qnv1alpha1.QuantumNode{}
	eventually(t, fmt.Sprintf("%s is %s (%s)", key, phase, readyReason), func() error {
		if err := h.client.Get(context.Background(), key, qn); err != nil {
			return err
		}
		if got := readyCondition(qn.Status); qn.Status.Phase != phase || got.Reason != readyReason {
			return fmt.Errorf("phase %q, Ready %s/%s: %s", qn.Status.Phase, got.Status, got.Reason, got.Message)
		}
		return nil
	})
	return qn
}

// testLogger sends controller logs to stderr only when QN_TEST_LOGS is set:
// some reconcile errors are expected (a cache a step behind) and would
// drown the test output.
func testLogger() logr.Logger {
	if os.Getenv("QN_TEST_LOGS") == "" {
		return logr.Discard()
	}
	return logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// runManager starts a test's own manager, stops it (then runs after, if
// any) when the test ends, and waits a minute at most for its cache.
func runManager(t testing.TB, ctx context.Context, cancel context.CancelFunc, mgr ctrl.Manager, what string, after func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the %s manager stopped with: %v", what, err)
		}
		if after != nil {
			after()
		}
	})
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		t.Fatalf("the %s manager's cache did not sync within a minute", what)
	}
}
