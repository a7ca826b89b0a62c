package cluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/harness/nodecluster"
	"github.com/quantumnode/qn-admission/test/promtest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// pauseDeployment makes a Deployment of replicas Pods running the pause
// image (on the node already: nothing is pulled) with labels.
func (s *installed) pauseDeployment(name string, replicas int32, labels map[string]string) error {
	_, err := s.Kube.AppsV1().Deployments(testNamespace).Create(context.Background(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr(int64(1)),
					Containers:                    []corev1.Container{{Name: "pause", Image: nodecluster.PauseImage, ImagePullPolicy: corev1.PullNever}},
				},
			},
		},
	}, metav1.CreateOptions{})
	return err
}

// prometheusOnNode runs a real Prometheus on the node's address (where the
// controller's Pod reaches it), scraping an exporter whose series metric
// reads value; both stop when the test ends.
func prometheusOnNode(t *testing.T, metric string, value float64) *promtest.Server {
	t.Helper()
	exporter := promtest.NewExporter()
	t.Cleanup(exporter.Close)
	exporter.Set(metric, "cluster", value)
	dir, err := os.MkdirTemp("", "qn-prometheus-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	prom, err := promtest.Start(promtest.Binary(t), promtest.Options{Dir: dir, Targets: []string{exporter.Target()}, Host: nodecluster.NodeIP})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prom.Stop)
	prom.WaitFor(t, "sum("+metric+")", value)
	return prom
}

// scalerSteps are a test scaler's bounds: maxReplicas, scaleUpStep and
// the scale-up cooldown in seconds.
type scalerSteps struct{ max, step, cooldown int64 }

// createScaler makes a HorizontalQNScaler of the Deployment name on
// query (above 1,000: up; below 100: down), polled every second.
func (s *installed) createScaler(t *testing.T, name, query, promURL string, steps scalerSteps) {
	t.Helper()
	scaler := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "qn.dev/v1alpha1", "kind": "HorizontalQNScaler",
		"metadata": map[string]any{"name": name, "namespace": testNamespace},
		"spec": map[string]any{
			"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
			"minReplicas":    int64(1), "maxReplicas": steps.max,
			"qnMetric":    map[string]any{"query": query, "serverAddress": promURL},
			"thresholds":  map[string]any{"upper": "1000", "lower": "100"},
			"scaleUpStep": steps.step, "scaleUpCooldownSeconds": steps.cooldown, "pollingIntervalSeconds": int64(1),
		},
	}}
	if _, err := s.Dynamic.Resource(harness.Scalers).Namespace(testNamespace).Create(context.Background(), scaler, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the HorizontalQNScaler %s: %v", name, err)
	}
}

// qn-controller's Pod scales a real Deployment on a figure it reads from a
// real Prometheus, and the new replicas run as Pods on the node.
func TestScalerScalesADeploymentWhosePodsRun(t *testing.T) {
	s := cluster(t)
	s.namespace(t)
	ctx := context.Background()

	prom := prometheusOnNode(t, "qn_cluster_queue_depth", 5000)
	if err := s.pauseDeployment("queue-worker", 1, map[string]string{"app": "queue-worker"}); err != nil {
		t.Fatal(err)
	}
	s.createScaler(t, "queue-worker", `sum(qn_cluster_queue_depth)`, prom.URL, scalerSteps{max: 3, step: 2, cooldown: 0})
	harness.WaitFor(t, 2*time.Minute, "the Deployment scaled to 3 with 3 Pods ready", func() error {
		d, err := s.Kube.AppsV1().Deployments(testNamespace).Get(ctx, "queue-worker", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if *d.Spec.Replicas != 3 || d.Status.ReadyReplicas != 3 {
			got, _ := s.Dynamic.Resource(harness.Scalers).Namespace(testNamespace).Get(ctx, "queue-worker", metav1.GetOptions{})
			var status any
			if got != nil {
				status = got.Object["status"]
			}
			return fmt.Errorf("spec.replicas %d, %d ready; scaler status %v", *d.Spec.Replicas, d.Status.ReadyReplicas, status)
		}
		return nil
	})
}
