package policies

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quantumnode/qn-admission/internal/clip"
	"github.com/quantumnode/qn-admission/internal/cowcache"
	"github.com/quantumnode/qn-admission/internal/decisionlog"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego/planeval"
)

// Defaults of ShadowOptions.
const (
	DefaultShadowQueue = 64
	DefaultShadowCPU   = 0.25
	// shadowQueueBytes bounds the request bytes waiting for the shadow:
	// a queued request holds its decoded objects.
	shadowQueueBytes = 8 << 20
	// shadowMinRest is the shortest rest the shadow takes to keep to its
	// CPU share, and the most it may run ahead of it.
	shadowMinRest = 10 * time.Millisecond
	// DefaultShadowBusyShare is the part of its CPU share the shadow may
	// spend while served requests are in progress (ShadowOptions.Activity):
	// when the server is never idle it still judges a sample, at a cost
	// the served requests barely see.
	DefaultShadowBusyShare = 0.1
	// shadowStarved is how long the shadow goes without an idle moment
	// to judge in before it judges that sample: a server that has idle
	// moments, however few, is judged in those alone.
	shadowStarved = time.Second
	// shadowGiveWays is how many times a request's judgement may be
	// abandoned for served requests before one runs to its end.
	shadowGiveWays = 3
	// shadowPoll is the longest the worker sleeps, with requests queued
	// and served ones in progress, before it looks again; shadowPressurePoll
	// when none is in progress but tasks wait for a CPU.
	shadowPoll         = 50 * time.Millisecond
	shadowPressurePoll = 10 * time.Millisecond
)

// ShadowOptions configure a Shadow.
type ShadowOptions struct {
	// Served is the engine whose answers are served; Windows its rate
	// windows, which the shadow reads and never counts in.
	Served  *Engine
	Windows window.Counter
	// Queue is how many requests may wait for the shadow (default
	// DefaultShadowQueue); a request that finds it full is not judged by
	// the candidate and is counted as dropped.
	Queue int
	// CPU is the share of one CPU the shadow may use (default
	// DefaultShadowCPU): after a judgement that took d, it rests
	// d*(1/CPU-1), so the served requests keep the rest.
	CPU float64
	// Activity, when set, counts the served requests in progress (the
	// webhook handler begins and ends each): the shadow judges in the
	// moments when none is, so a judgement never competes with a served
	// request for a CPU, and once no such moment has come for a second it
	// judges at BusyCPU of a CPU (default CPU*DefaultShadowBusyShare)
	// until one comes. Without it, the shadow judges as soon as its share
	// allows.
	Activity *Activity
	BusyCPU  float64
	// CPUQuiet, when set with Activity, says no task has been waiting for a
	// CPU of late (cpupressure.Monitor.Quiet): a moment with no served
	// request in progress is idle only when the CPUs are too, so the
	// shadow never takes a CPU that anything else waits for (the served
	// requests' next steps, the garbage collector, the node's other work).
	CPUQuiet func() bool
	// Log receives one line per disagreement (the decision log).
	Log *slog.Logger
	// Registry, when set, receives the shadow's metrics.
	Registry prometheus.Registerer
}

// Shadow judges every served request again with a candidate policy set,
// off the response path: Submit queues the request and its served answer
// without waiting, and one worker judges it with the candidate, under a
// CPU share, reading the served rate windows through a window.View (it
// never takes a slot). Every answer that differs is a metric and a
// decision log line with both answers. The served answer, readiness and
// strict health never depend on it.
type Shadow struct {
	candidate *Engine
	opts      ShadowOptions
	queue     chan shadowJob
	// queued counts the request bytes waiting.
	queued atomic.Int64

	judged, dropped, disagreed atomic.Int64
	// gaveWay counts judgements abandoned for a served request (givingWay).
	gaveWay atomic.Int64
	metrics shadowMetrics
	// reads is what Shadowed.ObjectReads last answered, for the sets it
	// answered for.
	reads atomic.Pointer[shadowReads]
}

type shadowReads struct {
	served, candidate *Set
	reads             *ObjectReads
	// kinds keeps ObjectReadsForKind's unions for the two sets.
	kinds cowcache.Cache[GroupVersionKind, *ObjectReads]
}

type shadowJob struct {
	path   Path
	in     Input
	served Decision
	bytes  int64
	at     time.Time
	// gaveWay counts the judgements of it abandoned for served requests.
	gaveWay int
}

type shadowMetrics struct {
	disagreements *prometheus.CounterVec
	evaluations   prometheus.Counter
	dropped       *prometheus.CounterVec
	lag           prometheus.Histogram
}

// NewShadow judges with the set candidate holds (a Source keeps it
// current, as it keeps the served engine).
func NewShadow(candidate *Engine, opts ShadowOptions) *Shadow {
	if opts.Queue <= 0 {
		opts.Queue = DefaultShadowQueue
	}
	if opts.CPU <= 0 || opts.CPU > 1 {
		opts.CPU = DefaultShadowCPU
	}
	if opts.BusyCPU <= 0 || opts.BusyCPU > opts.CPU {
		opts.BusyCPU = opts.CPU * DefaultShadowBusyShare
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	s := &Shadow{candidate: candidate, opts: opts, queue: make(chan shadowJob, opts.Queue)}
	s.metrics = shadowMetrics{
		disagreements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qn_admission_shadow_disagreements_total",
			Help: "Requests the shadow (candidate) policy set answers differently from the served set, by the served role and both answers (allowed, warned, denied; patched, unpatched on the mutating path; from = to when the reasons, warnings or patch differ).",
		}, []string{"role", "from", "to"}),
		evaluations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "qn_admission_shadow_evaluations_total",
			Help: "Requests the shadow policy set judged.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qn_admission_shadow_dropped_total",
			Help: "Requests the shadow policy set did not judge, by reason (full: its queue was full; unloaded: no candidate set has loaded).",
		}, []string{"reason"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "qn_admission_shadow_lag_seconds",
			Help:    "From the served answer to the shadow's judgement of the same request.",
			Buckets: []float64{.0005, .001, .005, .01, .05, .1, .5, 1, 5},
		}),
	}
	if opts.Registry != nil {
		opts.Registry.MustRegister(s.metrics.disagreements, s.metrics.evaluations, s.metrics.dropped, s.metrics.lag)
	}
	return s
}

// Submit queues a served request for the candidate and returns at once:
// when the queue is full the request is dropped and counted.
func (s *Shadow) Submit(path Path, in *Input, served Decision) {
	if in == nil || in.Request == nil {
		return
	}
	if s.candidate.Current() == nil {
		// Served while no candidate set has loaded: not queued, so it is
		// not judged by a set that lands while it waits.
		s.drop("unloaded")
		return
	}
	n := int64(len(in.Request.Object.Raw) + len(in.Request.OldObject.Raw))
	if s.queued.Add(n) > shadowQueueBytes && n > 0 {
		s.queued.Add(-n)
		s.drop("full")
		return
	}
	select {
	case s.queue <- shadowJob{path: path, in: *in.withOwnBytes(), served: served, bytes: n, at: time.Now()}:
	default:
		s.queued.Add(-n)
		s.drop("full")
	}
}

// withOwnBytes is in with its request's raw bytes (object, oldObject,
// options) copied: the webhook reuses a request body's memory once the
// served answer is written, and the shadow judges later, reading them
// when its candidate needs the objects whole or the options.
func (in *Input) withOwnBytes() *Input {
	out := *in
	req := *in.Request
	req.Object.Raw = bytes.Clone(req.Object.Raw)
	req.OldObject.Raw = bytes.Clone(req.OldObject.Raw)
	req.Options.Raw = bytes.Clone(req.Options.Raw)
	out.Request = &req
	return &out
}

func (s *Shadow) drop(reason string) {
	s.dropped.Add(1)
	s.metrics.dropped.WithLabelValues(reason).Inc()
}

// Run judges queued requests until ctx ends.
func (s *Shadow) Run(ctx context.Context) error {
	// rest is the time owed to the served requests: each judgement that
	// took d adds d*(1/CPU-1). It is paid in sleeps of at least
	// shadowMinRest, as a timer wakes late on a busy node; a sleep that
	// overran pays for the judgements after it.
	var rest time.Duration
	// busyFrom is when the shadow may next judge while the server is not
	// idle: shadowStarved after its last judgement in an idle moment, and
	// a judgement that took d in a busy moment moves it d*(1/BusyCPU-1)
	// on.
	busyFrom := time.Now().Add(shadowStarved)
	wait := time.NewTimer(time.Hour)
	defer wait.Stop()
	var (
		j    shadowJob
		busy bool
		ok   bool
		// again: j gave way to a served request and is judged again.
		again bool
	)
	for {
		if again {
			busy, ok = s.await(ctx, busyFrom, wait)
		} else {
			j, busy, ok = s.next(ctx, busyFrom, wait)
		}
		if !ok {
			return nil
		}
		// A judgement begun with no served request in progress, idle
		// moment or busy sample, gives way to one that begins, and after
		// shadowGiveWays abandoned tries runs to its end.
		giveWay := s.opts.Activity != nil && s.opts.Activity.Idle() && j.gaveWay < shadowGiveWays
		start := time.Now()
		if again = !s.judge(ctx, &j, giveWay); again {
			j.gaveWay++
		}
		took := time.Since(start)
		switch now := time.Now(); {
		case busy:
			busyFrom = now.Add(time.Duration(float64(took) * (1/s.opts.BusyCPU - 1)))
		case !again && now.Add(shadowStarved).After(busyFrom):
			busyFrom = now.Add(shadowStarved)
		}
		rest += time.Duration(float64(took) * (1/s.opts.CPU - 1))
		if rest < shadowMinRest {
			continue
		}
		slept := time.Now()
		wait.Reset(rest)
		select {
		case <-ctx.Done():
			return nil
		case <-wait.C:
		}
		rest = max(rest-time.Since(slept), -shadowMinRest)
	}
}

// next waits for a request to judge and a moment to judge it in (await).
// busy says the moment was not idle. Without an Activity every moment is
// idle.
func (s *Shadow) next(ctx context.Context, busyFrom time.Time, wait *time.Timer) (j shadowJob, busy, ok bool) {
	a := s.opts.Activity
	if a == nil {
		select {
		case <-ctx.Done():
			return j, false, false
		case j = <-s.queue:
			s.queued.Add(-j.bytes)
			return j, false, true
		}
	}
	// Only this goroutine receives, so a queued request stays queued.
	for len(s.queue) == 0 {
		// Submit does not wake the worker (it runs inside a served
		// request): it looks again when the served requests reach none,
		// or after shadowPoll.
		wait.Reset(shadowPoll)
		select {
		case <-ctx.Done():
			return j, false, false
		case <-a.idle:
		case <-wait.C:
		}
	}
	if busy, ok = s.await(ctx, busyFrom, wait); !ok {
		return j, false, false
	}
	j = <-s.queue
	s.queued.Add(-j.bytes)
	return j, busy, true
}

// await waits for a moment to judge in: an idle one, with no served
// request in progress and the CPUs quiet; once busyFrom has passed, one
// with no served request in progress though the CPUs are busy; and, when
// no such moment has come for shadowPoll after busyFrom or after the wait
// began, any, so that a server that is never idle still has a sample
// judged. busy says the moment is not idle; ok is false when ctx ended.
func (s *Shadow) await(ctx context.Context, busyFrom time.Time, wait *time.Timer) (busy, ok bool) {
	a := s.opts.Activity
	anyFrom := busyFrom
	if now := time.Now(); now.After(anyFrom) {
		anyFrom = now
	}
	anyFrom = anyFrom.Add(shadowPoll)
	for {
		served := a.Idle()
		cpuQuiet := !served || s.opts.CPUQuiet == nil || s.opts.CPUQuiet()
		if served && cpuQuiet {
			return false, true
		}
		now := time.Now()
		if !now.Before(anyFrom) || (served && !now.Before(busyFrom)) {
			return true, true
		}
		// The handler signals each moment the served requests reach none.
		// While the CPUs are busy the ends of requests do not wake the
		// worker (each wake-up costs CPU that others wait for): it looks
		// again every shadowPressurePoll.
		d, idleSignal := anyFrom.Sub(now), a.idle
		if now.Before(busyFrom) {
			d = busyFrom.Sub(now)
		}
		d = min(d, shadowPoll)
		if !cpuQuiet {
			d, idleSignal = min(d, shadowPressurePoll), nil
		}
		wait.Reset(d)
		select {
		case <-ctx.Done():
			return false, false
		case <-idleSignal:
		case <-wait.C:
		}
	}
}

// givingWay abandons a judgement begun with no served request in progress
// as soon as one begins: the evaluation calls it at each of its steps
// (planeval.WithYield), so the judgement holds a CPU beside a served
// request for one step at most. The worker judges the request again in the
// next moment await finds. Only the busy sample of a server with no such
// moments, and a request abandoned shadowGiveWays times, are judged beside
// served requests to the end. Abandoning rather than pausing keeps the
// evaluation's deadline and the memory guard's age meaning what they mean
// for the served set.
type givingWay struct {
	activity *Activity
	cancel   context.CancelFunc
	gaveWay  bool
}

func (g *givingWay) yield() {
	if !g.gaveWay && !g.activity.Idle() {
		g.gaveWay = true
		g.cancel()
	}
}

// Activity counts the requests being served, so that background work
// which must not slow them (the shadow) can use the moments when there are
// none. The webhook handler calls Begin and End around each request, from
// its first byte read to its answer written.
type Activity struct {
	inProgress atomic.Int64
	// idle holds a signal when the count last fell to zero.
	idle chan struct{}
}

// NewActivity returns an Activity with no request in progress.
func NewActivity() *Activity { return &Activity{idle: make(chan struct{}, 1)} }

// Begin counts a request in.
func (a *Activity) Begin() { a.inProgress.Add(1) }

// End counts a request out, signalling when none is left.
func (a *Activity) End() {
	if a.inProgress.Add(-1) == 0 {
		select {
		case a.idle <- struct{}{}:
		default:
		}
	}
}

// Idle says no request is being served.
func (a *Activity) Idle() bool { return a.inProgress.Load() == 0 }

// judge answers one request with the candidate and compares. With giveWay
// the judgement gives way to a served request that begins while it runs
// (givingWay): judge then returns false and the request is to be judged
// again.
func (s *Shadow) judge(ctx context.Context, j *shadowJob, giveWay bool) bool {
	set := s.candidate.Current()
	if set == nil {
		s.drop("unloaded")
		return true
	}
	evalCtx := ctx
	var g *givingWay
	if giveWay && s.opts.Activity != nil {
		g = &givingWay{activity: s.opts.Activity}
		evalCtx, g.cancel = context.WithCancel(ctx)
		defer g.cancel()
		evalCtx = planeval.WithYield(evalCtx, g.yield)
	}
	// The served request took its window slot when it was admitted: the
	// candidate sees the window without it, as the served policies did.
	skip := ""
	if j.path == PathValidate && j.served.Allowed && j.served.Window != nil && !j.in.Facts.DryRun && s.opts.Served != nil {
		if p := s.opts.Served.Plan(&j.in, PathValidate); p.Window != nil {
			skip = p.Window.Key
		}
	}
	e := NewEngine(set, EngineOptions{Windows: window.NewView(s.opts.Windows, skip)})
	var d Decision
	if j.path == PathMutate {
		d = e.Mutate(evalCtx, &j.in)
	} else {
		d = e.Validate(evalCtx, &j.in)
	}
	switch {
	case g != nil && g.gaveWay:
		s.gaveWay.Add(1)
		return false
	case ctx.Err() != nil:
		// Shutting down: the evaluation was cut short, not answered.
		return true
	}
	lag := time.Since(j.at)
	if !Agree(j.served, d) {
		s.disagreed.Add(1)
		from, to := AnswerClass(j.path, j.served), AnswerClass(j.path, d)
		s.metrics.disagreements.WithLabelValues(s.roleLabel(j.served.Role), from, to).Inc()
		s.log(ctx, j, d, from, to)
	}
	// Counted last: whoever sees a request counted as judged (the count,
	// the evaluations metric) finds its disagreement counted and its line
	// written.
	s.metrics.lag.Observe(lag.Seconds())
	s.metrics.evaluations.Inc()
	s.judged.Add(1)
	return true
}

// roleLabel keeps the role label in the served set's roles.
func (s *Shadow) roleLabel(role string) string {
	if role == "" || s.opts.Served == nil {
		return role
	}
	if set := s.opts.Served.Current(); set != nil {
		if _, ok := set.Roles.Roles[role]; ok {
			return role
		}
	}
	return "unknown"
}

// AnswerClass names an answer in a word: allowed, warned or denied on the
// validating path, patched or unpatched on the mutating path.
func AnswerClass(path Path, d Decision) string {
	switch {
	case !d.Allowed:
		return "denied"
	case path == PathMutate && len(d.Patch) > 0:
		return "patched"
	case path == PathMutate:
		return "unpatched"
	case len(d.Warnings) > 0:
		return "warned"
	}
	return "allowed"
}

// Agree says two answers to one request are the same: admitted or not,
// with the same code and message, the same warnings and the same patch
// (as a set of operations).
func Agree(a, b Decision) bool {
	if a.Allowed != b.Allowed || a.Code != b.Code || a.Message != b.Message {
		return false
	}
	x, y := slices.Clone(a.Warnings), slices.Clone(b.Warnings)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y) && samePatchOps(a.Patch, b.Patch)
}

// samePatchOps compares two JSONPatch documents as sets of operations.
func samePatchOps(a, b []byte) bool {
	if string(a) == string(b) {
		return true
	}
	ops := func(p []byte) []string {
		var list []json.RawMessage
		_ = json.Unmarshal(p, &list)
		out := make([]string, 0, len(list))
		for _, op := range list {
			var v any
			_ = json.Unmarshal(op, &v)
			c, _ := json.Marshal(v) // maps marshal with sorted keys
			out = append(out, string(c))
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(ops(a), ops(b))
}

// log writes the disagreement's decision log line: the request as the
// decision line names it, and both answers.
func (s *Shadow) log(ctx context.Context, j *shadowJob, d Decision, from, to string) {
	line := decisionlog.Disagreement{Webhook: j.path.String(), Request: decisionlog.RequestOf(j.in.Request),
		RequestTime: j.in.Facts.Time.UTC().Format(time.RFC3339Nano), From: from, To: to,
		Served: shadowSide(j.served), Shadow: shadowSide(d)}
	s.opts.Log.LogAttrs(ctx, slog.LevelInfo, decisionlog.ShadowMessage, line.Attrs()...)
}

// shadowSide is one answer as a disagreement's line holds it, clipped.
func shadowSide(d Decision) decisionlog.Answer {
	m := func(v string) string { return clip.String(v, clip.MessageBytes) }
	a := decisionlog.Answer{Allowed: d.Allowed, Code: d.Code, Role: clip.String(d.Role, clip.FieldBytes), Revision: d.Revision,
		Message: m(d.Message), Warnings: clip.Strings(d.Warnings, clip.ListItems, clip.MessageBytes), Patch: m(string(d.Patch))}
	clipped := func(list []Finding) []decisionlog.Finding {
		var out []decisionlog.Finding
		for i, f := range list {
			if i == clip.ListItems {
				break
			}
			out = append(out, decisionlog.Finding{Source: f.Source, Pattern: f.Pattern, Message: m(f.Message), Enforcement: string(f.Enforcement)})
		}
		return out
	}
	a.Denials, a.Warned = clipped(d.Denials), clipped(d.Findings)
	return a
}

// Status is the shadow's line in /readyz?verbose: which candidate judges
// and what it found. It never fails readiness.
func (s *Shadow) Status() string {
	rev := "no candidate set loaded"
	if set := s.candidate.Current(); set != nil {
		rev = "candidate " + set.Revision
	}
	return fmt.Sprintf("%s: %d judged, %d disagreements, %d dropped", rev, s.judged.Load(), s.disagreed.Load(), s.dropped.Load())
}

// Shadowed answers with Served and submits every answer to Shadow: a
// Decider for the webhook that serves one set and tries another.
type Shadowed struct {
	Served *Engine
	Shadow *Shadow
}

// Validate implements webhook.Decider.
func (s Shadowed) Validate(ctx context.Context, in *Input) Decision {
	d := s.Served.Validate(ctx, in)
	s.Shadow.Submit(PathValidate, in, d)
	return d
}

// Mutate implements webhook.Decider.
func (s Shadowed) Mutate(ctx context.Context, in *Input) Decision {
	d := s.Served.Mutate(ctx, in)
	s.Shadow.Submit(PathMutate, in, d)
	return d
}

// ObjectReads is what either the served set or the candidate may read of
// the objects: the webhook decodes a request once for both. Should the
// candidate change before it judges the request, it decodes what more it
// reads itself (Input.readableBy).
func (s Shadowed) ObjectReads() *ObjectReads {
	served, candidate := s.Served.Current(), s.Shadow.candidate.Current()
	if r := s.Shadow.reads.Load(); r != nil && r.served == served && r.candidate == candidate {
		return r.reads
	}
	r := &shadowReads{served: served, candidate: candidate, reads: s.Served.ObjectReads()}
	if candidate != nil {
		r.reads = UnionObjectReads(r.reads, candidate.objectReads)
	}
	s.Shadow.reads.Store(r)
	return r.reads
}

// ObjectReadsForKind is ObjectReads for requests of kind k: what either
// set may read of them (ObjectReads.ForKind).
func (s Shadowed) ObjectReadsForKind(k GroupVersionKind) *ObjectReads {
	s.ObjectReads() // the union for the current sets
	r := s.Shadow.reads.Load()
	if got, ok := r.kinds.Get(k); ok {
		return got
	}
	got := r.served.objectReadsFor(k)
	if r.candidate != nil {
		got = UnionObjectReads(got, r.candidate.objectReads.ForKind(k))
	}
	r.kinds.Add(k, got)
	return got
}

// objectReadsFor is what the set's decisions may read of kind k's
// objects; everything when there is no set.
func (s *Set) objectReadsFor(k GroupVersionKind) *ObjectReads {
	if s == nil {
		return nil
	}
	return s.objectReads.ForKind(k)
}

// Current is the served set (the webhook labels metrics by its roles).
func (s Shadowed) Current() *Set { return s.Served.Current() }
