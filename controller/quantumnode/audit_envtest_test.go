package quantumnode

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/controller/audit"
	"github.com/quantumnode/qn-admission/internal/dirwatch"
	"github.com/quantumnode/qn-admission/policies"
	testharness "github.com/quantumnode/qn-admission/test/harness"
)

// auditTestLabel marks the QuantumNodes of one audit test; the shared
// manager ignores them and the test's own manager sees only them.
const auditTestLabel = "qn.dev/audit-test"

// retirementWaiver is the label that exempts a node from the test policy's
// retired architectures.
const retirementWaiver = "qn.dev/retirement-waiver"

// policyReportCRD is the PolicyReport CRD the chart ships.
func policyReportCRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	path := filepath.Join(testharness.ModuleRoot(), "charts", "qn-admission", "files", "crds", "wgpolicyk8s.io_policyreports.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, out); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// testPolicies is a policy directory of two packages: t.arch refuses the
// architectures listed in the default role's retired parameter, and
// t.requester reads the requester, which a stored node does not have.
func testPolicies(retired ...string) map[string]string {
	quoted := make([]string, len(retired))
	for i, a := range retired {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	return map[string]string{
		"roles.yaml": fmt.Sprintf(`defaultRole: default
roles:
  default:
    operations: [CREATE, UPDATE, DELETE]
    packages: [t.arch, t.requester]
    parameters: {retired: [%s]}
`, strings.Join(quoted, ", ")),
		"arch.rego": `package t.arch

deny contains msg if {
	arch := input.request.object.spec.hardware.arch
	arch in data.roles.default.retired
	not input.request.object.metadata.labels["` + retirementWaiver + `"]
	msg := sprintf("arch %s is retired", [arch])
}
`,
		"requester.rego": `package t.requester

deny contains "only admins may write QuantumNodes" if input.context.user != "admin"
`,
	}
}

func writePolicies(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		// Write then rename, as a ConfigMap swap does: never half a file.
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// requestCounter counts the requests a manager sends the API server.
type requestCounter struct {
	total, writes atomic.Int64
}

type countingTransport struct {
	next    http.RoundTripper
	counter *requestCounter
}

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.counter.total.Add(1)
	if req.Method != http.MethodGet {
		c.counter.writes.Add(1)
	}
	return c.next.RoundTrip(req)
}

// auditHarness is a manager of its own running the audit over the nodes
// labelled with its label, with a policy directory it can change.
type auditHarness struct {
	*harness
	label    string
	dir      string
	engine   *policies.Engine
	requests *requestCounter
	writes   *writeCounter
}

type auditConfig struct {
	quiescence time.Duration
	rate       float64
	qps        float32
	burst      int
	retired    []string
}

func (h *harness) startAudit(t testing.TB, c auditConfig) *auditHarness {
	t.Helper()
	a := &auditHarness{harness: h, label: fmt.Sprintf("a%d", namespaces.Add(1)), dir: t.TempDir(), requests: &requestCounter{}, writes: &writeCounter{counts: map[string]int{}}}
	writePolicies(t, a.dir, testPolicies(c.retired...))
	ctx, cancel := context.WithCancel(context.Background())
	source, err := policies.Open(policies.OpenOptions{Dir: a.dir, Watch: dirwatch.Options{PollInterval: 100 * time.Millisecond, Debounce: 50 * time.Millisecond}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	set, err := source.Load(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	a.engine = policies.NewEngine(set, policies.EngineOptions{})
	var wg sync.WaitGroup
	wg.Go(func() { _ = source.Run(ctx, a.engine) })

	cfg := rest.CopyConfig(h.cfg)
	cfg.QPS, cfg.Burst = c.qps, c.burst
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, counter: a.requests} })
	mine, err := labels.Parse(auditTestLabel + "=" + a.label)
	if err != nil {
		t.Fatal(err)
	}
	cacheOpts := controller.CacheOptions()
	cacheOpts.ByObject[&qnv1alpha1.QuantumNode{}] = cache.ByObject{Label: mine}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: h.scheme, Cache: cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Each test's manager names its controllers as the shared one does.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &Reconciler{
		Client:                  countingClient{Client: mgr.GetClient(), writes: a.writes},
		Metrics:                 prometheus.NewRegistry(),
		MaxConcurrentReconciles: 4,
		Policies:                a.engine,
		Audit:                   &audit.Options{Rate: c.rate, PollInterval: 100 * time.Millisecond, Reports: true},
		QuiescenceWindow:        c.quiescence,
		MaxRequeueDelay:         max(10*time.Second, 2*c.quiescence),
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		cancel()
		t.Fatal(err)
	}
	runManager(t, ctx, cancel, mgr, "audit", wg.Wait)
	return a
}

// createNode creates an arm64 QuantumNode that this harness audits.
func (a *auditHarness) createNode(t testing.TB, ns, name string, arch qnv1alpha1.Arch) *qnv1alpha1.QuantumNode {
	t.Helper()
	return a.createQuantumNode(t, ns, name, func(qn *qnv1alpha1.QuantumNode) {
		qn.Labels = map[string]string{auditTestLabel: a.label}
		qn.Spec.Hardware.Arch = arch
	})
}

// compliance reads the stored PolicyCompliant condition of a node.
func (a *auditHarness) compliance(key client.ObjectKey) (*qnv1alpha1.QuantumNode, *metav1.Condition, error) {
	qn := &qnv1alpha1.QuantumNode{}
	if err := a.client.Get(context.Background(), key, qn); err != nil {
		return nil, nil, err
	}
	return qn, meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionPolicyCompliant), nil
}

// waitCompliance waits until the node's PolicyCompliant condition has
// status and reason, judged with the engine's current revision at the
// node's current generation.
func (a *auditHarness) waitCompliance(t testing.TB, key client.ObjectKey, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	var got *metav1.Condition
	eventually(t, fmt.Sprintf("%s is PolicyCompliant=%s (%s)", key, status, reason), func() error {
		qn, c, err := a.compliance(key)
		if err != nil {
			return err
		}
		rev := a.engine.Current().Revision
		switch {
		case c == nil:
			return errors.New("no PolicyCompliant condition")
		case c.Status != status || c.Reason != reason:
			return fmt.Errorf("%s/%s: %s", c.Status, c.Reason, c.Message)
		case !strings.Contains(c.Message, rev):
			return fmt.Errorf("judged with another revision than %s: %s", rev, c.Message)
		case c.ObservedGeneration != qn.Generation:
			return fmt.Errorf("observedGeneration %d, generation %d", c.ObservedGeneration, qn.Generation)
		}
		got = c
		return nil
	})
	return got
}

// report reads the namespace's PolicyReport.
func (a *auditHarness) report(ns string) (*unstructured.Unstructured, error) {
	r := &unstructured.Unstructured{}
	r.SetGroupVersionKind(audit.PolicyReportGVK)
	err := a.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: audit.ReportName}, r)
	return r, err
}

// reportNodes lists "node:package.rule" of the report's results with the
// given outcome.
func reportNodes(r *unstructured.Unstructured, result string) []string {
	items, _, _ := unstructured.NestedSlice(r.Object, "results")
	var out []string
	for _, it := range items {
		m := it.(map[string]any)
		if m["result"] != result {
			continue
		}
		resources, _ := m["resources"].([]any)
		for _, res := range resources {
			out = append(out, fmt.Sprintf("%s:%s.%s", res.(map[string]any)["name"], m["policy"], m["rule"]))
		}
	}
	slices.Sort(out)
	return out
}

func summaryOf(r *unstructured.Unstructured, key string) int64 {
	n, _, _ := unstructured.NestedInt64(r.Object, "summary", key)
	return n
}

// waitReport waits until the namespace's report fails exactly the nodes of
// want ("name:package.rule").
func (a *auditHarness) waitReport(t testing.TB, ns string, want []string, skips int64) *unstructured.Unstructured {
	t.Helper()
	var got *unstructured.Unstructured
	eventually(t, fmt.Sprintf("the PolicyReport of %s fails exactly %v", ns, want), func() error {
		r, err := a.report(ns)
		if err != nil {
			return err
		}
		if fails := reportNodes(r, "fail"); !slices.Equal(fails, want) {
			return fmt.Errorf("it fails %v", fails)
		}
		if s := summaryOf(r, "skip"); s != skips {
			return fmt.Errorf("summary.skip %d, want %d", s, skips)
		}
		if f := summaryOf(r, "fail"); f != int64(len(want)) {
			return fmt.Errorf("summary.fail %d, want %d", f, len(want))
		}
		got = r
		return nil
	})
	return got
}

// A QuantumNode admitted under an old policy turns non-compliant when the
// policy changes, and compliant again once it is fixed; the rule that reads
// the requester is skipped, never passed; the report lists exactly the
// failing nodes and forgets a deleted one.
func TestEnvtestTheAuditFollowsThePolicyDirectory(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	a := h.startAudit(t, auditConfig{quiescence: 0, rate: 200, qps: 50, burst: 100})
	ns := h.namespace(t)
	arm := a.createNode(t, ns, "arm", qnv1alpha1.ArchARM64)
	amd := a.createNode(t, ns, "amd", qnv1alpha1.ArchAMD64)
	oldRevision := a.engine.Current().Revision
	for _, qn := range []*qnv1alpha1.QuantumNode{arm, amd} {
		c := a.waitCompliance(t, client.ObjectKeyFromObject(qn), metav1.ConditionTrue, qnv1alpha1.ReasonCompliant)
		if !strings.Contains(c.Message, "1 rules that read the requester are judged only at admission") {
			t.Errorf("the message does not say the requester rule was skipped: %s", c.Message)
		}
	}
	r := a.waitReport(t, ns, nil, 2)
	if skipped := reportSkips(r); !slices.Equal(skipped, []string{"t.requester.deny"}) {
		t.Errorf("skipped results %v, want the requester rule once", skipped)
	}

	writePolicies(t, a.dir, testPolicies("amd64"))
	eventually(t, "the new policy revision is served", func() error {
		if a.engine.Current().Revision == oldRevision {
			return errors.New("still " + oldRevision)
		}
		return nil
	})
	c := a.waitCompliance(t, client.ObjectKeyFromObject(amd), metav1.ConditionFalse, qnv1alpha1.ReasonPolicyViolation)
	if !strings.Contains(c.Message, "[t.arch] arch amd64 is retired") {
		t.Errorf("the message does not name the violation: %s", c.Message)
	}
	a.waitCompliance(t, client.ObjectKeyFromObject(arm), metav1.ConditionTrue, qnv1alpha1.ReasonCompliant)
	a.waitReport(t, ns, []string{"amd:t.arch.deny"}, 2)
	eventually(t, "a Warning event says why amd turned non-compliant", func() error {
		events := &eventsv1.EventList{}
		if err := h.client.List(context.Background(), events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Regarding.Name == "amd" && e.Type == "Warning" && e.Reason == qnv1alpha1.ReasonPolicyViolation && strings.Contains(e.Note, "arch amd64 is retired") {
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(events.Items))
	})

	// A second failing node appears in the report, and leaves it when deleted.
	other := a.createNode(t, ns, "amd-2", qnv1alpha1.ArchAMD64)
	a.waitReport(t, ns, []string{"amd-2:t.arch.deny", "amd:t.arch.deny"}, 3)
	if err := h.client.Delete(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	a.waitReport(t, ns, []string{"amd:t.arch.deny"}, 2)

	// Fixed: compliant again, and the report fails nobody. The architecture
	// is immutable (the CRD refuses a change), so the owner takes the
	// policy's waiver label.
	h.update(t, amd, func() { amd.Labels[retirementWaiver] = "true" })
	a.waitCompliance(t, client.ObjectKeyFromObject(amd), metav1.ConditionTrue, qnv1alpha1.ReasonCompliant)
	a.waitReport(t, ns, nil, 2)

	// The last node gone, the report goes too.
	for _, qn := range []*qnv1alpha1.QuantumNode{arm, amd} {
		if err := h.client.Delete(context.Background(), qn); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the report of a namespace without QuantumNodes is deleted", func() error {
		_, err := a.report(ns)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

func reportSkips(r *unstructured.Unstructured) []string {
	items, _, _ := unstructured.NestedSlice(r.Object, "results")
	var out []string
	for _, it := range items {
		m := it.(map[string]any)
		if m["result"] == "skip" {
			out = append(out, fmt.Sprintf("%s.%s", m["policy"], m["rule"]))
		}
	}
	return out
}

// Twenty spec updates inside the quiescence window end in one status
// write, which observes the last generation.
func TestEnvtestABurstOfSpecUpdatesSettlesInOneStatusWrite(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	// Long enough that 20 updates fit in it on a loaded CI machine (they took
	// 9.7s at a load of 30 on 2 cores).
	const window = 15 * time.Second
	a := h.startAudit(t, auditConfig{quiescence: window, rate: 200, qps: 100, burst: 200})
	ns := h.namespace(t)
	qn := a.createNode(t, ns, "burst", qnv1alpha1.ArchARM64)
	key := client.ObjectKeyFromObject(qn)
	a.waitCompliance(t, key, metav1.ConditionTrue, qnv1alpha1.ReasonCompliant)
	// The first status has settled once its conditions are a window old.
	eventuallyWithin(t, 4*window, "the first status settles", func() error {
		got, _, err := a.compliance(key)
		if err != nil {
			return err
		}
		if got.Status.Phase != qnv1alpha1.PhasePending || got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("phase %s, observed %d of %d", got.Status.Phase, got.Status.ObservedGeneration, got.Generation)
		}
		for _, c := range got.Status.Conditions {
			if time.Since(c.LastTransitionTime.Time) < window+time.Second {
				return fmt.Errorf("condition %s changed at %s", c.Type, c.LastTransitionTime)
			}
		}
		return nil
	})
	before := a.writes.of(qn)

	start := time.Now()
	for i := range 20 {
		h.update(t, qn, func() { qn.Spec.Services[0].Port = int32(9100 + i) })
	}
	burst := time.Since(start)
	if burst >= window {
		t.Fatalf("the 20 updates took %s, longer than the %s window: the machine is too slow for this test to mean anything", burst, window)
	}
	final := qn.Generation
	eventuallyWithin(t, 4*window, "the status observes the last generation", func() error {
		got, _, err := a.compliance(key)
		if err != nil {
			return err
		}
		if got.Status.ObservedGeneration != final {
			return fmt.Errorf("observedGeneration %d, want %d", got.Status.ObservedGeneration, final)
		}
		return nil
	})
	if n := a.writes.of(qn) - before; n != 1 {
		t.Errorf("%d status writes for a burst of 20 spec updates in %s, want 1", n, burst.Round(time.Millisecond))
	}
}

// BenchmarkEnvtestAuditOf1000NodesAfterAPolicyChange measures how long the
// audit takes to re-judge 1,000 stored nodes after the policy changes, from
// the change on disk to every node's condition and the report saying so,
// and the API server requests it caused (counted by a RoundTripper around
// the manager's clients). Each iteration flips the policy between retiring
// arm64 and retiring nothing. Two settings: qn-controller's defaults (50
// nodes per second, client QPS 20, burst 30) and a fast one.
func BenchmarkEnvtestAuditOf1000NodesAfterAPolicyChange(b *testing.B) {
	nodes := 1000
	if n, err := strconv.Atoi(os.Getenv("QN_AUDIT_BENCH_NODES")); err == nil && n > 0 {
		nodes = n // a smaller run while working on the audit
	}
	h := startControlPlane(b)
	for _, bc := range []struct {
		name string
		cfg  auditConfig
	}{
		{"defaults", auditConfig{rate: 50, qps: 20, burst: 30}},
		{"fast", auditConfig{rate: 500, qps: 200, burst: 400}},
	} {
		b.Run(bc.name, func(b *testing.B) { benchmarkPolicyChange(b, h, nodes, bc.cfg) })
	}
}

func benchmarkPolicyChange(b *testing.B, h *harness, nodes int, cfg auditConfig) {
	a := h.startAudit(b, cfg)
	ns := h.namespace(b)
	for i := range nodes {
		a.createNode(b, ns, fmt.Sprintf("n-%04d", i), qnv1alpha1.ArchARM64)
	}
	wantAll := func(reason string) {
		// Polled once a second: listing 1,000 nodes is itself work.
		eventuallyWithin(b, time.Duration(nodes)*600*time.Millisecond, fmt.Sprintf("all %d nodes are %s under revision %s", nodes, reason, a.engine.Current().Revision), func() error {
			time.Sleep(time.Second)
			list := &qnv1alpha1.QuantumNodeList{}
			if err := h.client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
				return err
			}
			rev := a.engine.Current().Revision
			n := 0
			for i := range list.Items {
				if c := meta.FindStatusCondition(list.Items[i].Status.Conditions, qnv1alpha1.ConditionPolicyCompliant); c != nil && c.Reason == reason && strings.Contains(c.Message, rev) {
					n++
				}
			}
			if n != nodes {
				return fmt.Errorf("%d of %d", n, nodes)
			}
			r, err := a.report(ns)
			if err != nil {
				return err
			}
			wantFail := 0
			if reason == qnv1alpha1.ReasonPolicyViolation {
				wantFail = nodes
			}
			if f := summaryOf(r, "fail"); f != int64(wantFail) {
				return fmt.Errorf("the report fails %d, want %d", f, wantFail)
			}
			return nil
		})
	}
	created := time.Now()
	wantAll(qnv1alpha1.ReasonCompliant)
	b.Logf("the first audit of %d new nodes (status, Service, report) settled %.1fs after the last was created", nodes, time.Since(created).Seconds())
	b.ResetTimer()
	var requests, writes int64
	var elapsed time.Duration
	for i := range b.N {
		retire, reason := []string{"arm64"}, qnv1alpha1.ReasonPolicyViolation
		if i%2 == 1 {
			retire, reason = nil, qnv1alpha1.ReasonCompliant
		}
		r0, w0 := a.requests.total.Load(), a.requests.writes.Load()
		start := time.Now()
		writePolicies(b, a.dir, testPolicies(retire...))
		wantAll(reason)
		elapsed += time.Since(start)
		requests += a.requests.total.Load() - r0
		writes += a.requests.writes.Load() - w0
	}
	b.StopTimer()
	b.ReportMetric(elapsed.Seconds()/float64(b.N), "s/change")
	b.ReportMetric(float64(requests)/float64(b.N), "requests/change")
	b.ReportMetric(float64(writes)/float64(b.N), "writes/change")
	b.ReportMetric(float64(requests)/elapsed.Seconds(), "requests/s")
	b.Logf("%d nodes, audit rate %v/s, client QPS %v burst %d: %.1fs per policy change (polled every 1s), %d requests (%d writes) per change, %.0f requests/s",
		nodes, cfg.rate, cfg.qps, cfg.burst, elapsed.Seconds()/float64(b.N), requests/int64(b.N), writes/int64(b.N), float64(requests)/elapsed.Seconds())
}
