package scaler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/scale"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	testharness "github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/promtest"
)

// The control plane (a real kube-apiserver and etcd, and the real
// kube-controller-manager running the Deployment and ReplicaSet
// controllers), the shared Prometheus and one manager running the scaler
// are shared by every envtest test of the package. Each test works in its
// own namespace and scenario label. They start on first use, so the unit
// tests of the package run without the binaries.
// sharedControlPlane is one control plane with its scaler, started on
// first use and shared by the tests that need it.
type sharedControlPlane struct {
	once sync.Once
	err  error
	h    *harness
	stop func()
}

// controlPlane serves KEDA's ScaledObject from the start; withoutKEDA
// serves it only once a test installs it.
var controlPlane, withoutKEDA sharedControlPlane

type harness struct {
	// client talks to the API server directly, never through a cache.
	client     client.Client
	reconciler *Reconciler
	metrics    *prometheus.Registry
	scales     *countingScales
	faults     *faultyClient
	prom       *promtest.Server
	exporter   *promtest.Exporter
	cfg        *rest.Config
	kubeconfig string
}

var namespaces atomic.Int32

func TestMain(m *testing.M) {
	code := m.Run()
	for _, cp := range []*sharedControlPlane{&controlPlane, &withoutKEDA} {
		if cp.stop != nil {
			cp.stop()
		}
	}
	stopShared()
	os.Exit(code)
}

// startControlPlane returns the shared harness, starting it on first use.
func startControlPlane(t testing.TB) *harness {
	t.Helper()
	return controlPlane.get(t, true)
}

// startControlPlaneWithoutKEDA returns a harness of its own whose cluster
// does not serve ScaledObjects when the scaler starts.
func startControlPlaneWithoutKEDA(t testing.TB) *harness {
	t.Helper()
	return withoutKEDA.get(t, false)
}

func (cp *sharedControlPlane) get(t testing.TB, keda bool) *harness {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is empty: these tests need a real kube-apiserver, etcd and kube-controller-manager. " +
			"Run them with `make test`, or `export KUBEBUILDER_ASSETS=$(./hack/k8s-bins.sh)` first")
	}
	prom, exp := sharedPrometheus(t)
	cp.once.Do(func() {
		cp.h, cp.stop, cp.err = start(prom, exp, keda)
	})
	if cp.err != nil {
		t.Fatalf("start the control plane: %v", cp.err)
	}
	return cp.h
}

func testScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, qnv1alpha1.AddToScheme(scheme)
}

func start(prom *promtest.Server, exp *promtest.Exporter, keda bool) (h *harness, stop func(), err error) {
	began := time.Now()
	scheme, err := testScheme()
	if err != nil {
		return nil, nil, err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	if keda {
		crds = append(crds, scaledObjectCRD())
	}
	env, cfg, err := testharness.StartControlPlane(testharness.ControlPlaneOptions{
		MoreCRDs:  crds,
		Configure: func(e *envtest.Environment) { e.Scheme = scheme },
	})
	if err != nil {
		return nil, nil, err
	}
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	stops = append(stops, func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "envtest: stop the control plane: %v\n", err)
		}
	})
	defer func() {
		if err != nil {
			stopAll()
		}
	}()

	admin, err := env.AddUser(envtest.User{Name: "scaler-test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, nil, err
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "qn-scaler-envtest-")
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { os.RemoveAll(dir) })
	kubeconfigFile := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfigFile, kubeconfig, 0o600); err != nil {
		return nil, nil, err
	}
	kcm, err := startControllerManager(kubeconfigFile)
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { _ = kcm.Stop() })

	ctrl.SetLogger(testLogger())
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
		// Two control planes' scalers may run in this process.
		Controller: config.Controller{SkipNameValidation: ptr(true)},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("create the manager: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h = &harness{metrics: prometheus.NewRegistry(), prom: prom, exporter: exp, cfg: cfg, kubeconfig: kubeconfigFile}
	scales, kinds, err := ScalesFor(cfg, mgr.GetRESTMapper())
	if err != nil {
		cancel()
		return nil, nil, err
	}
	h.scales = &countingScales{ScalesGetter: scales, updates: map[string]int{}}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		cancel()
		return nil, nil, err
	}
	h.faults = &faultyClient{Client: mgr.GetClient(), direct: direct, pending: map[string]statusFault{}}
	h.reconciler = &Reconciler{
		Client:                  h.faults,
		Scales:                  h.scales,
		ScaleKinds:              kinds,
		Prometheus:              NewPrometheus(2*time.Second, 2),
		DefaultServer:           prom.URL,
		Metrics:                 h.metrics,
		MaxConcurrentReconciles: 8,
		StatusRefresh:           5 * time.Second,
		BusyRetry:               100 * time.Millisecond,
		KEDARecheck:             500 * time.Millisecond,
	}
	if err := h.reconciler.SetupWithManager(ctx, mgr); err != nil {
		cancel()
		return nil, nil, err
	}
	if h.client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		cancel()
		return nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stops = append(stops, func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "envtest: the manager stopped with: %v\n", err)
		}
	})
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		return nil, nil, errors.New("the manager's cache did not sync within a minute")
	}
	fmt.Fprintf(os.Stderr, "envtest: control plane, kube-controller-manager, Prometheus and the scaler up in %s\n", time.Since(began).Round(time.Millisecond))
	return h, stopAll, nil
}

// scaledObjectCRD serves KEDA's ScaledObject (its schema left open), so
// the scaler meets one as it would in a cluster running KEDA: it is
// served before qn-controller starts.
func scaledObjectCRD() *apiextensionsv1.CustomResourceDefinition {
	open := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "scaledobjects.keda.sh"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: ScaledObjectGVK.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "scaledobjects", Singular: "scaledobject", Kind: ScaledObjectGVK.Kind, ListKind: ScaledObjectGVK.Kind + "List"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: ScaledObjectGVK.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &open,
				}},
			}},
		},
	}
}

// countingScales counts the /scale writes the API server accepted, per
// target, so a test can show that none was made (the API server keeps a
// no-op write invisible). A write refused with a conflict (the target's
// controller wrote its status in between) changed nothing and is not
// counted.
type countingScales struct {
	scale.ScalesGetter
	mu      sync.Mutex
	updates map[string]int
}

func (c *countingScales) Scales(namespace string) scale.ScaleInterface {
	return countingScaleInterface{ScaleInterface: c.ScalesGetter.Scales(namespace), c: c, namespace: namespace}
}

// of returns how many writes the target ns/name has had.
func (c *countingScales) of(namespace, name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.updates[namespace+"/"+name]
}

type countingScaleInterface struct {
	scale.ScaleInterface
	c         *countingScales
	namespace string
}

func (i countingScaleInterface) Update(ctx context.Context, gr schema.GroupResource, s *autoscalingv1.Scale, opts metav1.UpdateOptions) (*autoscalingv1.Scale, error) {
	out, err := i.ScaleInterface.Update(ctx, gr, s, opts)
	if err == nil {
		i.c.mu.Lock()
		i.c.updates[i.namespace+"/"+s.Name]++
		i.c.mu.Unlock()
	}
	return out, err
}

// faultyClient is the reconciler's client, through which a test makes
// the status write that follows a write to the target fail once: a
// conflict from the API server (someone labels the scaler between the
// poll's read and that write), or the API server unavailable for it; or
// makes the cache lag behind that write once (the next read from it
// returns the scaler as it was before).
type faultyClient struct {
	client.Client
	direct  client.Client
	mu      sync.Mutex
	pending map[string]statusFault
	met     map[string]bool
	lagging map[string]*lag
	outages map[string]*outage
}

// outage refuses every status write after a scale in a namespace for a
// while, as an API server that is down for several polls does.
type outage struct {
	length  time.Duration
	until   time.Time // set by the first write refused
	refused int
}

// failFor refuses the status writes after a scale in ns as unavailable
// for d, counted from the first.
func (c *faultyClient) failFor(ns string, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.outages == nil {
		c.outages = map[string]*outage{}
	}
	c.outages[ns] = &outage{length: d}
}

// down reports whether a status write in ns is refused now.
func (c *faultyClient) down(ns string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.outages[ns]
	if o == nil {
		return false
	}
	now := time.Now()
	if o.until.IsZero() {
		o.until = now.Add(o.length)
	}
	if !now.Before(o.until) {
		return false
	}
	o.refused++
	return true
}

// refused is how many status writes the outage in ns refused.
func (c *faultyClient) refused(ns string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o := c.outages[ns]; o != nil {
		return o.refused
	}
	return 0
}

// statusFault is how a status write fails.
type statusFault int

const (
	faultConflict statusFault = iota + 1
	faultUnavailable
)

// lag is one scaler's cache lagging behind the status write after a scale.
type lag struct {
	before  *qnv1alpha1.HorizontalQNScaler
	written bool // the status write after a scale was made
	served  bool // the stale copy was read
}

// lagOnce makes the cache lag once in ns.
func (c *faultyClient) lagOnce(ns string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lagging == nil {
		c.lagging = map[string]*lag{}
	}
	c.lagging[ns] = &lag{}
}

// lagged reports whether the stale copy was read in ns.
func (c *faultyClient) lagged(ns string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.lagging[ns]
	return l != nil && l.served
}

func (c *faultyClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	sc, ok := obj.(*qnv1alpha1.HorizontalQNScaler)
	if !ok {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch l := c.lagging[key.Namespace]; {
	case l == nil || l.served:
	case !l.written:
		l.before = sc.DeepCopy()
	default:
		l.before.DeepCopyInto(sc)
		l.served = true
	}
	return nil
}

func (c *faultyClient) scaleWritten(ns string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.lagging[ns]; l != nil {
		l.written = true
	}
}

// once arms fault for the first status write after a scale in ns.
func (c *faultyClient) once(ns string, fault statusFault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending[ns] = fault
}

// happened reports whether the fault armed in ns was made.
func (c *faultyClient) happened(ns string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.met[ns]
}

func (c *faultyClient) take(ns string) statusFault {
	c.mu.Lock()
	defer c.mu.Unlock()
	fault := c.pending[ns]
	if fault == 0 {
		return 0
	}
	delete(c.pending, ns)
	if c.met == nil {
		c.met = map[string]bool{}
	}
	c.met[ns] = true
	return fault
}

func (c *faultyClient) Status() client.SubResourceWriter {
	return faultyStatusWriter{SubResourceWriter: c.Client.Status(), c: c}
}

type faultyStatusWriter struct {
	client.SubResourceWriter
	c *faultyClient
}

func (w faultyStatusWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	sc, ok := obj.(*qnv1alpha1.HorizontalQNScaler)
	if ok && sc.Status.LastScaleTime != nil && w.c.down(sc.Namespace) {
		return apierrors.NewServiceUnavailable("the API server is down")
	}
	if ok && sc.Status.LastScaleTime != nil {
		switch w.c.take(sc.Namespace) {
		case faultConflict:
			touch := &qnv1alpha1.HorizontalQNScaler{ObjectMeta: metav1.ObjectMeta{Namespace: sc.Namespace, Name: sc.Name}}
			if err := w.c.direct.Patch(ctx, touch, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"true"}}}`))); err != nil {
				return fmt.Errorf("label the scaler to make a conflict: %w", err)
			}
		case faultUnavailable:
			return apierrors.NewServiceUnavailable("the API server is restarting")
		}
	}
	if err := w.SubResourceWriter.Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	if ok && sc.Status.LastScaleTime != nil {
		w.c.scaleWritten(sc.Namespace)
	}
	return nil
}

// startControllerManager runs the real kube-controller-manager with the
// controllers a Deployment needs: the Deployment controller turns replicas
// into a ReplicaSet's, the ReplicaSet controller into Pods (which stay
// Pending: there is no scheduler), the service account controller makes
// the namespace's default account the Pods need.
func startControllerManager(kubeconfig string) (*testharness.Process, error) {
	assets, err := testharness.AssetsDir()
	if err != nil {
		return nil, err
	}
	return testharness.Start(filepath.Join(assets, "kube-controller-manager"), []string{
		"--kubeconfig", kubeconfig,
		"--authentication-kubeconfig", kubeconfig,
		"--authorization-kubeconfig", kubeconfig,
		"--controllers", "deployment-controller,replicaset-controller,serviceaccount-controller",
		"--leader-elect=false",
		"--secure-port=0",
		"-v=1",
	}, testharness.ProcessOptions{StopGrace: 10 * time.Second, KeepLast: 64 << 10})
}

// namespace creates a fresh namespace for one test.
func (h *harness) namespace(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("scaler-test-%d", namespaces.Add(1))
	if err := h.client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// createDeploymentObject returns a Deployment of replicas Pods in ns, to
// create.
func (h *harness) createDeploymentObject(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	return d
}

// scenario is one test's series and scaler.
type scenario struct {
	h    *harness
	t    testing.TB
	ns   string
	name string
}

func (h *harness) scenario(t testing.TB) *scenario {
	ns := h.namespace(t)
	return &scenario{h: h, t: t, ns: ns, name: ns}
}

// startTarget sets the scenario's queue and creates the Deployment "web"
// of replicas, once the Deployment controller has given it a ReplicaSet.
func (s *scenario) startTarget(queue float64, replicas int32) {
	s.t.Helper()
	s.setQueue(queue)
	s.create(s.h.createDeploymentObject(s.ns, "web", replicas))
	s.waitForReplicas("web", replicas, 30*time.Second)
}

// query is the PromQL of this scenario's queue.
func (s *scenario) query() string {
	return fmt.Sprintf(`max(%s{scenario=%q})`, queueMetric, s.name)
}

func (s *scenario) errorQuery() string {
	return fmt.Sprintf(`max(%s{scenario=%q})`, errorRatioMetric, s.name)
}

// setQueue sets the queue the exporter reports and waits until
// Prometheus has scraped it.
func (s *scenario) setQueue(v float64) {
	s.t.Helper()
	s.h.exporter.Set(queueMetric, s.name, v)
	waitForValue(s.t, NewPrometheus(2*time.Second, 1), Server{URL: s.h.prom.URL}, s.query(), v)
}

func (s *scenario) setErrorRatio(v float64) {
	s.t.Helper()
	s.h.exporter.Set(errorRatioMetric, s.name, v)
	waitForValue(s.t, NewPrometheus(2*time.Second, 1), Server{URL: s.h.prom.URL}, s.errorQuery(), v)
}

// scaler returns a HorizontalQNScaler of the Deployment "web" on this
// scenario's queue: 1..10 replicas, lower 5, upper 15, polled every
// second; change adjusts it.
func (s *scenario) scaler(change ...func(*qnv1alpha1.HorizontalQNScaler)) *qnv1alpha1.HorizontalQNScaler {
	sc := &qnv1alpha1.HorizontalQNScaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "web"},
		Spec: qnv1alpha1.HorizontalQNScalerSpec{
			ScaleTargetRef:         qnv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MinReplicas:            1,
			MaxReplicas:            10,
			QNMetric:               qnv1alpha1.QNMetric{Query: s.query()},
			Thresholds:             qnv1alpha1.Thresholds{Upper: resource.MustParse("15"), Lower: resource.MustParse("5")},
			PollingIntervalSeconds: 1,
		},
	}
	for _, c := range change {
		c(sc)
	}
	return sc
}

func (s *scenario) create(obj client.Object) {
	s.t.Helper()
	if err := s.h.client.Create(context.Background(), obj); err != nil {
		s.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// replicas returns the Deployment's spec.replicas and its ReplicaSet's.
func (s *scenario) replicas(name string) (deployment, replicaSet int32, err error) {
	d := &appsv1.Deployment{}
	if err := s.h.client.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: name}, d); err != nil {
		return 0, 0, err
	}
	sets := &appsv1.ReplicaSetList{}
	if err := s.h.client.List(context.Background(), sets, client.InNamespace(s.ns), client.MatchingLabels{"app": name}); err != nil {
		return 0, 0, err
	}
	var rs int32 = -1
	for _, set := range sets.Items {
		if set.Spec.Replicas != nil && metav1.IsControlledBy(&set, d) {
			rs = *set.Spec.Replicas
		}
	}
	return *d.Spec.Replicas, rs, nil
}

// waitForReplicas waits until the Deployment and its ReplicaSet (written
// by the real Deployment controller) both have want replicas, and returns
// when that was first seen.
func (s *scenario) waitForReplicas(name string, want int32, within time.Duration) time.Time {
	s.t.Helper()
	testharness.WaitFor(s.t, within, fmt.Sprintf("Deployment %s/%s and its ReplicaSet have %d replicas", s.ns, name, want), func() error {
		d, rs, err := s.replicas(name)
		if err != nil {
			return err
		}
		if d != want || rs != want {
			return fmt.Errorf("Deployment %d, ReplicaSet %d", d, rs)
		}
		return nil
	})
	return time.Now()
}

// get reads the stored scaler.
func (s *scenario) get(name string) *qnv1alpha1.HorizontalQNScaler {
	s.t.Helper()
	sc := &qnv1alpha1.HorizontalQNScaler{}
	if err := s.h.client.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: name}, sc); err != nil {
		s.t.Fatalf("get HorizontalQNScaler %s/%s: %v", s.ns, name, err)
	}
	return sc
}

// waitForCondition waits until the scaler's condition has status and
// reason, and returns the scaler.
func (s *scenario) waitForCondition(name, typ string, status metav1.ConditionStatus, reason string, within time.Duration) *qnv1alpha1.HorizontalQNScaler {
	s.t.Helper()
	var sc *qnv1alpha1.HorizontalQNScaler
	testharness.WaitFor(s.t, within, fmt.Sprintf("%s/%s has %s=%s (%s)", s.ns, name, typ, status, reason), func() error {
		sc = &qnv1alpha1.HorizontalQNScaler{}
		if err := s.h.client.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: name}, sc); err != nil {
			return err
		}
		for _, c := range sc.Status.Conditions {
			if c.Type == typ {
				if c.Status != status || c.Reason != reason {
					return fmt.Errorf("%s=%s (%s): %s", typ, c.Status, c.Reason, c.Message)
				}
				return nil
			}
		}
		return fmt.Errorf("no %s condition yet", typ)
	})
	return sc
}

// events returns the reasons and notes of the events on the scaler.
func (s *scenario) events(name string) []string {
	s.t.Helper()
	list := &corev1.EventList{}
	if err := s.h.client.List(context.Background(), list, client.InNamespace(s.ns)); err != nil {
		s.t.Fatalf("list events: %v", err)
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == qnv1alpha1.ScalerKind && e.InvolvedObject.Name == name {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return out
}

// update changes the stored object, retrying on conflicts.
func (s *scenario) update(obj client.Object, change func()) {
	s.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.h.client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return s.h.client.Update(context.Background(), obj)
	})
	if err != nil {
		s.t.Fatalf("update %T %s: %v", obj, obj.GetName(), err)
	}
}

// testLogger sends controller logs to stderr only when QN_TEST_LOGS is set.
func testLogger() logr.Logger {
	if os.Getenv("QN_TEST_LOGS") == "" {
		return logr.Discard()
	}
	return logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
