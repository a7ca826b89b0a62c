package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quantumnode/qn-admission/internal/decisionlog"
	"github.com/quantumnode/qn-admission/test/harness"
)

// A qn-webhook serving the bundled policies with the proposed change of
// proposeChange as its shadow set, called by the real kube-apiserver: the
// served answers are the bundled set's (a node with SSH is stored, a
// realtime node over the 50 ms budget refused), and every disagreement on
// a crafted mix is counted and logged exactly, nothing else.
func TestShadowPolicySetJudgesLiveTrafficWithoutChangingAnswers(t *testing.T) {
	registered(t)
	ctx := context.Background()
	const ns = "shadow"
	if _, err := cluster.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Labels: map[string]string{"qn-e2e/shadow": "true"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	served := filepath.Join(t.TempDir(), "policies")
	if err := harness.WriteBundledPolicies(served); err != nil {
		t.Fatal(err)
	}
	candidate := filepath.Join(proposeChangeOf(t, served), "policies")
	w, err := startWebhook(t.TempDir(), "--policy-dir", served, "--shadow-policy-dir", candidate)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	reg := harness.WebhookRegistration{
		Name: "qn-shadow", ValidateURL: w.URL("/validate"), MutateURL: w.URL("/mutate"), CABundle: w.CABundle,
		FailurePolicy:     admissionregistrationv1.Fail,
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"qn-e2e/shadow": "true"}},
	}
	if err := harness.RegisterWebhooks(ctx, cluster.Kube, reg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, reg.Name, metav1.DeleteOptions{})
		_ = cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, reg.Name, metav1.DeleteOptions{})
	})
	// Wait until the apiserver calls the shadowed webhook: its denial of an
	// unknown role names it. These probes agree in both sets.
	if err := harness.Eventually(ctx, 30*time.Second, func() error {
		probe := qn("probe", "arm64", svc("a", 8080))
		probe.SetAnnotations(map[string]string{"qn-role": "probe-unknown"})
		if _, err := createQN(ctx, cluster.Dynamic, ns, probe, true); !Contains(err, `admission webhook "validate.qn-shadow.qn.dev" denied the request`) {
			return fmt.Errorf("the shadowed webhook is not called yet: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	bob := impersonating(t, "shadow-bob", "qn:developers").Resource(harness.QuantumNodes).Namespace(ns)
	realtime := func(name, budget string) *unstructured.Unstructured {
		obj := qn(name, "arm64", svc("rt", 9000))
		obj.SetLabels(map[string]string{"topology.kubernetes.io/zone": "cn-shanghai"})
		obj.SetAnnotations(map[string]string{"qn-role": "realtime", "qn.dev/latency-budget-ms": budget})
		return obj
	}
	mix := []struct {
		what    string
		create  func() error
		refused bool
	}{
		{what: "a node with SSH (the candidate refuses port 22)", create: func() error {
			_, err := createQN(ctx, cluster.Dynamic, ns, qn("ssh-1", "arm64", svc("ssh", 22)), false)
			return err
		}},
		{what: "another node with SSH", create: func() error {
			_, err := createQN(ctx, cluster.Dynamic, ns, qn("ssh-2", "arm64", svc("ssh", 22), svc("mqtt", 8883)), false)
			return err
		}},
		{what: "a realtime node over the 50 ms budget (the candidate allows 100)", refused: true, create: func() error {
			_, err := bob.Create(ctx, realtime("rt-80", "80"), metav1.CreateOptions{})
			return err
		}},
		{what: "a realtime node within both budgets", create: func() error {
			_, err := bob.Create(ctx, realtime("rt-20", "20"), metav1.CreateOptions{})
			return err
		}},
		{what: "a plain node", create: func() error {
			_, err := createQN(ctx, cluster.Dynamic, ns, qn("plain-1", "arm64", svc("mqtt", 8883)), false)
			return err
		}},
		{what: "a node both sets refuse (port 0)", refused: true, create: func() error {
			_, err := createQN(ctx, cluster.Dynamic, ns, qn("bad-port", "arm64", svc("x", 0)), false)
			return err
		}},
	}
	for _, m := range mix {
		err := m.create()
		if m.refused != (err != nil) {
			t.Fatalf("%s: refused=%v, want %v under the served (bundled) policies: %v", m.what, err != nil, m.refused, err)
		}
	}

	// Every request the shadowed webhook answered is judged by the
	// candidate, none dropped.
	var metrics string
	harness.WaitFor(t, 20*time.Second, "the shadow to judge every request", func() error {
		if metrics, err = w.Metrics(); err != nil {
			return err
		}
		answered, judged := sumSeries(metrics, "qn_admission_requests_total"), sumSeries(metrics, "qn_admission_shadow_evaluations_total")
		if answered == 0 || judged != answered {
			return fmt.Errorf("%v answered, %v judged by the shadow", answered, judged)
		}
		return nil
	})
	if dropped := sumSeries(metrics, "qn_admission_shadow_dropped_total"); dropped != 0 {
		t.Errorf("%v requests dropped by the shadow", dropped)
	}
	got := seriesLines(metrics, "qn_admission_shadow_disagreements_total")
	want := []string{
		`qn_admission_shadow_disagreements_total{from="denied",role="realtime",to="allowed"} 1`,
		`qn_admission_shadow_disagreements_total{from="warned",role="default",to="denied"} 2`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("disagreements:\n got  %s\n want %s", strings.Join(got, "\n      "), strings.Join(want, "\n      "))
	}

	// One decision log line per disagreement, with both answers (lines
	// are written a few milliseconds after the answers, grouped).
	var lines []map[string]any
	harness.WaitFor(t, 10*time.Second, "a decision line per disagreement", func() error {
		lines = nil
		for line := range strings.SplitSeq(w.Logs(), "\n") {
			var entry map[string]any
			if json.Unmarshal([]byte(line), &entry) == nil && entry["msg"] == decisionlog.ShadowMessage {
				lines = append(lines, entry)
			}
		}
		if len(lines) < 3 {
			return fmt.Errorf("%d shadow disagreement lines so far", len(lines))
		}
		return nil
	})
	names := []string{}
	for _, l := range lines {
		names = append(names, fmt.Sprintf("%s %s->%s", l["name"], l["from"], l["to"]))
		shadow, _ := l["shadow"].(map[string]any)
		if l["name"] == "ssh-1" && !strings.Contains(fmt.Sprint(shadow["message"]), "SSH is closed on edge nodes") {
			t.Errorf("ssh-1's shadow answer does not say why it refuses: %v", l)
		}
	}
	slices.Sort(names)
	if want := []string{"rt-80 denied->allowed", "ssh-1 warned->denied", "ssh-2 warned->denied"}; !slices.Equal(names, want) {
		t.Errorf("shadow decision lines: got %v, want %v", names, want)
	}
	// qnctl impact reads the same lines back as a report of flips.
	logFile := filepath.Join(t.TempDir(), "decisions.jsonl")
	if err := os.WriteFile(logFile, []byte(w.Logs()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(qnctl(t), "impact", "--decision-log", logFile, "-o", "json")
	out, err := cmd.Output()
	var report struct {
		Totals map[string]int `json:"totals"`
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 || json.Unmarshal(out, &report) != nil {
		t.Fatalf("qnctl impact --decision-log: exit %d (want 1: new denials), %v\n%s", code, err, out)
	}
	if report.Totals["newly denied"] != 2 || report.Totals["newly allowed"] != 1 {
		t.Errorf("qnctl impact --decision-log totals %v, want 2 newly denied and 1 newly allowed", report.Totals)
	}
	ready, err := w.Readiness()
	if err != nil || !strings.Contains(ready, "[+]shadow ok") || !strings.Contains(ready, "3 disagreements, 0 dropped") {
		t.Errorf("/readyz?verbose does not report the shadow: %v\n%s", err, ready)
	}
}

// seriesLines are the sample lines of metric name, sorted.
func seriesLines(metrics, name string) []string {
	var out []string
	for line := range strings.SplitSeq(metrics, "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			out = append(out, line)
		}
	}
	slices.Sort(out)
	return out
}

var sampleValue = regexp.MustCompile(` ([0-9.e+-]+)$`)

// sumSeries adds up every sample of metric name.
func sumSeries(metrics, name string) float64 {
	sum := 0.0
	for _, line := range seriesLines(metrics, name) {
		if m := sampleValue.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			sum += v
		}
	}
	return sum
}
