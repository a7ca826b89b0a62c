package policies

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
)

// EngineOptions configure an Engine.
type EngineOptions struct {
	// Windows keeps the rate windows; nil uses an in-process store.
	Windows window.Store
	// Metrics, when set, records evaluation latency and window rejections.
	Metrics *Metrics
}

// Engine decides admission requests against the current policy Set. The set
// is swapped atomically on reload; a decision in flight keeps the set it
// started with.
type Engine struct {
	current atomic.Pointer[Set]
	windows window.Store
	metrics *Metrics
}

// NewEngine serves set until Swap replaces it.
func NewEngine(set *Set, opts EngineOptions) *Engine {
	e := &Engine{windows: opts.Windows, metrics: opts.Metrics}
	if e.windows == nil {
		e.windows = window.NewMemoryStore(clock.RealClock{}, window.MemoryOptions{})
	}
	e.current.Store(set)
	return e
}

// Swap publishes a new policy set for every decision that starts after it.
func (e *Engine) Swap(set *Set) { e.current.Store(set) }

// Current returns the set decisions are made against now.
func (e *Engine) Current() *Set { return e.current.Load() }

// Validate judges a request on the validating path: exemptions, the role
// and its operations, the role's policies, then (only for a request the
// policies admit) one slot of the role's rate window. Warnings reach the
// user; nothing is patched.
func (e *Engine) Validate(ctx context.Context, in *Input) Decision {
	return e.decide(ctx, in, e.validate)
}

// decide is what both paths share: one policy set for the whole decision,
// exempt requests admitted unjudged, the revision stamped on the answer.
func (e *Engine) decide(ctx context.Context, in *Input, judge func(context.Context, *Set, *Input) Decision) Decision {
	set := e.current.Load()
	var d Decision
	if why, ok := set.Roles.Exemptions.match(in.Facts); ok {
		d = Allow()
		d.Exempt = why
	} else {
		d = judge(ctx, set, in)
	}
	d.Revision = set.Revision
	return d
}

func (e *Engine) validate(ctx context.Context, set *Set, in *Input) Decision {
	name, role, refusal, ok := resolveRole(set, in)
	if !ok {
		return refusal
	}
	j := judgement{role: role, name: name}
	if !role.Allows(in.Facts.Operation) {
		j.refuse(operationDenied(name, role, in))
		return j.decide()
	}

	var key string
	var limit window.Limit
	ctxv := in.Facts
	ctxv.Role = name
	if w := role.Window; w != nil {
		key, limit = windowKey(name, w, in.Facts), window.Limit{Count: w.Limit, Period: w.Period}
		st, err := e.windows.Peek(ctx, key, limit)
		if err != nil {
			return j.failed(fmt.Errorf("read rate window %s: %w", key, err))
		}
		ctxv.Window = windowState(w, st)
	}

	res, err := e.evaluate(ctx, set, name, false, in, ctxv)
	if err != nil {
		return j.failed(err)
	}
	j.warnings = res.Warn
	if len(res.Deny) > 0 {
		d := Deny(http.StatusForbidden, metav1.StatusReasonForbidden,
			fmt.Sprintf("denied by qn-admission (role %q): %s", name, strings.Join(res.Deny, "; ")))
		d.Reasons = res.Deny
		if !j.refuse(d) {
			return j.decide()
		}
	}

	// Only a request that will be admitted takes a slot. A dry run is
	// judged against the window as it is and takes nothing.
	if w := role.Window; w != nil {
		var st window.State
		admitted := true
		if in.Facts.DryRun {
			st, err = e.windows.Peek(ctx, key, limit)
			admitted = err == nil && st.Remaining > 0
		} else {
			st, admitted, err = e.windows.Take(ctx, key, limit, in.Facts.UID)
		}
		if err != nil {
			return j.failed(fmt.Errorf("take a slot of rate window %s: %w", key, err))
		}
		j.window = windowState(w, st)
		if !admitted {
			e.metrics.windowRejected(name)
			if !j.refuse(TooManyRequests(windowMessage(name, w, in.Facts, st))) {
				return j.decide()
			}
		}
	}
	return j.decide()
}

// judgement accumulates one role's verdict and applies its enforcement.
type judgement struct {
	name     string
	role     Role
	warnings []string
	refusals []Decision
	window   *WindowState
}

// refuse records a denial; it reports whether the request still goes on
// (the role does not enforce denials).
func (j *judgement) refuse(d Decision) bool {
	j.refusals = append(j.refusals, d)
	return j.role.Enforcement != EnforceDeny
}

func (j *judgement) decide() Decision {
	var d Decision
	switch {
	case len(j.refusals) > 0 && j.role.Enforcement == EnforceDeny:
		d = j.refusals[0]
		d.Warnings = j.warnings
	default:
		d = Allow(j.warnings...)
		for _, r := range j.refusals {
			d.WouldDeny = append(d.WouldDeny, r.Message)
			if j.role.Enforcement == EnforceWarn {
				d.Warnings = append(d.Warnings, fmt.Sprintf("not enforced (role %q is in warn mode): %s", j.name, r.Message))
			}
		}
	}
	d.Role = j.name
	d.Window = j.window
	return d
}

// failed applies the role's onError to an evaluation or window error.
func (j *judgement) failed(err error) Decision {
	msg := fmt.Sprintf("role %q: %v", j.name, err)
	var d Decision
	if j.role.OnError == OnErrorAllow {
		d = Allow(append(j.warnings, "admitted without a policy decision (onError: allow): "+msg)...)
	} else {
		d = InternalError(msg)
	}
	d.Role = j.name
	return d
}

// Mutate computes the role's patch on the mutating path. It never denies for
// policy reasons (validation runs after every mutation and judges the final
// object); an unknown role or operation passes through unpatched for the
// validating webhook to refuse. A dryrun role proposes no patch.
func (e *Engine) Mutate(ctx context.Context, in *Input) Decision {
	return e.decide(ctx, in, e.mutate)
}

func (e *Engine) mutate(ctx context.Context, set *Set, in *Input) Decision {
	name, role, _, ok := resolveRole(set, in)
	if !ok || !role.Allows(in.Facts.Operation) {
		d := Allow()
		d.Role = name
		return d
	}
	j := judgement{role: role, name: name}
	ctxv := in.Facts
	ctxv.Role = name
	res, err := e.evaluate(ctx, set, name, true, in, ctxv)
	if err != nil {
		return j.failed(err)
	}
	d := Allow()
	d.Role = name
	if role.Enforcement == EnforceDryRun {
		return d
	}
	patch, ops, err := diffPatch(in.Object, res.Patch)
	if err != nil {
		return j.failed(err)
	}
	d.Patch, d.PatchOps = patch, ops
	return d
}

// resolveRole picks the role named by the qn-role annotation, or the default
// role. An unknown role is a denial that lists the known ones.
func resolveRole(set *Set, in *Input) (string, Role, Decision, bool) {
	name := in.Facts.Role
	if name == "" {
		name = set.Roles.DefaultRole
	}
	role, ok := set.Roles.Roles[name]
	if !ok {
		return name, Role{}, Deny(http.StatusForbidden, metav1.StatusReasonForbidden, fmt.Sprintf(
			"annotation %s=%q names no known role; known roles: %s", RoleAnnotation, name, strings.Join(set.Roles.Names(), ", "))), false
	}
	return name, role, Decision{}, true
}

func operationDenied(name string, role Role, in *Input) Decision {
	return Deny(http.StatusForbidden, metav1.StatusReasonForbidden, fmt.Sprintf(
		"role %q may not %s %s; it may %s", name, strings.ToLower(in.Facts.Operation), in.Facts.Kind.Kind, strings.Join(role.Operations, ", ")))
}

func (e *Engine) evaluate(ctx context.Context, set *Set, role string, mutating bool, in *Input, c Facts) (rego.Result, error) {
	q, ok := set.Query(role, mutating)
	if !ok {
		return rego.Result{}, fmt.Errorf("no prepared policies (policy set %s is inconsistent)", set.Revision)
	}
	value, err := inputValue(in, c)
	if err != nil {
		return rego.Result{}, err
	}
	start := time.Now()
	res, err := q.Eval(ctx, value)
	e.metrics.evaluated(role, time.Since(start), err)
	return res, err
}

// windowKey names whose window a request counts against.
func windowKey(role string, w *Window, c Facts) string {
	switch w.Key {
	case KeyNamespace:
		return role + "/namespace/" + c.Namespace
	case KeyRole:
		return role + "/role"
	default:
		return role + "/user/" + c.User
	}
}

func windowState(w *Window, st window.State) *WindowState {
	return &WindowState{
		Key: string(w.Key), Count: st.Count, Limit: st.Limit,
		PeriodSeconds: w.Period.Seconds(), Remaining: st.Remaining,
	}
}

// windowMessage says who hit which limit and when a slot frees.
func windowMessage(role string, w *Window, c Facts, st window.State) string {
	var who string
	switch w.Key {
	case KeyNamespace:
		who = fmt.Sprintf("namespace %q has", c.Namespace)
	case KeyRole:
		who = fmt.Sprintf("role %q has", role)
	default:
		who = fmt.Sprintf("user %q has", c.User)
	}
	return fmt.Sprintf("rate window full: role %q allows %d changes per %s per %s; %s made %d in the last %s; a slot frees in %s",
		role, w.Limit, w.Period, w.Key, who, st.Count, w.Period, st.RetryAfter.Round(time.Millisecond))
}

// match reports whether the request is exempt, and why.
func (x Exemptions) match(c Facts) (string, bool) {
	for _, u := range x.Users {
		if matchName(u, c.User) {
			return "user " + c.User, true
		}
	}
	for _, g := range x.Groups {
		for _, have := range c.Groups {
			if matchName(g, have) {
				return "group " + have, true
			}
		}
	}
	for _, ns := range x.Namespaces {
		if c.Namespace != "" && matchName(ns, c.Namespace) {
			return "namespace " + c.Namespace, true
		}
	}
	return "", false
}

// matchName matches exactly, or by prefix when pattern ends in "*"
// (system:serviceaccount:kube-system:*).
func matchName(pattern, name string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, p)
	}
	return pattern == name
}
