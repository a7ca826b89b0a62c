package load

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/internal/decisionlog"
	"github.com/quantumnode/qn-admission/policies/shadow"
	"github.com/quantumnode/qn-admission/test/harness"
)

// shadowCase is one kind of request of the crafted mix: a fixture of
// testdata/ changed by edit, named name (its object's name, which the
// decision lines carry), sent times per round, and what the shadow must
// make of it: no disagreement when from is "".
type shadowCase struct {
	name     string
	base     string
	edit     func(req map[string]any)
	mutating bool
	times    int
	// served is the served (bundled) set's answer, which every answer
	// must be.
	served   Expect
	from, to string
	role     string
}

// The crafted mix against WriteShadowCandidate's set: requests the
// candidate refuses that the served set admits (with a warning), refuses
// where the served set admits, refuses for other reasons, answers the
// same, and requests no role judges (a Pod, an exempt namespace) or no
// role of either set knows; on both webhook paths.
var shadowMix = []shadowCase{
	{name: "ssh", base: "default-create-allowed.json", edit: addService("ssh", 22), times: 3,
		served: Expect{Allowed: true}, role: "default", from: "warned", to: "denied"},
	{name: "rt-budget-80", base: "realtime-create-denied.json", edit: setLabel("topology.kubernetes.io/zone", "cn-shanghai"), times: 2,
		served: Expect{Allowed: false}, role: "realtime", from: "denied", to: "allowed"},
	// Refused by both, for the zone; only the served set names the budget.
	{name: "rt-zone-budget-80", base: "realtime-create-denied.json", times: 1,
		served: Expect{Allowed: false}, role: "realtime", from: "denied", to: "denied"},
	{name: "rt-zone-budget-20", base: "realtime-create-denied.json", edit: setAnnotation("qn.dev/latency-budget-ms", "20"), times: 1,
		served: Expect{Allowed: false}},
	{name: "default-ok", base: "default-create-allowed.json", times: 1, served: Expect{Allowed: true}},
	{name: "default-duplicate-port", base: "default-create-denied.json", times: 1, served: Expect{Allowed: false}},
	{name: "batch-ok", base: "batch-create-allowed.json", times: 1, served: Expect{Allowed: true}},
	{name: "batch-high-priority", base: "batch-create-denied.json", times: 1, served: Expect{Allowed: false}},
	{name: "pod", base: "pod-create-5k.json", times: 1, served: Expect{Allowed: true}},
	{name: "exempt-ssh", base: "default-create-allowed.json", edit: both(addService("ssh", 22), setNamespace("kube-system")), times: 1,
		served: Expect{Allowed: true}},
	{name: "unknown-role-ssh", base: "default-create-allowed.json", edit: both(addService("ssh", 22), setAnnotation("qn-role", "gpu")), times: 1,
		served: Expect{Allowed: false}},
	{name: "ssh", base: "default-create-allowed.json", edit: addService("ssh", 22), mutating: true, times: 1,
		served: Expect{Allowed: true, Patched: true}},
	{name: "rt-budget-80", base: "realtime-create-denied.json", edit: setLabel("topology.kubernetes.io/zone", "cn-shanghai"), mutating: true, times: 1,
		served: Expect{Allowed: true, Patched: true}},
}

// TestShadowCountsEveryDisagreementOfACraftedMixExactly loads the real
// qn-webhook, serving the bundled policies with WriteShadowCandidate's set
// as its shadow, with a crafted mix at 8 requests in flight. Each burst is
// smaller than the shadow's queue and the next waits until the shadow has
// judged it, so the shadow keeps up and drops nothing, which the test
// asserts: then every disagreement is counted in
// qn_admission_shadow_disagreements_total{role,from,to} exactly, one
// decision line with both answers per disagreeing request and none for the
// others, and every served answer is the served set's (its decision and
// its revision), never the candidate's.
func TestShadowCountsEveryDisagreementOfACraftedMixExactly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs qn-webhook")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, err := harness.Build(ctx, dir, "./cmd/qn-webhook")
	if err != nil {
		t.Fatal(err)
	}
	candidate := filepath.Join(dir, "candidate")
	if err := WriteShadowCandidate(candidate); err != nil {
		t.Fatal(err)
	}
	decisions := filepath.Join(dir, "decisions.jsonl")
	srv, err := StartWebhookShadow(NameWebhookShadow, bin, filepath.Join(dir, "certs"), candidate, nil, "--decision-log", decisions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop: %v\n%s", err, srv.Logs())
		}
	})

	var calls []Call
	for _, c := range shadowMix {
		f := craftFixture(t, c)
		for range c.times {
			calls = append(calls, Call{Fixture: f, Mutating: c.mutating})
		}
	}
	const rounds, bursts = 3, 20
	perBurst := rounds * len(calls)
	if perBurst >= shadow.DefaultQueue {
		t.Fatalf("a burst of %d requests could fill the shadow's queue of %d", perBurst, shadow.DefaultQueue)
	}
	client := NewClient(srv.Target, 8)
	defer client.Close()
	var total ShadowCounts
	for i := range bursts {
		base, err := srv.ShadowCounts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := client.Run(ctx, Load{Calls: calls, Concurrency: 8, Duration: time.Minute, MaxRequests: perBurst})
		if err != nil {
			t.Fatal(err)
		}
		if r.Requests != perBurst || r.Errors != 0 {
			t.Fatalf("burst %d: %d requests, want %d; %d wrong answers: %s", i+1, r.Requests, perBurst, r.Errors, strings.Join(r.FirstErrors, "; "))
		}
		got, err := srv.WaitShadow(ctx, base, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got.Answered != perBurst || got.Judged != perBurst || got.Dropped != 0 {
			t.Fatalf("burst %d: %d answered, %d judged, %d dropped by the shadow; want all %d judged, none dropped", i+1, got.Answered, got.Judged, got.Dropped, perBurst)
		}
		total = total.Add(got)
	}
	sent := rounds * bursts

	// The expected disagreements, by series and by request name.
	wantSeries := map[string]int{}
	wantLines := map[string]int{}
	for _, c := range shadowMix {
		if c.from == "" {
			continue
		}
		wantSeries[fmt.Sprintf("role=%s from=%s to=%s", c.role, c.from, c.to)] += c.times * sent
		wantLines[fmt.Sprintf("%s %s->%s", c.name, c.from, c.to)] += c.times * sent
	}
	wantTotal := 0
	for _, n := range wantSeries {
		wantTotal += n
	}
	// The disagreement is counted, then logged, just after the judgement:
	// wait for the last ones.
	var lines []decisionLine
	var metrics Metrics
	_ = harness.Eventually(ctx, 10*time.Second, func() error {
		if metrics, err = srv.Metrics(ctx); err != nil {
			return err
		}
		lines = readDecisionLines(t, decisions)
		logged := 0
		for _, l := range lines {
			if l.Msg == decisionlog.ShadowMessage {
				logged++
			}
		}
		counted := int(metrics.Sum(MetricShadowDiffers, nil))
		if counted != wantTotal || logged != wantTotal {
			return fmt.Errorf("%d disagreements counted, %d logged, want %d", counted, logged, wantTotal)
		}
		return nil
	})

	if got := int(metrics.Sum(MetricShadowJudged, nil)); got != perBurst*bursts {
		t.Errorf("%s = %d, want every request of the %d sent", MetricShadowJudged, got, perBurst*bursts)
	}
	if got := metrics.Sum(MetricShadowDropped, nil); got != 0 {
		t.Errorf("%s = %v, want 0", MetricShadowDropped, got)
	}
	gotSeries := map[string]int{}
	for _, s := range metrics.Series(MetricShadowDiffers) {
		gotSeries[fmt.Sprintf("role=%s from=%s to=%s", s.Labels["role"], s.Labels["from"], s.Labels["to"])] += int(s.Value)
	}
	t.Logf("%d requests sent, judged %d; %s: %v", total.Answered, total.Judged, MetricShadowDiffers, gotSeries)
	if !maps.Equal(gotSeries, wantSeries) {
		t.Errorf("%s:\n got  %v\n want %v", MetricShadowDiffers, gotSeries, wantSeries)
	}

	// Every request has its decision line, answered by the served set;
	// the disagreeing ones, and only they, a shadow line with both answers.
	served := map[string]decisionLine{}
	gotLines := map[string]int{}
	for _, l := range lines {
		switch l.Msg {
		case decisionlog.AdmissionMessage:
			if _, dup := served[l.UID]; dup {
				t.Fatalf("two decision lines for uid %s", l.UID)
			}
			served[l.UID] = l
			if l.Revision != srv.Revision {
				t.Fatalf("%s (%s) was answered by revision %q, want the served set's %q", l.Name, l.UID, l.Revision, srv.Revision)
			}
		case decisionlog.ShadowMessage:
			gotLines[fmt.Sprintf("%s %s->%s", l.Name, l.From, l.To)]++
		}
	}
	if len(served) != perBurst*bursts {
		t.Errorf("%d decision lines, want one per request: %d", len(served), perBurst*bursts)
	}
	if !maps.Equal(gotLines, wantLines) {
		t.Errorf("shadow decision lines:\n got  %v\n want %v", gotLines, wantLines)
	}
	shadowed := map[string]bool{}
	for _, l := range lines {
		if l.Msg != decisionlog.ShadowMessage {
			continue
		}
		if shadowed[l.UID] {
			t.Fatalf("two shadow lines for uid %s", l.UID)
		}
		shadowed[l.UID] = true
		d, ok := served[l.UID]
		switch {
		case !ok:
			t.Fatalf("shadow line for uid %s, which has no decision line: %+v", l.UID, l)
		case l.Served == nil || l.Shadow == nil:
			t.Fatalf("shadow line without both answers: %+v", l)
		case l.Served.Allowed != d.Allowed || l.Served.Revision != srv.Revision || l.Shadow.Revision != srv.ShadowRevision:
			t.Fatalf("shadow line %s: served side allowed=%v revision %q, shadow side revision %q; want the served decision (allowed=%v) by %q and the candidate's by %q",
				l.UID, l.Served.Allowed, l.Served.Revision, l.Shadow.Revision, d.Allowed, srv.Revision, srv.ShadowRevision)
		case l.Served.Allowed == (l.From == "denied") || l.Shadow.Allowed == (l.To == "denied"):
			t.Fatalf("shadow line %s says %s->%s, but the served answer allowed=%v and the shadow's allowed=%v", l.UID, l.From, l.To, l.Served.Allowed, l.Shadow.Allowed)
		}
		if l.Name == "ssh" && !strings.Contains(l.Shadow.Message, "uses port 22, which the edge firewall closes") {
			t.Fatalf("the shadow side of %s does not say why the candidate refuses: %q", l.UID, l.Shadow.Message)
		}
		if l.Name == "rt-zone-budget-80" && (!strings.Contains(l.Served.Message, "realtime maximum of 50 ms") || strings.Contains(l.Shadow.Message, "latency budget")) {
			t.Fatalf("%s: the served side must name the 50 ms budget and the shadow side only the zone:\nserved %q\nshadow %q", l.UID, l.Served.Message, l.Shadow.Message)
		}
	}
	ready, err := srv.Readiness(ctx)
	if want := fmt.Sprintf("%d judged, %d disagreements, 0 dropped", perBurst*bursts, wantTotal); err != nil || !strings.Contains(ready, want) {
		t.Errorf("/readyz?verbose does not say %q: %v\n%s", want, err, ready)
	}
}

type decisionLine struct {
	Msg      string              `json:"msg"`
	UID      string              `json:"uid"`
	Name     string              `json:"name"`
	Allowed  bool                `json:"allowed"`
	Revision string              `json:"revision"`
	From     string              `json:"from"`
	To       string              `json:"to"`
	Served   *decisionlog.Answer `json:"served"`
	Shadow   *decisionlog.Answer `json:"shadow"`
}

func readDecisionLines(t *testing.T, file string) []decisionLine {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []decisionLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l decisionLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: a line that is not JSON: %v: %s", file, err, sc.Bytes())
		}
		out = append(out, l)
	}
	return out
}

// craftFixture is c's base fixture with c's edits, named c.name.
func craftFixture(t *testing.T, c shadowCase) *Fixture {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", c.base))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var review map[string]any
	if err := dec.Decode(&review); err != nil {
		t.Fatal(err)
	}
	req := review["request"].(map[string]any)
	req["name"] = c.name
	req["object"].(map[string]any)["metadata"].(map[string]any)["name"] = c.name
	if c.edit != nil {
		c.edit(req)
	}
	body, err := marshalCompact(review)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parseFixture(c.name, body)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	f.Validate, f.Mutate = c.served, c.served
	return f
}

func objectMeta(req map[string]any, field string) map[string]any {
	meta := req["object"].(map[string]any)["metadata"].(map[string]any)
	m, _ := meta[field].(map[string]any)
	if m == nil {
		m = map[string]any{}
		meta[field] = m
	}
	return m
}

func setLabel(k, v string) func(map[string]any) {
	return func(req map[string]any) { objectMeta(req, "labels")[k] = v }
}

func setAnnotation(k, v string) func(map[string]any) {
	return func(req map[string]any) { objectMeta(req, "annotations")[k] = v }
}

func setNamespace(ns string) func(map[string]any) {
	return func(req map[string]any) {
		req["namespace"] = ns
		req["object"].(map[string]any)["metadata"].(map[string]any)["namespace"] = ns
	}
}

func addService(name string, port int) func(map[string]any) {
	return func(req map[string]any) {
		spec := req["object"].(map[string]any)["spec"].(map[string]any)
		spec["services"] = append(spec["services"].([]any), map[string]any{"name": name, "port": port})
	}
}

func both(edits ...func(map[string]any)) func(map[string]any) {
	return func(req map[string]any) {
		for _, e := range edits {
			e(req)
		}
	}
}
