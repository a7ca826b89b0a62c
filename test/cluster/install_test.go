package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/harness/nodecluster"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
)

// testNamespace is where the tests write QuantumNodes: judged by the
// webhook (not excluded), and created once.
const testNamespace = "edge"

func (s *installed) namespace(t *testing.T) {
	t.Helper()
	_, err := s.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func quantumNode(name string, annotations, labels map[string]any, services ...map[string]any) *unstructured.Unstructured {
	if len(services) == 0 {
		services = []map[string]any{{"name": "mqtt", "port": int64(8883)}}
	}
	svc := make([]any, len(services))
	for i, s := range services {
		svc[i] = s
	}
	meta := map[string]any{"name": name, "namespace": testNamespace}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	if labels != nil {
		meta["labels"] = labels
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode", "metadata": meta,
		"spec": map[string]any{"nodeName": nodecluster.NodeName, "hardware": map[string]any{"arch": "amd64"}, "services": svc},
	}}
}

// webhookPods are the running qn-webhook Pods.
func (s *installed) webhookPods(t *testing.T) []corev1.Pod {
	t.Helper()
	pods, err := s.Kube.CoreV1().Pods(releaseNamespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=webhook", FieldSelector: "status.phase=Running"})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func (s *installed) podLogs(t *testing.T, pod corev1.Pod) string {
	t.Helper()
	b, err := s.Kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "qn-webhook"}).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("logs of %s: %v", pod.Name, err)
	}
	return string(b)
}

func TestChartDefaultsRunAsPods(t *testing.T) {
	s := cluster(t)
	ctx := context.Background()
	want := map[string]int32{releaseName + "-webhook": 2, releaseName + "-controller": 1, releaseName + "-redis": 1}
	for name, replicas := range want {
		d, err := s.Kube.AppsV1().Deployments(releaseNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("deployment %s: %v", name, err)
		}
		if d.Status.ReadyReplicas != replicas {
			t.Errorf("deployment %s has %d ready replicas, want %d", name, d.Status.ReadyReplicas, replicas)
		}
	}
	pdb, err := s.Kube.PolicyV1().PodDisruptionBudgets(releaseNamespace).Get(ctx, releaseName+"-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the webhook's PodDisruptionBudget: %v", err)
	}
	if pdb.Status.CurrentHealthy != 2 || pdb.Status.DisruptionsAllowed != 1 {
		t.Errorf("PodDisruptionBudget: %d healthy, %d disruptions allowed; want 2 and 1", pdb.Status.CurrentHealthy, pdb.Status.DisruptionsAllowed)
	}
	pods, err := s.Kube.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			if c.RestartCount != 0 {
				t.Errorf("%s/%s restarted %d times", p.Name, c.Name, c.RestartCount)
			}
			if strings.HasPrefix(c.Image, "ghcr.io/quantumnode/") && !strings.HasSuffix(c.Image, ":"+s.Version) {
				t.Errorf("%s/%s runs %s, not the image make image built (tag %s)", p.Name, c.Name, c.Image, s.Version)
			}
		}
	}
	t.Logf("images tagged %s; node images:\n%s", s.Version, func() string { out, _ := s.Images(ctx); return out }())
}

func TestMutatingWebhookLabelsAndControllerMakesReady(t *testing.T) {
	s := cluster(t)
	s.namespace(t)
	ctx := context.Background()
	qns := s.Dynamic.Resource(harness.QuantumNodes).Namespace(testNamespace)
	created, err := qns.Create(ctx, quantumNode("labelled", nil, nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a valid QuantumNode refused: %v", err)
	}
	if got := created.GetLabels()["qn.dev/managed-by"]; got != "qn-admission" {
		t.Errorf("label qn.dev/managed-by = %q, want qn-admission (the mutating webhook's)", got)
	}
	harness.WaitFor(t, 90*time.Second, "qn-controller's Pod sets phase Ready", func() error {
		got, err := qns.Get(ctx, "labelled", metav1.GetOptions{})
		if err != nil {
			return err
		}
		phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
		if phase != "Ready" {
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			return fmt.Errorf("phase %q, conditions %v", phase, conds)
		}
		return nil
	})
	if _, err := s.Kube.CoreV1().Services(testNamespace).Get(ctx, "labelled", metav1.GetOptions{}); err != nil {
		t.Errorf("the QuantumNode's Service: %v", err)
	}
}

// Each refusal must come from the layer that owns the rule: the CRD's
// schema, the ValidatingAdmissionPolicy compiled from the role table, or
// the webhook (with its decision line in the Pod's log).
func TestEachLayerRefusesWhatItOwns(t *testing.T) {
	s := cluster(t)
	s.namespace(t)
	ctx := context.Background()
	qns := s.Dynamic.Resource(harness.QuantumNodes).Namespace(testNamespace)

	t.Run("the CRD refuses a duplicate port", func(t *testing.T) {
		_, err := qns.Create(ctx, quantumNode("dup-port", nil, nil,
			map[string]any{"name": "mqtt", "port": int64(8883)}, map[string]any{"name": "mqtt-tls", "port": int64(8883)}), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("want 422 Invalid from the CRD's rules, got %v", err)
		}
		if strings.Contains(err.Error(), "admission webhook") || strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			t.Errorf("refused by admission, not the CRD: %v", err)
		}
		t.Logf("CRD: %v", err)
	})

	t.Run("the ValidatingAdmissionPolicy refuses an operation the role forbids", func(t *testing.T) {
		batch := quantumNode("batch-1", map[string]any{"qn-role": "batch"}, map[string]any{"priority": "low"})
		if _, err := qns.Create(ctx, batch, metav1.CreateOptions{}); err != nil {
			t.Fatalf("a batch QuantumNode refused: %v", err)
		}
		got, err := qns.Get(ctx, "batch-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedSlice(got.Object, []any{map[string]any{"name": "amqp", "port": int64(5671)}}, "spec", "services")
		_, err = qns.Update(ctx, got, metav1.UpdateOptions{})
		if err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			t.Fatalf("an UPDATE under role batch (CREATE only) should be refused by the ValidatingAdmissionPolicy, got %v", err)
		}
		t.Logf("VAP: %v", err)
	})

	t.Run("the webhook refuses what only it knows, and logs its decision", func(t *testing.T) {
		// The validating webhook's own Rego (the realtime role's zone
		// condition reads a label; the VAP carries it too), so the one rule
		// no other layer holds is the rate window: see
		// TestOneWindowAcrossReplicas. Here: a privileged port is admitted
		// with the webhook's warning only it gives, and its decision line.
		var warnings harness.Warnings
		cfg := rest.CopyConfig(s.Config)
		cfg.WarningHandler = &warnings
		dyn, err := dynamicFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = dyn.Resource(harness.QuantumNodes).Namespace(testNamespace).Create(ctx, quantumNode("low-port", nil, nil,
			map[string]any{"name": "http", "port": int64(80)}), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a QuantumNode with port 80 refused: %v", err)
		}
		if !warnings.Seen("uses privileged port 80") {
			t.Errorf("no warning from the webhook about port 80; warnings: %q", warnings.List())
		}
		seen := 0
		for _, p := range s.webhookPods(t) {
			for line := range strings.SplitSeq(s.podLogs(t, p), "\n") {
				if strings.Contains(line, `"msg":"admission decision"`) && strings.Contains(line, `"low-port"`) {
					seen++
				}
			}
		}
		if seen == 0 {
			t.Errorf("no decision line for low-port in the webhook Pods' logs")
		}
	})
}

// readiness is a webhook Pod's /readyz?verbose and the lines of its log
// that are not decisions, for a failure message.
func (s *installed) readiness(pod corev1.Pod) string {
	resp, err := http.Get("http://" + pod.Status.PodIP + ":8080/readyz?verbose")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	logs, _ := s.Kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "qn-webhook"}).DoRaw(context.Background())
	var other []string
	for line := range strings.SplitSeq(string(logs), "\n") {
		if !strings.Contains(line, `"msg":"admission decision"`) {
			other = append(other, line)
		}
	}
	return fmt.Sprintf("%s /readyz?verbose:\n%s\nlog:\n%s", pod.Name, body, strings.Join(other, "\n"))
}

// review is one AdmissionReview answer read straight from a webhook Pod.
type review struct {
	Allowed bool
	Code    int32
	Message string
}

// webhookClient calls webhook Pods by address, verifying their serving
// certificate as the API server does.
func (s *installed) webhookClient() *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.WebhookCA)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: releaseName + "-webhook." + releaseNamespace + ".svc"}}}
}

// reviewPod sends a validating AdmissionReview for a batch QuantumNode
// CREATE by user to one webhook Pod, as the API server would.
func reviewPod(client *http.Client, podIP, uid, user string) (review, error) {
	obj := quantumNode("w-"+uid, map[string]any{"qn-role": "batch"}, map[string]any{"priority": "low"})
	body, err := json.Marshal(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{
			"uid": uid, "kind": map[string]any{"group": "qn.dev", "version": "v1alpha1", "kind": "QuantumNode"},
			"resource": map[string]any{"group": "qn.dev", "version": "v1alpha1", "resource": "quantumnodes"},
			"name":     obj.GetName(), "namespace": testNamespace, "operation": "CREATE",
			"userInfo": map[string]any{"username": user, "groups": []string{"system:authenticated"}},
			"object":   obj.Object, "dryRun": false,
			"options": map[string]any{"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
		},
	})
	if err != nil {
		return review{}, err
	}
	resp, err := client.Post("https://"+podIP+":8443/validate", "application/json", bytes.NewReader(body))
	if err != nil {
		return review{}, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out struct {
		Response struct {
			Allowed bool
			Status  struct {
				Code    int32
				Message string
			}
		}
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return review{}, fmt.Errorf("answer %d from %s: %v: %s", resp.StatusCode, podIP, err, data)
	}

	return review{out.Response.Allowed, out.Response.Status.Code, out.Response.Status.Message}, nil
}

// One requester's window is one window whichever replica answers: both
// webhook Pods count in the chart's Redis (reached by its Service name
// through the cluster's DNS), and the API server's answers carry the
// limit's 429.
func TestOneWindowAcrossReplicas(t *testing.T) {
	s := cluster(t)
	s.namespace(t)
	const limit = 30 // roles.yaml: batch, 30 per 60 s per user

	t.Run("reviews alternating between the two Pods", func(t *testing.T) {
		pods := s.webhookPods(t)
		if len(pods) != 2 {
			t.Fatalf("%d running webhook Pods, want 2", len(pods))
		}
		client := s.webhookClient()
		admitted := map[string]int{}
		refused := 0
		for i := 0; i < limit+10; i++ {
			pod := pods[i%2]
			r, err := reviewPod(client, pod.Status.PodIP, fmt.Sprintf("direct-%d", i), "direct-user")
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case r.Allowed:
				admitted[pod.Name]++
			case r.Code == http.StatusTooManyRequests:
				refused++
			default:
				t.Fatalf("review %d refused with %d: %s", i, r.Code, r.Message)
			}
		}
		total := 0
		for _, n := range admitted {
			total += n
		}
		if total != limit || refused != 10 || len(admitted) != 2 {
			t.Fatalf("admitted %v (total %d), refused %d: want %d admitted across both Pods and 10 refused\n%s", admitted, total, refused, limit, s.readiness(pods[0]))
		}
	})

	t.Run("writes through the API server", func(t *testing.T) {
		cfg := rest.CopyConfig(s.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "window-user", Groups: []string{"system:masters"}}
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		url := cfg.Host + "/apis/qn.dev/v1alpha1/namespaces/" + testNamespace + "/quantumnodes"
		admitted, refused := 0, 0
		for i := 0; i < limit+5; i++ {
			// Raw requests: client-go (and kubectl) wait out a 429's
			// Retry-After and retry, which would hide the answer.
			body, _ := json.Marshal(quantumNode(fmt.Sprintf("win-%d", i), map[string]any{"qn-role": "batch"}, map[string]any{"priority": "low"}).Object)
			resp, err := client.Post(url, "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusCreated:
				admitted++
			case http.StatusTooManyRequests:
				refused++
				if resp.Header.Get("Retry-After") == "" && !strings.Contains(string(data), "retryAfterSeconds") {
					t.Errorf("429 without Retry-After: %s", data)
				}
				if refused == 1 {
					t.Logf("429: Retry-After %q, %s", resp.Header.Get("Retry-After"), data)
				}
			default:
				t.Fatalf("create %d answered %d: %s", i, resp.StatusCode, data)
			}
		}
		if admitted != limit || refused != 5 {
			t.Fatalf("%d admitted and %d refused with 429; want %d and 5", admitted, refused, limit)
		}
	})
}
