package scaler

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/certs"
	testharness "github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/promtest"
)

// The scaler writes whatever serves /scale, found through discovery and
// the REST mapper as the HorizontalPodAutoscaler finds it: a StatefulSet
// and a custom resource whose CRD was installed after the scaler started.
func TestAStatefulSetAndACustomResourceAreScaledThroughTheirScale(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	s.setQueue(50)
	if _, err := envtest.InstallCRDs(h.cfg, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{testharness.WorkerCRD()}}); err != nil {
		t.Fatalf("install the Worker CRD: %v", err)
	}

	replicas := int32(2)
	labels := map[string]string{"app": "db"}
	s.create(&appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas, ServiceName: "db",
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	})
	worker := testharness.Worker(s.ns, "consumer", 2)
	s.create(worker)

	targets := map[string]qnv1alpha1.ScaleTargetRef{
		"db":       {APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db"},
		"consumer": {APIVersion: testharness.WorkerGroup + "/v1", Kind: "Worker", Name: "consumer"},
	}
	for name, ref := range targets {
		s.create(s.scaler(func(sc *qnv1alpha1.HorizontalQNScaler) { sc.Name, sc.Spec.ScaleTargetRef = name, ref }))
	}

	specReplicas := func(obj client.Object, path ...string) (int64, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
		if err := h.client.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: obj.GetName()}, u); err != nil {
			return 0, err
		}
		n, _, err := unstructured.NestedInt64(u.Object, path...)
		return n, err
	}
	sts := &unstructured.Unstructured{}
	sts.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("StatefulSet"))
	sts.SetName("db")
	for name, obj := range map[string]client.Object{"db": sts, "consumer": worker} {
		testharness.WaitFor(t, 30*time.Second, fmt.Sprintf("%s %s has 4 replicas", targets[name].Kind, name), func() error {
			n, err := specReplicas(obj, "spec", "replicas")
			if err != nil || n != 4 {
				return fmt.Errorf("spec.replicas %d (%v)", n, err)
			}
			return nil
		})
		sc := s.waitForCondition(name, qnv1alpha1.ScalerAbleToScale, metav1.ConditionTrue, qnv1alpha1.ScalerReasonReadyForNewScale, 10*time.Second)
		if d := sc.Status.LastDecision; d == nil || d.Action != qnv1alpha1.ActionScaleUp || d.Reason != "value 50 > upper 15: +2 replicas (2 → 4)" {
			t.Errorf("%s: lastDecision = %+v", name, d)
		}
		if c := meta.FindStatusCondition(sc.Status.Conditions, qnv1alpha1.ScalerAbleToScale); !strings.Contains(c.Message, fmt.Sprintf("the scale of %s %s can be read and written", targets[name].Kind, name)) {
			t.Errorf("%s: AbleToScale message %q", name, c.Message)
		}
	}
	if n := h.scales.of(s.ns, "db") + h.scales.of(s.ns, "consumer"); n != 2 {
		t.Errorf("%d /scale writes, want one per target", n)
	}
}

// qnMetric.authSecretRef: the bearer token and the CA bundle come from a
// Secret in the scaler's namespace, read through the API server, and reach
// a real Prometheus behind an authenticating https gateway (Prometheus
// checks no bearer tokens itself; kube-rbac-proxy and the like do). Each
// way the credentials can be wrong is named in MetricAvailable.
func TestTheBearerTokenAndCAOfTheScalersSecretReachPrometheus(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	s := h.scenario(t)
	bundle, err := certs.SelfSigned(certs.SelfSignedOptions{Dir: filepath.Join(t.TempDir(), "tls"), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	const token = "s3cret-token"
	gateway, err := promtest.StartQueryProxy(h.prom.URL, promtest.ProxyOptions{BearerToken: token, TLSCertFile: bundle.CertFile, TLSKeyFile: bundle.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer gateway.Close()
	s.setQueue(50)
	for _, name := range []string{"web", "wrong-token", "no-ca"} {
		s.create(h.createDeploymentObject(s.ns, name, 2))
		s.waitForReplicas(name, 2, 30*time.Second)
	}
	secret := func(name string, data map[string]string) {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name}, StringData: data}
		s.create(sec)
	}
	scaler := func(name string, ref qnv1alpha1.SecretRef) {
		s.create(s.scaler(func(sc *qnv1alpha1.HorizontalQNScaler) {
			sc.Name, sc.Spec.ScaleTargetRef.Name = name, name
			sc.Spec.QNMetric.ServerAddress = gateway.URL
			sc.Spec.QNMetric.AuthSecretRef = &ref
		}))
	}

	// The Secret does not exist yet: named, and nothing is written.
	scaler("web", qnv1alpha1.SecretRef{Name: "prometheus-auth", TokenKey: "bearer", CAKey: "ca.pem"})
	sc := s.waitForCondition("web", qnv1alpha1.ScalerMetricAvailable, metav1.ConditionFalse, string(QueryAuthUnreadable), 10*time.Second)
	if c := meta.FindStatusCondition(sc.Status.Conditions, qnv1alpha1.ScalerMetricAvailable); !strings.Contains(c.Message,
		fmt.Sprintf(`read Secret %s/prometheus-auth of qnMetric.authSecretRef: secrets "prometheus-auth" not found`, s.ns)) {
		t.Errorf("MetricAvailable message %q", c.Message)
	}
	if d, _, _ := s.replicas("web"); d != 2 || h.scales.of(s.ns, "web") != 0 {
		t.Errorf("%d replicas, %d writes without the metric; want 2 and none", d, h.scales.of(s.ns, "web"))
	}
	// The Secret made, under the keys the scaler names: the scaler reads
	// through the gateway and scales.
	secret("prometheus-auth", map[string]string{"bearer": token, "ca.pem": string(bundle.CAPEM)})
	s.waitForReplicas("web", 4, 20*time.Second)
	s.waitForCondition("web", qnv1alpha1.ScalerMetricAvailable, metav1.ConditionTrue, qnv1alpha1.ScalerReasonQuerySucceeded, 10*time.Second)
	if n := gateway.Queries(s.query()); n == 0 {
		t.Error("no query passed the gateway")
	}

	// A token the gateway does not accept (the default keys token and ca.crt).
	secret("wrong-token", map[string]string{"token": "expired", "ca.crt": string(bundle.CAPEM)})
	scaler("wrong-token", qnv1alpha1.SecretRef{Name: "wrong-token"})
	sc = s.waitForCondition("wrong-token", qnv1alpha1.ScalerMetricAvailable, metav1.ConditionFalse, string(QueryRejected), 10*time.Second)
	if c := meta.FindStatusCondition(sc.Status.Conditions, qnv1alpha1.ScalerMetricAvailable); !strings.Contains(c.Message,
		gateway.URL+" refused the query's credentials (HTTP 401 Unauthorized, a bearer token was sent)") {
		t.Errorf("MetricAvailable message %q", c.Message)
	}
	if gateway.Refused() == 0 {
		t.Error("the gateway refused nothing")
	}

	// The right token but no CA: the gateway's certificate is not trusted,
	// and the token is never sent to a server that could not be verified.
	secret("no-ca", map[string]string{"token": token})
	scaler("no-ca", qnv1alpha1.SecretRef{Name: "no-ca"})
	sc = s.waitForCondition("no-ca", qnv1alpha1.ScalerMetricAvailable, metav1.ConditionFalse, string(QueryUnreachable), 10*time.Second)
	if c := meta.FindStatusCondition(sc.Status.Conditions, qnv1alpha1.ScalerMetricAvailable); !strings.Contains(c.Message, "certificate signed by unknown authority") {
		t.Errorf("MetricAvailable message %q", c.Message)
	}
	for _, name := range []string{"wrong-token", "no-ca"} {
		if n := h.scales.of(s.ns, name); n != 0 {
			t.Errorf("%s: %d /scale writes without the metric", name, n)
		}
	}
	testharness.WaitFor(t, 10*time.Second, "MetricUnavailable events", func() error {
		ev := s.events("wrong-token")
		if !slices.ContainsFunc(ev, func(e string) bool { return strings.HasPrefix(e, "MetricUnavailable: "+gateway.URL+" refused") }) {
			return fmt.Errorf("events %q", ev)
		}
		return nil
	})
}
