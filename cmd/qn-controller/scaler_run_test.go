package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	testharness "github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/promtest"
)

// TestTheCommandScalesOnAPrometheusFigure runs qn-controller as its own
// process and its ServiceAccount (the rules of config/rbac, RBAC on),
// with --prometheus-url pointing at a real Prometheus made slow (2 s per
// query): it scales a Deployment through /scale, serves the scaler's
// metrics, and QuantumNodes are reconciled, and a scaler of another
// Prometheus scales, while 24 scalers wait on a Prometheus that has
// stopped answering (a query deadline of 10 minutes keeps their queries
// held).
func TestTheCommandScalesOnAPrometheusFigure(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is empty: this test needs a real kube-apiserver and etcd. " +
			"Run it with `make test`, or `export KUBEBUILDER_ASSETS=$(./hack/k8s-bins.sh)` first")
	}
	exporter := promtest.NewExporter()
	defer exporter.Close()
	exporter.Set("qn_test_queue_depth", "orders", 40)
	prom := promtest.StartForTest(t, exporter.Target())
	prom.WaitFor(t, `qn_test_queue_depth{scenario="orders"}`, 40)
	slow, err := promtest.NewQueryProxy(prom.URL, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()

	env, cfg := testharness.ControlPlane(t, testharness.ControlPlaneOptions{MoreCRDs: []*apiextensionsv1.CustomResourceDefinition{testharness.WorkerCRD()}})
	scheme, err := controller.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []string{"qn-system", "shop"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	applyManifests(t, c, "../../config/rbac")
	kubeconfig := kubeconfigOf(t, env, controllerUser)

	p := startController(t, kubeconfig, testharness.ProcessOptions{},
		"--leader-elect=false", "--audit=false", "--quiescence-window=0s", "--log-format=text",
		"--prometheus-url="+slow.URL, "--prometheus-timeout=10m", "--prometheus-max-inflight=2", "--scaler-workers=4")
	metricsAddr, probeAddr := p.Metrics, p.Probe
	eventually(t, "/readyz?verbose names the scalers' Prometheus", func() error {
		return probeSays("http://"+probeAddr+"/readyz?verbose", 200, "HorizontalQNScalers on; default Prometheus "+slow.URL)
	})

	replicas := int32(2)
	deployment := func(name string) *appsv1.Deployment {
		labels := map[string]string{"app": name}
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}},
		}
	}
	scaler := func(name string) *qnv1alpha1.HorizontalQNScaler {
		return &qnv1alpha1.HorizontalQNScaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: qnv1alpha1.HorizontalQNScalerSpec{
				ScaleTargetRef: qnv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
				MaxReplicas:    10,
				QNMetric:       qnv1alpha1.QNMetric{Query: `max(qn_test_queue_depth{scenario="orders"})`},
				Thresholds:     qnv1alpha1.Thresholds{Upper: resource.MustParse("15"), Lower: resource.MustParse("5")},
				// Polled every second: far more than the slow Prometheus
				// answers, so the scalers always wait for it.
				PollingIntervalSeconds: 1,
			},
		}
	}
	create := func(objs ...client.Object) {
		t.Helper()
		for _, obj := range objs {
			if err := c.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
	}
	scaledTo4 := func(what, name string) {
		t.Helper()
		eventually(t, what+" has written the Deployment's /scale (+2)", func() error {
			d := &appsv1.Deployment{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: name}, d); err != nil {
				return err
			}
			if *d.Spec.Replicas != 4 {
				return fmt.Errorf("%d replicas", *d.Spec.Replicas)
			}
			return nil
		})
	}
	const busy = 24
	for i := range busy {
		name := fmt.Sprintf("orders-%d", i)
		create(deployment(name), scaler(name))
	}
	scaledTo4("the first scaler", "orders-0")

	// A custom resource whose group config/rbac does not list: the
	// ServiceAccount may not touch its /scale, and the scaler says so.
	consumer := scaler("consumer")
	consumer.Spec.ScaleTargetRef = qnv1alpha1.ScaleTargetRef{APIVersion: testharness.WorkerGroup + "/v1", Kind: "Worker", Name: "consumer"}
	create(testharness.Worker("shop", "consumer", 2), consumer)
	eventually(t, "the scaler of a custom resource outside the RBAC's groups says why it cannot scale", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(consumer), consumer); err != nil {
			return err
		}
		c := meta.FindStatusCondition(consumer.Status.Conditions, qnv1alpha1.ScalerAbleToScale)
		want := `qn-controller may not read the scale of Worker consumer (workers.scaling.qn-test.dev "consumer" is forbidden: User "system:serviceaccount:qn-system:qn-controller" cannot get resource "workers/scale" in API group "scaling.qn-test.dev" in the namespace "shop"): add workers.scaling.qn-test.dev/scale to its RBAC (the chart's controller.scaler.scaleGroups lists the groups)`
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != qnv1alpha1.ScalerReasonFailedGetScale || c.Message != want {
			return fmt.Errorf("AbleToScale %+v", c)
		}
		return nil
	})

	// Prometheus stops answering: every query in flight is held, as many
	// as --prometheus-max-inflight allows, and the other scalers wait for
	// a slot. A QuantumNode is reconciled all the same: its reconcile
	// cannot depend on any query, since none is answered until it is done.
	slow.Hold()
	eventually(t, "the scalers hold --prometheus-max-inflight=2 queries to the stopped Prometheus", func() error {
		if n := slow.InFlight(); n != 2 {
			return fmt.Errorf("%d queries in flight", n)
		}
		return nil
	})
	created := time.Now()
	qn := &qnv1alpha1.QuantumNode{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "edge-1"},
		Spec: qnv1alpha1.QuantumNodeSpec{Hardware: qnv1alpha1.Hardware{Arch: qnv1alpha1.ArchARM64}, Services: []qnv1alpha1.Service{{Name: "grpc", Port: 9090}}}}
	if err := c.Create(ctx, qn); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the QuantumNode has a status", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(qn), qn); err != nil {
			return err
		}
		if qn.Status.Phase == "" {
			return fmt.Errorf("no phase yet")
		}
		return nil
	})
	t.Logf("QuantumNode status written %s after its creation, with %d scalers waiting on a Prometheus that answers nothing (%d queries held)",
		time.Since(created).Round(time.Millisecond), busy, slow.InFlight())
	// Nor does a scaler of another Prometheus wait for it: it scales.
	other := scaler("fast")
	other.Spec.QNMetric.ServerAddress = prom.URL
	create(deployment("fast"), other)
	scaledTo4("the scaler of another Prometheus", "fast")
	if n := slow.InFlight(); n != 2 {
		t.Fatalf("%d queries held by the stopped Prometheus, want still 2: the test proves nothing", n)
	}
	slow.Release()
	if most := slow.MostInFlight(); most > 2 {
		t.Errorf("%d queries in flight to the slow Prometheus, above --prometheus-max-inflight=2", most)
	}
	eventually(t, "/metrics carries the scaler's series", func() error {
		return probeSays("http://"+metricsAddr+"/metrics", 200,
			`qn_scaler_desired_replicas{scaler="orders-0",scaler_namespace="shop"} 4`,
			`qn_scaler_value{metric="",scaler="orders-0",scaler_namespace="shop"} 40`,
			`qn_scaler_query_duration_seconds_count{scaler="orders-0",scaler_namespace="shop"}`,
			`controller_runtime_reconcile_total{controller="horizontalqnscaler",result="success"}`)
	})
	select {
	case <-p.Exited():
		t.Fatalf("qn-controller exited with code %d", p.ExitCode())
	default:
	}
}
