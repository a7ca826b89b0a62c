package app

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/webhook"
)

// The changes impact reports, in the order reports list them.
const (
	changeNewlyDenied  = "newly denied"
	changeNewlyAllowed = "newly allowed"
	changeReasons      = "reasons changed"
	changeWarnings     = "warnings changed"
	changePatch        = "patch changed"
)

var changeOrder = []string{changeNewlyDenied, changeNewlyAllowed, changeReasons, changeWarnings, changePatch}

// Packages named for changes no policy package made.
const (
	// packageMutation groups changed patches: the mutating webhook's patch
	// is the diff of every package's operations.
	packageMutation = "(mutation)"
	// packageOther groups changed warnings no policy produced (the window
	// store's, the role table's).
	packageOther = "(other)"
)

// impactSide is one policy set's answer to a request or a stored object.
type impactSide struct {
	Allowed  bool               `json:"allowed"`
	Code     int32              `json:"code,omitempty"`
	Role     string             `json:"role,omitempty"`
	Message  string             `json:"message,omitempty"`
	Warnings []string           `json:"warnings,omitempty"`
	Patch    json.RawMessage    `json:"patch,omitempty"`
	Denials  []policies.Finding `json:"denials,omitempty"`
	findings []policies.Finding
}

// flip is one request or stored object the two sets answer differently.
type flip struct {
	seq int
	// Changes are what differs, in changeOrder.
	Changes []string `json:"changes"`
	// Input is the kind of input ("audit log", "snapshot", ...), Source
	// where in it.
	Input     string     `json:"input"`
	Source    string     `json:"source"`
	Time      *time.Time `json:"time,omitempty"`
	User      string     `json:"user,omitempty"`
	Groups    []string   `json:"groups,omitempty"`
	Operation string     `json:"operation"`
	Namespace string     `json:"namespace,omitempty"`
	Name      string     `json:"name"`
	Role      string     `json:"role"`
	// Packages are the policy packages (or pattern policies) whose
	// answers changed.
	Packages []string   `json:"packages"`
	Base     impactSide `json:"base"`
	Proposed impactSide `json:"proposed"`
}

// comparison judges every input under the base and the proposed set and
// keeps the flips.
type comparison struct {
	base, proposed *policies.Set
	// baseInventory and proposedInventory are --inventory's snapshot,
	// each pruned to what its set reads; nil without it.
	baseInventory, proposedInventory policies.Inventory
	mu                               sync.Mutex
	flips                            []flip
	inputs                           []*inputReport
	// seq numbers what is judged in input order, so flips found by
	// parallel workers are reported in that order.
	seq int
}

// impactJudge answers requests with one policy set as qn-webhook would,
// its rate windows counted in an in-process store whose clock is each
// request's recorded time.
type impactJudge struct {
	clock   *replayClock
	decider *explainingDecider
}

func newImpactJudge(set *policies.Set, inv policies.Inventory, start time.Time) *impactJudge {
	clk := &replayClock{now: start}
	// The memory store is the server's own (qn-webhook's default), and a
	// window.Counter: no deadline is needed around it.
	engine := policies.NewEngine(set, policies.EngineOptions{Windows: window.NewMemoryStore(clk, window.MemoryOptions{}), Inventory: inv})
	d := newExplainingDecider(engine, false)
	d.noWire = true
	return &impactJudge{clock: clk, decider: d}
}

// judge asks the webhooks about rep at its time.
func (j *impactJudge) judge(ctx context.Context, rep replayed) (impactSide, error) {
	j.clock.now = rep.Time
	hooks := webhookBoth
	if rep.Request.Operation == admissionv1.Delete {
		hooks = webhookValidate // the mutating webhook is not called for DELETE
	}
	out, err := askWebhooks(ctx, j.decider, rep.Request, hooks, rep.Time)
	if err != nil {
		return impactSide{}, err
	}
	d := out.final().Decision
	side := impactSide{Allowed: d.Allowed, Code: d.Code, Role: d.Role, Message: d.Message, Warnings: d.Warnings, Denials: d.Denials, findings: d.Findings}
	if out.Mutate != nil && len(out.Mutate.Decision.Patch) > 0 {
		side.Patch = out.Mutate.Decision.Patch
	}
	return side, nil
}

// replayClock is the time of the request being replayed.
type replayClock struct{ now time.Time }

func (c *replayClock) Now() time.Time                  { return c.now }
func (c *replayClock) Since(t time.Time) time.Duration { return c.now.Sub(t) }

// judgePair is the base and the proposed judge of one stream of requests,
// sharing one decoding of each object.
type judgePair struct {
	base, proposed *impactJudge
	objects        objectCache
}

func (c *comparison) pair(start time.Time) *judgePair {
	jp := &judgePair{base: newImpactJudge(c.base, c.baseInventory, start), proposed: newImpactJudge(c.proposed, c.proposedInventory, start)}
	jp.base.decider.objects = jp.objects.decode
	jp.proposed.decider.objects = jp.objects.decode
	return jp
}

// objectCache holds the objects decoded for the current request and the
// one before (a request's old object is often the one the request before
// wrote), by their bytes.
type objectCache struct {
	cur, prev map[string]ast.Value
}

// next starts a new request.
func (c *objectCache) next() {
	clear(c.prev)
	c.prev, c.cur = c.cur, c.prev
	if c.cur == nil {
		c.cur = map[string]ast.Value{}
	}
}

func (c *objectCache) decode(req *admissionv1.AdmissionRequest) (webhook.Objects, error) {
	var objs webhook.Objects
	var err error
	if objs.Object, err = c.value("request.object", req.Object.Raw, req); err != nil {
		return objs, err
	}
	objs.OldObject, err = c.value("request.oldObject", req.OldObject.Raw, req)
	return objs, err
}

func (c *objectCache) value(field string, raw []byte, req *admissionv1.AdmissionRequest) (ast.Value, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if v, ok := c.cur[string(raw)]; ok {
		return v, nil
	}
	v, ok := c.prev[string(raw)]
	if !ok {
		var err error
		if v, err = webhook.DecodeObject(field, raw, req); err != nil {
			return nil, err
		}
	}
	if c.cur == nil {
		c.cur = map[string]ast.Value{}
	}
	c.cur[string(raw)] = v
	return v, nil
}

// request judges one recorded request under both sets.
func (c *comparison) request(ctx context.Context, jp *judgePair, j job) error {
	rep := j.rep
	jp.objects.next()
	b, err := jp.base.judge(ctx, rep)
	if err != nil {
		return fmt.Errorf("%s: base: %w", rep.Source, err)
	}
	p, err := jp.proposed.judge(ctx, rep)
	if err != nil {
		return fmt.Errorf("%s: proposed: %w", rep.Source, err)
	}
	r := rep.Request
	f := compare(b, p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if rep.Recorded != nil && *rep.Recorded != b.Allowed {
		j.report.RecordedDiffers++
	}
	if f == nil {
		return nil
	}
	t := rep.Time
	f.seq, f.Input, f.Source, f.Time = j.seq, j.kind, rep.Source, &t
	f.User, f.Groups, f.Operation = r.UserInfo.Username, r.UserInfo.Groups, string(r.Operation)
	f.Namespace, f.Name = r.Namespace, r.Name
	c.flips = append(c.flips, *f)
	return nil
}

// stored judges a stored object under both sets as the background audit
// does: an UPDATE of itself with no requester, no window and no patch.
func (c *comparison) stored(ctx context.Context, base, proposed *policies.Engine, kind string, n storedNode) {
	b, p := auditSide(base.Audit(ctx, n.Object)), auditSide(proposed.Audit(ctx, n.Object))
	f := compare(b, p)
	if f == nil {
		return
	}
	f.Input, f.Source, f.Operation = kind, n.Source, "stored"
	f.Namespace, f.Name = n.Namespace, n.Name
	c.mu.Lock()
	c.seq++
	f.seq = c.seq
	c.flips = append(c.flips, *f)
	c.mu.Unlock()
}

// auditSide is the audit's verdict as an answer: a node that breaks a
// deny rule (or names no known role) would be refused its next update.
func auditSide(r policies.AuditResult) impactSide {
	s := impactSide{Allowed: r.Compliant(), Role: r.Role}
	for _, rr := range r.Rules {
		for _, m := range rr.Messages {
			f := policies.Finding{Source: rr.Package, Message: m, Enforcement: policies.EnforceDeny}
			switch rr.Verdict {
			case policies.VerdictFail, policies.VerdictError:
				s.Denials = append(s.Denials, f)
			case policies.VerdictWarn:
				s.Warnings = append(s.Warnings, m)
				f.Enforcement = ""
				s.findings = append(s.findings, f)
			}
		}
	}
	if !s.Allowed {
		s.Code = 403
		s.Message = strings.Join(r.Violations(), "; ")
	}
	return s
}

// compare says how two answers differ, or nil when they do not.
func compare(b, p impactSide) *flip {
	var changes []string
	var packages []string
	switch {
	case b.Allowed && !p.Allowed:
		changes = append(changes, changeNewlyDenied)
		packages = orAll(changedSources(p.Denials, b.Denials, enforced), p.Denials, enforced)
	case !b.Allowed && p.Allowed:
		changes = append(changes, changeNewlyAllowed)
		packages = orAll(changedSources(b.Denials, p.Denials, enforced), b.Denials, enforced)
	case !b.Allowed && !p.Allowed:
		if b.Code != p.Code || b.Message != p.Message {
			changes = append(changes, changeReasons)
			packages = append(changedSources(p.Denials, b.Denials, enforced), changedSources(b.Denials, p.Denials, enforced)...)
			packages = orAll(packages, p.Denials, enforced)
		}
	default:
		if !sameSet(b.Warnings, p.Warnings) {
			changes = append(changes, changeWarnings)
			bw, pw := warnedBy(b), warnedBy(p)
			packages = append(changedSources(pw, bw, all), changedSources(bw, pw, all)...)
			if len(packages) == 0 {
				packages = []string{packageOther}
			}
		}
		if !samePatch(b.Patch, p.Patch) {
			changes = append(changes, changePatch)
			packages = append(packages, packageMutation)
		}
	}
	if len(changes) == 0 {
		return nil
	}
	slices.Sort(packages)
	role := p.Role
	if role == "" {
		role = b.Role
	}
	return &flip{Changes: changes, Role: role, Packages: slices.Compact(packages), Base: b, Proposed: p}
}

func enforced(f policies.Finding) bool { return f.Enforcement == policies.EnforceDeny }
func all(policies.Finding) bool        { return true }

// warnedBy is every warning a side's policies gave: warn rules' entries
// and denials in warn mode.
func warnedBy(s impactSide) []policies.Finding {
	out := slices.Clone(s.findings)
	for _, d := range s.Denials {
		if d.Enforcement == policies.EnforceWarn {
			out = append(out, d)
		}
	}
	return out
}

// changedSources are the sources of the findings of a (that pass keep)
// that b lacks, by source and message.
func changedSources(a, b []policies.Finding, keep func(policies.Finding) bool) []string {
	var out []string
	for _, f := range a {
		if keep(f) && !slices.ContainsFunc(b, func(g policies.Finding) bool { return keep(g) && g.Source == f.Source && g.Message == f.Message }) {
			out = append(out, sourceLabel(f))
		}
	}
	return out
}

// orAll is sources, or when it is empty (the same denials, another code)
// every source of the findings that pass keep.
func orAll(sources []string, findings []policies.Finding, keep func(policies.Finding) bool) []string {
	if len(sources) > 0 {
		return sources
	}
	for _, f := range findings {
		if keep(f) {
			sources = append(sources, sourceLabel(f))
		}
	}
	return sources
}

// sourceLabel names a finding's source in reports: a package as listed,
// a pattern policy with its kind.
func sourceLabel(f policies.Finding) string {
	if f.Pattern {
		return "pattern " + f.Source
	}
	return f.Source
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	sort.Strings(x)
	sort.Strings(y)
	return slices.Equal(x, y)
}

// samePatch compares two JSONPatch documents as sets of operations.
func samePatch(a, b json.RawMessage) bool {
	if string(a) == string(b) {
		return true
	}
	var x, y []any
	_ = json.Unmarshal(a, &x)
	_ = json.Unmarshal(b, &y)
	return sameOps(x, y)
}
