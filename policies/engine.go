package policies

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/quantumnode/qn-admission/internal/tracing"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
)

// EngineOptions configure an Engine.
type EngineOptions struct {
	// Windows counts the rate windows (a window.Guard in the server); nil
	// counts them in this process.
	Windows window.Counter
	// Metrics, when set, records evaluation latency and window rejections.
	Metrics *Metrics
	// Inventory, when set, is what policies read as data.inventory; nil
	// leaves data.inventory undefined.
	Inventory Inventory
}

// Engine decides admission requests against the current policy Set. The set
// is swapped atomically on reload; a decision in flight keeps the set it
// started with.
type Engine struct {
	current atomic.Pointer[Set]
	windows window.Counter
	metrics *Metrics
	// inventory is data.inventory (inventory.go); nil: none.
	inventory Inventory
	// denyFirst is set when a window call is a round trip
	// (window.Remote): roles with a Plan.DenyFirst are then judged deny
	// first, which saves the give-back of a refused change at the price
	// of a second, small evaluation.
	denyFirst bool
}

// NewEngine serves set until Swap replaces it.
func NewEngine(set *Set, opts EngineOptions) *Engine {
	e := &Engine{windows: opts.Windows, metrics: opts.Metrics, inventory: opts.Inventory}
	if e.windows == nil {
		// As qn-webhook counts them by default.
		e.windows = window.NewGuard(window.NewMemoryStore(clock.RealClock{}, window.MemoryOptions{}), window.GuardOptions{Name: "memory"})
	}
	e.denyFirst = window.Remote(e.windows)
	e.current.Store(set)
	return e
}

// Swap publishes a new policy set for every decision that starts after it.
func (e *Engine) Swap(set *Set) { e.current.Store(set) }

// Current returns the set decisions are made against now.
func (e *Engine) Current() *Set { return e.current.Load() }

// Validate judges a request on the validating path: the role table (which
// role judges it and whether it may), the role's policies, then, only for a
// request the policies admit, one slot of the role's rate window.
// Warnings reach the user; nothing is patched.
func (e *Engine) Validate(ctx context.Context, in *Input) Decision {
	p := e.tracedPlan(ctx, in, PathValidate)
	d := p.stamp(e.validate(ctx, p, in))
	e.metrics.wouldHaveDenied(d.Role, d)
	return d
}

// Mutate computes the role's patch on the mutating path. It never denies for
// policy reasons (validation runs after every mutation and judges the final
// object); a request the role table refuses passes through unpatched for the
// validating webhook to refuse. A dryrun role proposes no patch.
func (e *Engine) Mutate(ctx context.Context, in *Input) Decision {
	p := e.tracedPlan(ctx, in, PathMutate)
	return p.stamp(e.mutate(ctx, p, in))
}

// tracedPlan is Plan in a "role" span when the request is traced.
func (e *Engine) tracedPlan(ctx context.Context, in *Input, path Path) *Plan {
	_, span := tracing.Child(ctx, "role")
	p := e.Plan(in, path)
	if span != nil {
		span.SetAttributes(attribute.String("qn.role", p.Role), attribute.String("qn.exempt", p.Exempt),
			attribute.Bool("qn.refused", p.Refusal != nil), attribute.String("qn.policy.revision", p.Set.Revision))
		span.End()
	}
	return p
}

func (e *Engine) validate(ctx context.Context, p *Plan, in *Input) Decision {
	if p.Exempt != "" {
		return Allow()
	}
	if p.Refusal != nil && !p.RefusalEnforceable {
		return *p.Refusal
	}
	v := verdict{plan: p, warnings: p.Warnings}
	if p.Refusal != nil {
		if v.refuse(*p.Refusal, SourceRoleTable); v.settled() {
			return v.decision()
		}
	}
	if p.DenyFirst != nil && e.denyFirst && !p.Facts.DryRun && !trace.SpanFromContext(ctx).IsRecording() {
		return e.validateDenyFirst(ctx, p, in, &v)
	}
	return e.validateTakeFirst(ctx, p, in, &v)
}

// validateTakeFirst counts the window before the policies run, in one
// store call that also answers input.context.window; the slot is given
// back if the policies refuse the change or cannot judge it (windows.go).
func (e *Engine) validateTakeFirst(ctx context.Context, p *Plan, in *Input, v *verdict) Decision {
	facts := p.Facts
	slot, d, done := e.countWindow(ctx, p, v, &facts, false)
	if done {
		return d
	}
	res, err := e.evaluate(ctx, p, in, facts)
	if err != nil {
		e.giveBack(ctx, p, v, slot)
		if gone := CallerGone(ctx); gone != nil {
			// The evaluation was canceled because the caller left, not
			// because the policies failed: its slot is given back.
			return callerGoneDecision(p, gone)
		}
		return v.failed(err)
	}
	return e.judge(ctx, p, v, slot, res)
}

// validateDenyFirst is validate for a role none of whose deny rules may
// read the window (Plan.DenyFirst), when window calls are round trips
// (Engine.denyFirst): its deny rules, the warn rules that do
// not read the window and its pattern policies are judged first, so a
// change they refuse only reads the window (one read-only store call, for
// the warn rules that read it) and takes no slot, where validateTakeFirst
// would take one and give it back; a change they admit takes its slot as
// there. Then the warn rules that read the window run. The answer is
// validateTakeFirst's: every rule sees the input it would have seen there,
// and the result is assembled in the one query's order; a first stage that
// fails is answered as a failed evaluation is there (failedFirst). Traced
// requests go there: their spans time the one query's packages.
func (e *Engine) validateDenyFirst(ctx context.Context, p *Plan, in *Input, v *verdict) Decision {
	start := time.Now()
	ctx, err := e.withInventory(ctx, p.Query)
	if err != nil {
		return e.failedFirst(ctx, p, v, err)
	}
	value, err := e.inputValue(p, in, p.Facts)
	if err != nil {
		return e.failedFirst(ctx, p, v, err)
	}
	first, err := p.DenyFirst.EvalFirst(ctx, value)
	if err != nil {
		e.metrics.evaluated(p.Role, time.Since(start), err)
		return e.failedFirst(ctx, p, v, err)
	}
	var patterns rego.Result
	if p.judgesBesideRego() {
		if err := in.goObjects(); err != nil {
			return e.failedFirst(ctx, p, v, err)
		}
		judgePatterns(p.Patterns, in, &patterns)
		judgeDialects(ctx, p.Policies, in, &patterns)
	}
	elapsed := time.Since(start)
	if len(first.Result.Deny) > 0 || len(patterns.Deny) > 0 {
		judged := first.Result
		judged.Deny = append(slices.Clip(judged.Deny), patterns.Deny...)
		judged.DenyBy = append(slices.Clip(judged.DenyBy), patterns.DenyBy...)
		judged.Warn = append(slices.Clip(judged.Warn), patterns.Warn...)
		judged.WarnBy = append(slices.Clip(judged.WarnBy), patterns.WarnBy...)
		if v.wouldSettle(judged) {
			// A change its deny rules refuse is not counted, so its
			// window is neither taken nor read: no store call at all,
			// and the second stage (the warn rules that read the
			// window, which speak of the change being counted) is not
			// evaluated, as judge drops what they say on a refusal.
			e.metrics.evaluated(p.Role, elapsed, nil)
			return e.judge(ctx, p, v, windowCount{}, judged)
		}
	}
	facts := p.Facts
	slot, d, done := e.countWindow(ctx, p, v, &facts, false)
	if done {
		return d
	}
	start = time.Now()
	if p.DenyFirst.Second != nil {
		value = withWindow(p.Set, value, facts.Window)
	}
	res, err := p.DenyFirst.EvalSecond(ctx, value, first)
	// One evaluation, in two stages.
	e.metrics.evaluated(p.Role, elapsed+time.Since(start), err)
	if err != nil {
		e.giveBack(ctx, p, v, slot)
		return v.failed(err)
	}
	// The pattern policies' entries follow the Rego rules', as evaluate
	// appends them.
	res.Deny, res.DenyBy = append(res.Deny, patterns.Deny...), append(res.DenyBy, patterns.DenyBy...)
	res.Warn, res.WarnBy = append(res.Warn, patterns.Warn...), append(res.WarnBy, patterns.WarnBy...)
	return e.judge(ctx, p, v, slot, res)
}

// failedFirst answers a first stage that failed as validateTakeFirst
// answers a failed evaluation, without evaluating again (which could take
// the evaluation deadline twice): the window is read, so a store that
// cannot answer is answered as there, and otherwise the failure is.
func (e *Engine) failedFirst(ctx context.Context, p *Plan, v *verdict, err error) Decision {
	facts := p.Facts
	if _, d, done := e.countWindow(ctx, p, v, &facts, true); done {
		return d
	}
	return v.failed(err)
}

// judge applies the policies' result, then the window, to the verdict: a
// refusal they settle gives the slot back; a change they admit keeps it,
// unless the window is full.
func (e *Engine) judge(ctx context.Context, p *Plan, v *verdict, slot windowCount, res rego.Result) Decision {
	if p.Window != nil && len(res.Deny) > 0 && len(res.WarnBy) > 0 && v.wouldSettle(res) {
		res = withoutWindowWarnings(res, p.Set.windowWarners)
	}
	v.warnings = append(v.warnings, res.Warn...)
	for _, w := range res.WarnBy {
		v.findings = append(v.findings, Finding{Source: w.Source, Pattern: w.Pattern, Message: w.Message})
	}
	if len(res.Deny) > 0 {
		if v.policiesDenied(res); v.settled() {
			e.giveBack(ctx, p, v, slot)
			return v.decision()
		}
	}
	if d, done := e.settleSlot(p, v, slot); done {
		return d
	}
	return v.decision()
}

// withoutWindowWarnings drops from res what the warn rules that may read
// input.context.window said (packages in readers). Such a rule speaks of
// the change being counted ("this is change 109 of 120"), and a change the
// policies refuse is not counted: it takes no slot, and with a shared
// store its window is not even read (validateDenyFirst). Dropping them
// here too keeps every path's answer the same. A message another package
// also gave stays.
func withoutWindowWarnings(res rego.Result, readers map[string]bool) rego.Result {
	fromReader := func(en rego.Entry) bool { return !en.Pattern && readers[en.Source] }
	if !slices.ContainsFunc(res.WarnBy, fromReader) {
		return res
	}
	dropped := map[string]bool{}
	for _, en := range res.WarnBy {
		if fromReader(en) {
			dropped[en.Message] = true
		}
	}
	kept := slices.DeleteFunc(slices.Clone(res.WarnBy), fromReader)
	for _, en := range kept {
		delete(dropped, en.Message)
	}
	res.Warn = slices.DeleteFunc(slices.Clone(res.Warn), func(m string) bool { return dropped[m] })
	if len(kept) == 0 {
		kept = nil
	}
	res.WarnBy = kept
	return res
}

func (e *Engine) mutate(ctx context.Context, p *Plan, in *Input) Decision {
	if p.Refusal != nil && p.Refusal.Code == http.StatusBadRequest {
		// A malformed request gets the validating webhook's 400 here too.
		return *p.Refusal
	}
	// Any other refusal is the validating webhook's to answer: mutation
	// never denies, and the request passes unpatched.
	if p.Exempt != "" || p.Refusal != nil {
		return Allow()
	}
	v := verdict{plan: p}
	res, err := e.evaluate(ctx, p, in, p.Facts)
	if err != nil {
		return v.failed(err)
	}
	// The mutation query holds only packages whose patches apply (a
	// dryrun role or package proposes none: mutatingPackages).
	d := Allow()
	if len(res.Patch) > 0 {
		if err := in.goObjects(); err != nil {
			return v.failed(err)
		}
	}
	patch, ops, err := diffPatch(in.Object, res.Patch)
	if err != nil {
		return v.failed(err)
	}
	d.Patch, d.PatchOps = patch, ops
	return d
}

// evaluate runs the role's prepared query and, on the validating path, its
// pattern policies, into one result, so enforcement, the window and the
// decision log treat a pattern's denial as a Rego rule's.
func (e *Engine) evaluate(ctx context.Context, p *Plan, in *Input, facts Facts) (rego.Result, error) {
	if p.Query == nil && !p.patternsOnly() {
		return rego.Result{}, p.inconsistent()
	}
	var res rego.Result
	var elapsed time.Duration
	if p.Query != nil {
		value, err := e.inputValue(p, in, facts)
		if err != nil {
			return rego.Result{}, err
		}
		if ctx, err = e.withInventory(ctx, p.Query); err != nil {
			return rego.Result{}, err
		}
		evalCtx, span := tracing.Child(ctx, "policy evaluation")
		start := time.Now()
		res, err = evalQuery(evalCtx, span, p.Query, value)
		elapsed = time.Since(start)
		if span != nil {
			span.SetAttributes(attribute.String("qn.role", p.Role), attribute.StringSlice("qn.policy.packages", p.Query.Packages()),
				attribute.Int("qn.policy.denials", len(res.Deny)), attribute.Int("qn.policy.warnings", len(res.Warn)))
		}
		tracing.End(span, err)
		if err != nil {
			e.metrics.evaluated(p.Role, elapsed, err)
			return res, err
		}
	}
	if p.judgesBesideRego() {
		if err := in.goObjects(); err != nil {
			return rego.Result{}, err
		}
		_, span := tracing.Child(ctx, "patterns")
		start := time.Now()
		judgePatterns(p.Patterns, in, &res)
		judgeDialects(ctx, p.Policies, in, &res)
		elapsed += time.Since(start)
		if span != nil {
			span.SetAttributes(attribute.Int("qn.patterns", len(p.Patterns)), attribute.Int("qn.policies", len(p.Policies)))
		}
		tracing.End(span, nil)
	}
	e.metrics.evaluated(p.Role, elapsed, nil)
	return res, nil
}

// inputValue is the policies' input: what of the request the set may read,
// and facts as input.context.
func (e *Engine) inputValue(p *Plan, in *Input, facts Facts) (ast.Value, error) {
	readable, err := in.readableBy(p.Set)
	if err != nil {
		return nil, err
	}
	return policyInputValue(p.Set, readable, facts)
}

// stamp marks a decision with what made it: the policy revision, the role
// and the exemption.
func (p *Plan) stamp(d Decision) Decision {
	d.Revision = p.Set.Revision
	d.Exempt = p.Exempt
	if d.Role == "" {
		d.Role = p.Role
	}
	return d
}

// verdict accumulates one role's answer and applies enforcement: a
// refusal enforced as deny settles the request; under warn and dryrun
// (the role's, or a package's own) the request goes on and refusals become
// warnings or log entries.
type verdict struct {
	plan     *Plan
	warnings []string
	refusals []refusal
	// denials and findings are every refusal's entries and the policies'
	// warn entries, with their sources (Decision.Denials, .Findings).
	denials  []Finding
	findings []Finding
	window   *WindowState
	// store reports how the window store served the request.
	store *WindowStoreReport
}

// refusal is one answer that would refuse the request, and what its
// enforcement makes of it.
type refusal struct {
	Decision
	enforcement Enforcement
	// by names the package or pattern policy (byPattern) whose own
	// enforcement applies; empty when the role's does.
	by        string
	byPattern bool
}

// refuse records a refusal of the role table or the window, under the
// role's enforcement.
func (v *verdict) refuse(d Decision, source string) {
	v.add(refusal{Decision: d, enforcement: v.plan.Spec.Enforcement}, []Finding{{Source: source, Message: d.Message}})
}

func (v *verdict) add(r refusal, findings []Finding) {
	for i := range findings {
		findings[i].Enforcement = r.enforcement
	}
	v.denials = append(v.denials, findings...)
	if r.enforcement == EnforceDeny {
		// An enforced refusal comes first: it is the answer.
		v.refusals = append([]refusal{r}, v.refusals...)
		return
	}
	v.refusals = append(v.refusals, r)
}

// policiesDenied records the denials of the role's policies: one refusal
// under the role's enforcement and, in a role with overrides, one per
// package or pattern whose own enforcement differs (the denials a package
// enforces in a role that does not share one 403).
func (v *verdict) policiesDenied(res rego.Result) {
	p := v.plan
	findings := make([]Finding, len(res.DenyBy))
	for i, en := range res.DenyBy {
		findings[i] = Finding{Source: en.Source, Pattern: en.Pattern, Message: en.Message}
	}
	if !p.Spec.hasOverrides() {
		d := Deny(http.StatusForbidden, metav1.StatusReasonForbidden, "")
		d.Reasons = res.Deny
		v.add(v.policyRefusal(d, p.Spec.Enforcement, "", false), findings)
		return
	}
	type group struct {
		refusal
		findings []Finding
	}
	var groups []*group
	for _, f := range findings {
		e := p.Spec.EnforcementOf(f.Source, f.Pattern)
		r := refusal{enforcement: e}
		if e != p.Spec.Enforcement && e != EnforceDeny {
			r.by, r.byPattern = f.Source, f.Pattern
		}
		i := slices.IndexFunc(groups, func(g *group) bool {
			return g.enforcement == r.enforcement && g.by == r.by && g.byPattern == r.byPattern
		})
		if i < 0 {
			groups = append(groups, &group{refusal: r})
			i = len(groups) - 1
		}
		g := groups[i]
		if !slices.Contains(g.Reasons, f.Message) {
			g.Reasons = append(g.Reasons, f.Message)
		}
		g.findings = append(g.findings, f)
	}
	for _, g := range groups {
		d := Deny(http.StatusForbidden, metav1.StatusReasonForbidden, "")
		d.Reasons = g.Reasons
		v.add(v.policyRefusal(d, g.enforcement, g.by, g.byPattern), g.findings)
	}
}

// policyRefusal is the 403 of the policies' denials d.Reasons.
func (v *verdict) policyRefusal(d Decision, e Enforcement, by string, byPattern bool) refusal {
	d.Message = fmt.Sprintf("denied by qn-admission (role %q): %s", v.plan.Role, strings.Join(d.Reasons, "; "))
	return refusal{Decision: d, enforcement: e, by: by, byPattern: byPattern}
}

// sourceName names a package or pattern policy for people.
func sourceName(source string, pattern bool) string {
	if pattern {
		return fmt.Sprintf("pattern policy %q", source)
	}
	return fmt.Sprintf("package %q", source)
}

// settled reports whether an enforced refusal decides the request, so
// nothing after it runs (no evaluation, no window slot).
// wouldSettle says whether policiesDenied(res) would settle the request,
// leaving v as it is.
func (v *verdict) wouldSettle(res rego.Result) bool {
	probe := verdict{plan: v.plan, refusals: slices.Clone(v.refusals)}
	probe.policiesDenied(res)
	return probe.settled()
}

func (v *verdict) settled() bool {
	return len(v.refusals) > 0 && v.refusals[0].enforcement == EnforceDeny
}

func (v *verdict) decision() Decision {
	var d Decision
	if v.settled() {
		d = v.refusals[0].Decision
		d.Warnings = v.warnings
	} else {
		d = Allow(v.warnings...)
	}
	for _, r := range v.refusals {
		if r.enforcement == EnforceDeny {
			continue
		}
		d.WouldDeny = append(d.WouldDeny, r.Message)
		if r.enforcement == EnforceWarn {
			if r.by != "" {
				d.Warnings = append(d.Warnings, fmt.Sprintf("not enforced (%s is in warn mode): %s", sourceName(r.by, r.byPattern), r.Message))
			} else {
				d.Warnings = append(d.Warnings, fmt.Sprintf("not enforced (role %q is in warn mode): %s", v.plan.Role, r.Message))
			}
		}
	}
	d.Denials, d.Findings = v.denials, v.findings
	d.Window = v.window
	d.WindowStore = v.store
	return d
}

// failed applies the role's onError to an evaluation or window error.
func (v *verdict) failed(err error) Decision {
	msg := fmt.Sprintf("role %q: %v", v.plan.Role, err)
	d := InternalError(msg)
	if v.plan.Spec.OnError == OnErrorAllow {
		d = Allow(append(v.warnings, "admitted without a policy decision (onError: allow): "+msg)...)
	}
	d.PolicyFailed = true
	return d
}
