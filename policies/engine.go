package policies

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
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
}

// Engine decides admission requests against the current policy Set. The set
// is swapped atomically on reload; a decision in flight keeps the set it
// started with.
type Engine struct {
	current atomic.Pointer[Set]
	windows window.Counter
	metrics *Metrics
}

// NewEngine serves set until Swap replaces it.
func NewEngine(set *Set, opts EngineOptions) *Engine {
	e := &Engine{windows: opts.Windows, metrics: opts.Metrics}
	if e.windows == nil {
		// As qn-webhook counts them by default.
		e.windows = window.NewGuard(window.NewMemoryStore(clock.RealClock{}, window.MemoryOptions{}), window.GuardOptions{Name: "memory"})
	}
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
	return p.stamp(e.validate(ctx, p, in))
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
		if v.refuse(*p.Refusal); v.settled() {
			return v.decision()
		}
	}
	facts := p.Facts
	if d, done := e.readWindow(ctx, p, &v, &facts); done {
		return d
	}
	res, err := e.evaluate(ctx, p, in, facts)
	if err != nil {
		return v.failed(err)
	}
	v.warnings = append(v.warnings, res.Warn...)
	if len(res.Deny) > 0 {
		d := Deny(http.StatusForbidden, metav1.StatusReasonForbidden,
			fmt.Sprintf("denied by qn-admission (role %q): %s", p.Role, strings.Join(res.Deny, "; ")))
		d.Reasons = res.Deny
		if v.refuse(d); v.settled() {
			return v.decision()
		}
	}
	if d, done := e.takeSlot(ctx, p, &v); done {
		return d
	}
	return v.decision()
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
	d := Allow()
	if p.Spec.Enforcement == EnforceDryRun {
		return d
	}
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
		value, err := policyInputValue(p.Set, in, facts)
		if err != nil {
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
	if len(p.Patterns) > 0 {
		if err := in.goObjects(); err != nil {
			return rego.Result{}, err
		}
		_, span := tracing.Child(ctx, "patterns")
		start := time.Now()
		judgePatterns(p.Patterns, in, &res)
		elapsed += time.Since(start)
		if span != nil {
			span.SetAttributes(attribute.Int("qn.patterns", len(p.Patterns)))
		}
		tracing.End(span, nil)
	}
	e.metrics.evaluated(p.Role, elapsed, nil)
	return res, nil
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

// verdict accumulates one role's answer and applies its enforcement:
// under deny a refusal settles the request; under warn and dryrun the
// request goes on and refusals become warnings or log entries.
type verdict struct {
	plan     *Plan
	warnings []string
	refusals []Decision
	window   *WindowState
	// store reports how the window store served the request.
	store *WindowStoreReport
}

func (v *verdict) refuse(d Decision) { v.refusals = append(v.refusals, d) }

// settled reports whether a refusal the role enforces decides the request,
// so nothing after it runs (no evaluation, no window slot).
func (v *verdict) settled() bool {
	return len(v.refusals) > 0 && v.plan.Spec.Enforcement == EnforceDeny
}

func (v *verdict) decision() Decision {
	var d Decision
	if v.settled() {
		d = v.refusals[0]
		d.Warnings = v.warnings
	} else {
		d = Allow(v.warnings...)
		for _, r := range v.refusals {
			d.WouldDeny = append(d.WouldDeny, r.Message)
			if v.plan.Spec.Enforcement == EnforceWarn {
				d.Warnings = append(d.Warnings, fmt.Sprintf("not enforced (role %q is in warn mode): %s", v.plan.Role, r.Message))
			}
		}
	}
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
