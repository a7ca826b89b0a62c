package shadow

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quantumnode/qn-admission/internal/activity"
	"github.com/quantumnode/qn-admission/internal/decisionlog"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/test/harness"
)

// servedPolicy refuses nodes labelled deny=yes.
const servedPolicy = `package p
deny contains "labelled deny" if input.context.labels.deny == "yes"
`

// candidatePolicy tightens one rule (tier=gold is refused too) and
// loosens another (deny=yes is admitted when labelled exempt=yes).
const candidatePolicy = `package p
deny contains "labelled deny" if {
	input.context.labels.deny == "yes"
	not input.context.labels.exempt == "yes"
}
deny contains "gold tier is closed" if input.context.labels.tier == "gold"
`

// logLines are the lines the shadow's worker wrote to log so far.
func logLines(log *harness.Output) []string {
	return strings.Split(strings.TrimSpace(log.String()), "\n")
}

type shadowRig struct {
	served   *policies.Engine
	windows  *window.MemoryStore
	shadow   *Shadow
	shadowed Shadowed
	reg      *prometheus.Registry
	log      *harness.Output
}

func newShadowRig(t *testing.T, served, candidate string, queue int) *shadowRig {
	t.Helper()
	r := &shadowRig{windows: window.NewMemoryStore(clocktesting.NewFakePassiveClock(requestTime), window.MemoryOptions{}), reg: prometheus.NewRegistry(), log: &harness.Output{}}
	r.served = policies.NewEngine(loadSet(t, served), policies.EngineOptions{Windows: r.windows})
	r.shadow = New(policies.NewEngine(loadSet(t, candidate), policies.EngineOptions{}), Options{
		Served: r.served, Windows: r.windows, Queue: queue, CPU: 1,
		Log: slog.New(slog.NewJSONHandler(r.log, nil)), Registry: r.reg,
	})
	r.shadowed = Shadowed{Served: r.served, Shadow: r.shadow}
	return r
}

func (r *shadowRig) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.shadow.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// settle waits until the shadow has judged n requests.
func (r *shadowRig) settle(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.shadow.judged.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the shadow judged %d of %d requests in 10s", r.shadow.judged.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestShadowCountsEveryDisagreementAndOnlyThose(t *testing.T) {
	r := newShadowRig(t, servedPolicy, candidatePolicy, 64)
	r.run(t)
	// A crafted mix, each requester once (their windows never fill): two
	// newly refused (gold), one newly admitted (deny and exempt), two
	// refused by both, three admitted by both.
	mix := []struct {
		user   string
		labels map[string]string
	}{
		{"gold-1", map[string]string{"tier": "gold"}},
		{"gold-2", map[string]string{"tier": "gold"}},
		{"exempt", map[string]string{"deny": "yes", "exempt": "yes"}},
		{"deny-1", map[string]string{"deny": "yes"}},
		{"deny-2", map[string]string{"deny": "yes"}},
		{"plain-1", nil},
		{"plain-2", map[string]string{"tier": "silver"}},
		{"plain-3", nil},
	}
	for _, m := range mix {
		d := r.shadowed.Validate(context.Background(), nodeInput(t, m.user, m.labels))
		want := m.labels["deny"] != "yes"
		if d.Allowed != want {
			t.Fatalf("%s: the served answer is allowed=%v, want %v: the shadow changed it", m.user, d.Allowed, want)
		}
	}
	r.settle(t, int64(len(mix)))
	want := `
# HELP qn_admission_shadow_disagreements_total Requests the shadow (candidate) policy set answers differently from the served set, by the served role and both answers (allowed, warned, denied; patched, unpatched on the mutating path; from = to when the reasons, warnings or patch differ).
# TYPE qn_admission_shadow_disagreements_total counter
qn_admission_shadow_disagreements_total{from="allowed",role="r",to="denied"} 2
qn_admission_shadow_disagreements_total{from="denied",role="r",to="allowed"} 1
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), "qn_admission_shadow_disagreements_total"); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(r.shadow.metrics.evaluations); got != float64(len(mix)) {
		t.Fatalf("evaluations = %v, want %d", got, len(mix))
	}
	lines := logLines(r.log)
	if len(lines) != 3 {
		t.Fatalf("want 3 decision log lines, one per disagreement, got %d:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	byUser := map[string]map[string]any{}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("decision log line %q: %v", l, err)
		}
		if m["msg"] != decisionlog.ShadowMessage {
			t.Fatalf("msg = %v, want %q", m["msg"], decisionlog.ShadowMessage)
		}
		byUser[m["user"].(string)] = m
	}
	gold := byUser["gold-1"]
	if gold["from"] != "allowed" || gold["to"] != "denied" {
		t.Fatalf("gold-1: from %v to %v, want allowed to denied", gold["from"], gold["to"])
	}
	shadowSide := gold["shadow"].(map[string]any)
	if shadowSide["allowed"] != false || !strings.Contains(shadowSide["message"].(string), "gold tier is closed") {
		t.Fatalf("gold-1's shadow answer does not say why it refuses: %v", shadowSide)
	}
	if served := gold["served"].(map[string]any); served["allowed"] != true || served["revision"] == shadowSide["revision"] {
		t.Fatalf("gold-1's served answer: %v (shadow revision %v)", served, shadowSide["revision"])
	}
	if exempt := byUser["exempt"]; exempt["from"] != "denied" || exempt["to"] != "allowed" {
		t.Fatalf("exempt: from %v to %v, want denied to allowed", exempt["from"], exempt["to"])
	}
	if !strings.Contains(r.shadow.Status(), "8 judged, 3 disagreements, 0 dropped") {
		t.Fatalf("status %q", r.shadow.Status())
	}
}

// The shadow reads the served windows and never takes a slot: the served
// requester gets exactly the role's limit, and a candidate with the same
// rules agrees on every answer, the window's refusals included.
func TestShadowSeesTheServedWindowWithoutCountingInIt(t *testing.T) {
	r := newShadowRig(t, servedPolicy, servedPolicy, 64)
	r.run(t)
	const requests = 5
	admitted := 0
	for i := range requests {
		d := r.shadowed.Validate(context.Background(), nodeInput(t, "alice", nil))
		if d.Allowed {
			admitted++
		}
		// Judge each before the next, as the served windows move on.
		r.settle(t, int64(i+1))
	}
	if admitted != 3 {
		t.Fatalf("the served set admitted %d of %d changes in a window of 3: the shadow counted in it", admitted, requests)
	}
	if n := r.shadow.disagreed.Load(); n != 0 {
		t.Fatalf("an identical candidate disagreed %d times:\n%s", n, strings.Join(logLines(r.log), "\n"))
	}
}

func TestShadowDropsWhatItCannotQueue(t *testing.T) {
	r := newShadowRig(t, servedPolicy, candidatePolicy, 2)
	// No worker runs: the queue holds two requests, the rest are dropped
	// and the served answers are given at once all the same.
	for i := range 5 {
		if d := r.shadowed.Validate(context.Background(), nodeInput(t, "u"+string(rune('a'+i)), nil)); !d.Allowed {
			t.Fatalf("request %d refused: %s", i, d.Message)
		}
	}
	if got := testutil.ToFloat64(r.shadow.metrics.dropped.WithLabelValues("full")); got != 3 {
		t.Fatalf("dropped{full} = %v, want 3", got)
	}
	r.run(t)
	r.settle(t, 2)
}

func TestShadowJudgesInTheMomentsBetweenServedRequests(t *testing.T) {
	r := newShadowRig(t, servedPolicy, candidatePolicy, 8)
	inProgress := activity.New()
	r.shadow.opts.Activity = inProgress
	// So small a share while busy that after one judgement the next would
	// wait for hours: every later judgement needs an idle moment.
	r.shadow.opts.BusyCPU = 1e-9
	var cpuQuiet atomic.Bool
	r.shadow.opts.CPUQuiet = cpuQuiet.Load
	inProgress.Begin() // a served request in progress throughout
	for i := range 3 {
		r.shadowed.Validate(context.Background(), nodeInput(t, "u"+string(rune('a'+i)), nil))
	}
	r.run(t)
	// With served requests never idle, the shadow still judges a sample.
	r.settle(t, 1)
	time.Sleep(300 * time.Millisecond)
	if n := r.shadow.judged.Load(); n != 1 {
		t.Fatalf("the shadow judged %d requests while a served one was in progress, want 1 (its busy share)", n)
	}
	inProgress.Begin()
	inProgress.End()
	if n := r.shadow.judged.Load(); n != 1 {
		t.Fatalf("the shadow judged %d requests while a served one was still in progress, want 1", n)
	}
	// The last served request ends, but tasks wait for the CPUs: not idle.
	inProgress.End()
	time.Sleep(300 * time.Millisecond)
	if n := r.shadow.judged.Load(); n != 1 {
		t.Fatalf("the shadow judged %d requests while tasks waited for a CPU, want 1", n)
	}
	// The CPUs fall quiet: the queue is judged.
	cpuQuiet.Store(true)
	r.settle(t, 3)
	if !inProgress.Idle() {
		t.Fatal("the activity does not read idle after every request ended")
	}
}

// slowCandidatePolicy takes about 90,000 evaluation steps to admit anything.
const slowCandidatePolicy = `package p
deny contains "never" if {
	some i in numbers.range(1, 300)
	some j in numbers.range(1, 300)
	i * j == -1
}
`

// A judgement that began in an idle moment gives way to a served request
// that begins while it runs: it is abandoned at the step it had reached,
// and judged again, whole, once none is in progress.
func TestAJudgementGivesWayToAServedRequestThatBegins(t *testing.T) {
	r := newShadowRig(t, servedPolicy, slowCandidatePolicy, 8)
	inProgress := activity.New()
	r.shadow.opts.Activity = inProgress
	r.shadow.opts.BusyCPU = 1e-9
	r.run(t)
	wake := func() { inProgress.Begin(); inProgress.End() } // signals an idle moment
	submit := func(user string) { r.shadowed.Validate(context.Background(), nodeInput(t, user, nil)) }

	// How long a judgement takes alone.
	submit("alone")
	start := time.Now()
	wake()
	r.settle(t, 1)
	alone := time.Since(start)
	t.Logf("a judgement alone: %s", alone)
	if alone < 30*time.Millisecond {
		t.Skipf("a judgement of the slow candidate took %s: too quick to be caught halfway", alone)
	}
	// A busy-moment judgement, at a share so small that the next may come
	// only hours later: from now on a judgement may run only when idle.
	inProgress.Begin()
	submit("busy")
	r.settle(t, 2)

	submit("interrupted")
	inProgress.End()
	time.Sleep(alone / 10) // the judgement is under way
	inProgress.Begin()     // and a served request begins
	waited := max(10*alone, 500*time.Millisecond)
	time.Sleep(waited)
	if n := r.shadow.judged.Load(); n != 2 {
		t.Fatalf("a judgement that takes %s alone finished while a served request was in progress (%s): it did not give way", alone, waited)
	}
	if n := r.shadow.gaveWay.Load(); n != 1 {
		t.Errorf("%d judgements gave way, want 1", n)
	}
	inProgress.End()
	r.settle(t, 3)
	if n := r.shadow.disagreed.Load(); n != 0 {
		t.Errorf("the shadow counted %d disagreements: an abandoned judgement must not count as the candidate's answer", n)
	}
}

// The busy sample is for a server that has no idle moments: after a
// judgement in an idle moment, the shadow judges beside served requests
// only once no idle moment has come for starved.
func TestTheBusySampleWaitsUntilNoIdleMomentHasCome(t *testing.T) {
	r := newShadowRig(t, servedPolicy, candidatePolicy, 8)
	inProgress := activity.New()
	r.shadow.opts.Activity = inProgress
	r.shadow.opts.BusyCPU = 1 // the busy share alone would let it judge at once
	r.run(t)
	time.Sleep(starved) // long enough after the start for a busy sample
	r.shadowed.Validate(context.Background(), nodeInput(t, "idle", nil))
	inProgress.Begin()
	inProgress.End() // an idle moment
	r.settle(t, 1)
	judgedIdle := time.Now()

	inProgress.Begin() // a served request in progress from now on
	r.shadowed.Validate(context.Background(), nodeInput(t, "busy", nil))
	time.Sleep(starved / 3)
	if n := r.shadow.judged.Load(); n != 1 {
		t.Fatalf("the shadow judged beside a served request %s after judging in an idle moment: want it to wait %s for one", time.Since(judgedIdle), starved)
	}
	r.settle(t, 2)
	if waited := time.Since(judgedIdle); waited < starved*9/10 {
		t.Errorf("the busy sample came %s after the last idle moment's judgement, want %s or more", waited, starved)
	}
	inProgress.End()
}

// A request whose judgement keeps being abandoned for served requests is
// judged to the end on its giveWays+1st try: a steady stream of
// short requests, with moments between them, cannot starve it.
func TestAJudgementGivesWayABoundedNumberOfTimes(t *testing.T) {
	r := newShadowRig(t, servedPolicy, slowCandidatePolicy, 8)
	inProgress := activity.New()
	r.shadow.opts.Activity = inProgress
	r.run(t)
	stop := make(chan struct{})
	streamed := make(chan struct{})
	go func() { // a served request of 1 ms every 2 ms
		defer close(streamed)
		for {
			select {
			case <-stop:
				return
			default:
			}
			inProgress.Begin()
			time.Sleep(time.Millisecond)
			inProgress.End()
			time.Sleep(time.Millisecond)
		}
	}()
	defer func() { close(stop); <-streamed }()
	r.shadowed.Validate(context.Background(), nodeInput(t, "a", nil))
	r.settle(t, 1)
	// Each try is caught by the next request; a try may run unseen only if
	// this machine stalls the stream for a whole judgement.
	if n := r.shadow.gaveWay.Load(); n < 1 || n > giveWays {
		t.Errorf("the judgement gave way %d times before it ran to its end, want 1 to %d", n, giveWays)
	}
	if n := r.shadow.disagreed.Load(); n != 0 {
		t.Errorf("%d disagreements: the abandoned tries must not count", n)
	}
}

// The webhook reuses a request body's memory once the served answer is
// written, and the shadow judges later: it must hold bytes of its own. A
// candidate that needs the old object whole (the request was decoded for
// the served set alone) and reads the options judges what was sent,
// though the caller overwrote every byte of the request before the
// shadow began.
func TestShadowJudgesTheRequestAsSentAfterTheCallerReusesItsBytes(t *testing.T) {
	candidate := `package p
deny contains "failed nodes are frozen" if input.request.oldObject.status.phase == "Failed"
deny contains "client-side apply is closed" if input.request.options.fieldManager == "kubectl-client-side-apply"
`
	r := newShadowRig(t, servedPolicy, candidate, 8)
	object := []byte(`{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"edge-1","namespace":"edge"},"spec":{},"status":{"phase":"Failed"}}`)
	oldObject := bytes.Clone(object)
	req := nodeRequest(admissionv1.Update, "alice", object, oldObject)
	req.Options.Raw = []byte(`{"kind":"UpdateOptions","apiVersion":"meta.k8s.io/v1","fieldManager":"kubectl-client-side-apply"}`)
	in := inputOf(t, req, r.served.ObjectReads())
	if policies.ValueAt(in.OldObjectValue, "status") != nil {
		t.Fatalf("decoded for the served set, the old object is %v: its status should be left out", in.OldObjectValue)
	}
	if d := r.shadowed.Validate(context.Background(), in); !d.Allowed {
		t.Fatalf("the served set refuses: %+v", d)
	}
	for _, b := range [][]byte{object, oldObject, req.Options.Raw} {
		for i := range b {
			b[i] = 'x'
		}
	}
	r.run(t) // the shadow starts only now, after the bytes changed
	r.settle(t, 1)
	lines := logLines(r.log)
	if len(lines) != 1 {
		t.Fatalf("want one disagreement, got %d lines:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	var line struct {
		From, To string
		Shadow   struct{ Message string }
	}
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
		t.Fatal(err)
	}
	if line.From != "allowed" || line.To != "denied" ||
		!strings.Contains(line.Shadow.Message, "failed nodes are frozen") || !strings.Contains(line.Shadow.Message, "client-side apply is closed") {
		t.Fatalf("the shadow did not judge the request as sent: %s", lines[0])
	}
}
