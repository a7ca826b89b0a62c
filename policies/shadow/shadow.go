// Package shadow judges served admission requests again with a candidate
// policy set, off the response path, and reports every answer that
// differs (a metric and a decision log line): qn-webhook's
// --shadow-policy-dir. Shadowed is the webhook's Decider that serves one
// set and submits each answer to the shadow.
package shadow

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quantumnode/qn-admission/internal/activity"
	"github.com/quantumnode/qn-admission/internal/clip"
	"github.com/quantumnode/qn-admission/internal/decisionlog"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego/planeval"
)

// Defaults of Options.
const (
	DefaultQueue = 64
	DefaultCPU   = 0.25
	// queueBytes bounds the request bytes waiting for the shadow:
	// a queued request holds its decoded objects.
	queueBytes = 8 << 20
	// minRest is the shortest rest the shadow takes to keep to its
	// CPU share, and the most it may run ahead of it.
	minRest = 10 * time.Millisecond
	// DefaultBusyShare is the part of its CPU share the shadow may
	// spend while served requests are in progress (Options.Activity):
	// when the server is never idle it still judges a sample, at a cost
	// the served requests barely see.
	DefaultBusyShare = 0.1
	// starved is how long the shadow goes without an idle moment
	// to judge in before it judges that sample: a server that has idle
	// moments, however few, is judged in those alone.
	starved = time.Second
	// giveWays is how many times a request's judgement may be
	// abandoned for served requests before one runs to its end.
	giveWays = 3
	// poll is the longest the worker sleeps, with requests queued
	// and served ones in progress, before it looks again; pressurePoll
	// when none is in progress but tasks wait for a CPU.
	poll         = 50 * time.Millisecond
	pressurePoll = 10 * time.Millisecond
)

// Options configure a Shadow.
type Options struct {
	// Served is the engine whose answers are served; Windows its rate
	// windows, which the shadow reads and never counts in.
	Served  *policies.Engine
	Windows window.Counter
	// Queue is how many requests may wait for the shadow (default
	// DefaultQueue); a request that finds it full is not judged by
	// the candidate and is counted as dropped.
	Queue int
	// CPU is the share of one CPU the shadow may use (default
	// DefaultCPU): after a judgement that took d, it rests
	// d*(1/CPU-1), so the served requests keep the rest.
	CPU float64
	// Activity, when set, counts the served requests in progress (the
	// webhook handler begins and ends each): the shadow judges in the
	// moments when none is, so a judgement never competes with a served
	// request for a CPU, and once no such moment has come for a second it
	// judges at BusyCPU of a CPU (default CPU*DefaultBusyShare)
	// until one comes. Without it, the shadow judges as soon as its share
	// allows.
	Activity *activity.Activity
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
	candidate *policies.Engine
	opts      Options
	queue     chan job
	// queued counts the request bytes waiting.
	queued atomic.Int64

	judged, dropped, disagreed atomic.Int64
	// gaveWay counts judgements abandoned for a served request (givingWay).
	gaveWay atomic.Int64
	metrics metricSet
	// reads is what Shadowed.ObjectReads last answered, for the sets it
	// answered for.
	reads atomic.Pointer[readsCache]
}

type job struct {
	path   policies.Path
	in     policies.Input
	served policies.Decision
	bytes  int64
	at     time.Time
	// gaveWay counts the judgements of it abandoned for served requests.
	gaveWay int
}

type metricSet struct {
	disagreements *prometheus.CounterVec
	evaluations   prometheus.Counter
	dropped       *prometheus.CounterVec
	lag           prometheus.Histogram
}

// New judges with the set candidate holds (a Source keeps it
// current, as it keeps the served engine).
func New(candidate *policies.Engine, opts Options) *Shadow {
	if opts.Queue <= 0 {
		opts.Queue = DefaultQueue
	}
	if opts.CPU <= 0 || opts.CPU > 1 {
		opts.CPU = DefaultCPU
	}
	if opts.BusyCPU <= 0 || opts.BusyCPU > opts.CPU {
		opts.BusyCPU = opts.CPU * DefaultBusyShare
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	s := &Shadow{candidate: candidate, opts: opts, queue: make(chan job, opts.Queue)}
	s.metrics = metricSet{
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
func (s *Shadow) Submit(path policies.Path, in *policies.Input, served policies.Decision) {
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
	if s.queued.Add(n) > queueBytes && n > 0 {
		s.queued.Add(-n)
		s.drop("full")
		return
	}
	select {
	case s.queue <- job{path: path, in: *withOwnBytes(in), served: served, bytes: n, at: time.Now()}:
	default:
		s.queued.Add(-n)
		s.drop("full")
	}
}

// withOwnBytes is in with its request's raw bytes (object, oldObject,
// options) copied: the webhook reuses a request body's memory once the
// served answer is written, and the shadow judges later, reading them
// when its candidate needs the objects whole or the options.
func withOwnBytes(in *policies.Input) *policies.Input {
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
	// minRest, as a timer wakes late on a busy node; a sleep that
	// overran pays for the judgements after it.
	var rest time.Duration
	// busyFrom is when the shadow may next judge while the server is not
	// idle: starved after its last judgement in an idle moment, and
	// a judgement that took d in a busy moment moves it d*(1/BusyCPU-1)
	// on.
	busyFrom := time.Now().Add(starved)
	wait := time.NewTimer(time.Hour)
	defer wait.Stop()
	var (
		j    job
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
		// giveWays abandoned tries runs to its end.
		giveWay := s.opts.Activity != nil && s.opts.Activity.Idle() && j.gaveWay < giveWays
		start := time.Now()
		if again = !s.judge(ctx, &j, giveWay); again {
			j.gaveWay++
		}
		took := time.Since(start)
		switch now := time.Now(); {
		case busy:
			busyFrom = now.Add(time.Duration(float64(took) * (1/s.opts.BusyCPU - 1)))
		case !again && now.Add(starved).After(busyFrom):
			busyFrom = now.Add(starved)
		}
		rest += time.Duration(float64(took) * (1/s.opts.CPU - 1))
		if rest < minRest {
			continue
		}
		slept := time.Now()
		wait.Reset(rest)
		select {
		case <-ctx.Done():
			return nil
		case <-wait.C:
		}
		rest = max(rest-time.Since(slept), -minRest)
	}
}

// next waits for a request to judge and a moment to judge it in (await).
// busy says the moment was not idle. Without an Activity every moment is
// idle.
func (s *Shadow) next(ctx context.Context, busyFrom time.Time, wait *time.Timer) (j job, busy, ok bool) {
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
		// or after poll.
		wait.Reset(poll)
		select {
		case <-ctx.Done():
			return j, false, false
		case <-a.Idled():
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
// no such moment has come for poll after busyFrom or after the wait
// began, any, so that a server that is never idle still has a sample
// judged. busy says the moment is not idle; ok is false when ctx ended.
func (s *Shadow) await(ctx context.Context, busyFrom time.Time, wait *time.Timer) (busy, ok bool) {
	a := s.opts.Activity
	anyFrom := busyFrom
	if now := time.Now(); now.After(anyFrom) {
		anyFrom = now
	}
	anyFrom = anyFrom.Add(poll)
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
		// again every pressurePoll.
		d, idleSignal := anyFrom.Sub(now), a.Idled()
		if now.Before(busyFrom) {
			d = busyFrom.Sub(now)
		}
		d = min(d, poll)
		if !cpuQuiet {
			d, idleSignal = min(d, pressurePoll), nil
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
// moments, and a request abandoned giveWays times, are judged beside
// served requests to the end. Abandoning rather than pausing keeps the
// evaluation's deadline and the memory guard's age meaning what they mean
// for the served set.
type givingWay struct {
	activity *activity.Activity
	cancel   context.CancelFunc
	gaveWay  bool
}

func (g *givingWay) yield() {
	if !g.gaveWay && !g.activity.Idle() {
		g.gaveWay = true
		g.cancel()
	}
}

// judge answers one request with the candidate and compares. With giveWay
// the judgement gives way to a served request that begins while it runs
// (givingWay): judge then returns false and the request is to be judged
// again.
func (s *Shadow) judge(ctx context.Context, j *job, giveWay bool) bool {
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
	if j.path == policies.PathValidate && j.served.Allowed && j.served.Window != nil && !j.in.Facts.DryRun && s.opts.Served != nil {
		if p := s.opts.Served.Plan(&j.in, policies.PathValidate); p.Window != nil {
			skip = p.Window.Key
		}
	}
	e := policies.NewEngine(set, policies.EngineOptions{Windows: window.NewView(s.opts.Windows, skip)})
	var d policies.Decision
	if j.path == policies.PathMutate {
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

// log writes the disagreement's decision log line: the request as the
// decision line names it, and both answers.
func (s *Shadow) log(ctx context.Context, j *job, d policies.Decision, from, to string) {
	line := decisionlog.Disagreement{Webhook: j.path.String(), Request: decisionlog.RequestOf(j.in.Request),
		RequestTime: j.in.Facts.Time.UTC().Format(time.RFC3339Nano), From: from, To: to,
		Served: side(j.served), Shadow: side(d)}
	s.opts.Log.LogAttrs(ctx, slog.LevelInfo, decisionlog.ShadowMessage, line.Attrs()...)
}

// side is one answer as a disagreement's line holds it, clipped.
func side(d policies.Decision) decisionlog.Answer {
	m := func(v string) string { return clip.String(v, clip.MessageBytes) }
	a := decisionlog.Answer{Allowed: d.Allowed, Code: d.Code, Role: clip.String(d.Role, clip.FieldBytes), Revision: d.Revision,
		Message: m(d.Message), Warnings: clip.Strings(d.Warnings, clip.ListItems, clip.MessageBytes), Patch: m(string(d.Patch))}
	clipped := func(list []policies.Finding) []decisionlog.Finding {
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
