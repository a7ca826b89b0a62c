package policies

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quantumnode/qn-admission/policies/pattern"
	"github.com/quantumnode/qn-admission/rego"
)

// Verdict is the outcome of one rule of the audit, with the values of the
// PolicyReport format (wgpolicyk8s.io/v1alpha2), so reports copy it as is.
type Verdict string

// The verdicts of an audited rule.
const (
	// VerdictPass: the rule was judged and produced nothing.
	VerdictPass Verdict = "pass"
	// VerdictFail: a deny rule fired, or the object names an unknown role.
	VerdictFail Verdict = "fail"
	// VerdictWarn: a warn rule fired.
	VerdictWarn Verdict = "warn"
	// VerdictError: the rule could not be evaluated.
	VerdictError Verdict = "error"
	// VerdictSkip: every definition of the rule reads the requester or
	// the request, which a stored object does not have.
	VerdictSkip Verdict = "skip"
)

// RequesterFields are the parts of the policy input that only an admission
// request has: who asks, its uid, dry run, options, time and the
// requester's rate window. A rule whose body reads one of them (or a
// parent of one, such as input.context as a whole) cannot be judged in the
// background, and the audit reports it as skipped, never as passed.
var RequesterFields = []string{
	"input.context.uid", "input.context.user", "input.context.userUID", "input.context.groups",
	"input.context.extra", "input.context.dryRun", "input.context.time", "input.context.window",
	"input.request.uid", "input.request.userInfo", "input.request.dryRun", "input.request.options",
}

// AuditResult is the judgement of one stored object against the current
// policy set, as the background audit and qnctl audit report it.
type AuditResult struct {
	// Revision is the policy revision the object was judged with.
	Revision string
	// Role is the role its qn-role annotation names (or the default role).
	Role string
	// Exempt names the exemption under which admission never judges the
	// object (a namespace exemption); Rules is then empty.
	Exempt string
	// Rules holds one result per rule the role evaluates: for each package
	// of the role, its deny and warn rules, then each pattern policy of the
	// role (its name as Package, rule validate); the role table's own
	// finding, an unknown role, comes as package roles.yaml, rule qn-role.
	Rules []RuleResult
}

// RuleResult is the verdict of one rule (deny or warn) of one package.
type RuleResult struct {
	Package string  `json:"package"`
	Rule    string  `json:"rule"`
	Verdict Verdict `json:"verdict"`
	// Messages are the entries the rule produced (fail, warn) or why it
	// was skipped or failed to evaluate.
	Messages []string `json:"messages,omitempty"`
	// Skipped lists the definitions of the rule that were not judged
	// because they read the requester, with what they read.
	Skipped []SkippedRule `json:"skipped,omitempty"`
}

// SkippedRule is one rule definition the audit does not judge.
type SkippedRule struct {
	// Location is file:line of the definition.
	Location string `json:"location"`
	// Reads are the requester fields it reads (see RequesterFields).
	Reads []string `json:"reads"`
}

// Compliant says that no rule failed or could not be evaluated.
func (r AuditResult) Compliant() bool {
	for _, rr := range r.Rules {
		if rr.Verdict == VerdictFail || rr.Verdict == VerdictError {
			return false
		}
	}
	return true
}

// Violations are the messages of every failed rule, then of every rule
// that could not be evaluated, in rule order.
func (r AuditResult) Violations() []string {
	var out []string
	for _, v := range []Verdict{VerdictFail, VerdictError} {
		for _, rr := range r.Rules {
			if rr.Verdict == v {
				out = append(out, rr.Messages...)
			}
		}
	}
	return out
}

// Count returns how many rules have verdict v.
func (r AuditResult) Count(v Verdict) int {
	n := 0
	for _, rr := range r.Rules {
		if rr.Verdict == v {
			n++
		}
	}
	return n
}

// Audit judges a stored object against the current policy set, as an UPDATE
// of the object to itself with no requester: the same plan (role table,
// role, packages) the webhook builds for a request, evaluated without a
// rate window and without taking a slot. The object's role is the one its
// qn-role annotation names, as for any UPDATE. The role table's answers
// about the request (whether the role may UPDATE, who may place objects
// under it) say nothing about the stored object and are not reported; an
// unknown role is. Rules that read the requester are skipped (see
// RequesterFields); roles in warn or dryrun mode still report their
// denials as failures: the audit says what breaks today's rules.
func (e *Engine) Audit(ctx context.Context, obj map[string]any) AuditResult {
	in := auditInput(obj, time.Now())
	p := e.Plan(in, PathValidate)
	res := AuditResult{Revision: p.Set.Revision, Role: p.Role}
	if p.Exempt != "" {
		res.Exempt = p.Exempt
		return res
	}
	if p.Spec == nil {
		msg := fmt.Sprintf("annotation %s=%q names no known role", RoleAnnotation, p.Role)
		if p.Refusal != nil {
			msg = p.Refusal.Message
		}
		res.Rules = []RuleResult{{Package: RolesFile, Rule: RoleAnnotation, Verdict: VerdictFail, Messages: []string{msg}}}
		return res
	}
	ap := auditPlanOf(ctx, p.Set)
	value, err := inputValue(in, p.Facts)
	for _, pkg := range p.Spec.Packages {
		pa := ap.packages[pkg]
		if pa == nil {
			continue
		}
		var out rego.Result
		evalErr := err
		if evalErr == nil {
			evalErr = pa.err
		}
		if evalErr == nil && pa.query != nil {
			start := time.Now()
			evalCtx := ctx
			if evalCtx, evalErr = e.withInventory(ctx, pa.query); evalErr == nil {
				out, evalErr = pa.query.Eval(evalCtx, value)
			}
			e.metrics.evaluated(p.Role, time.Since(start), evalErr)
		}
		for _, rule := range pa.rules {
			rr := RuleResult{Package: pkg, Rule: rule.name, Skipped: rule.skipped}
			switch {
			case rule.judged == 0:
				rr.Verdict = VerdictSkip
				rr.Messages = []string{skipMessage(rule.skipped)}
			case evalErr != nil:
				rr.Verdict, rr.Messages = VerdictError, []string{evalErr.Error()}
			case rule.name == "deny" && len(out.Deny) > 0:
				rr.Verdict, rr.Messages = VerdictFail, out.Deny
			case rule.name == "warn" && len(out.Warn) > 0:
				rr.Verdict, rr.Messages = VerdictWarn, out.Warn
			default:
				rr.Verdict = VerdictPass
			}
			res.Rules = append(res.Rules, rr)
		}
	}
	res.Rules = append(res.Rules, auditPatterns(p.Patterns, obj)...)
	res.Rules = append(res.Rules, auditDialects(ctx, p.Policies, in)...)
	return res
}

// PatternRule is the rule under which the audit reports a pattern policy
// (whose one rule is Kyverno's validate rule); the policy's name stands in
// the result's Package.
const PatternRule = "validate"

// auditPatterns judges a stored object against a role's pattern policies
// as admission would judge writing it again: under UPDATE with itself as
// the old object (CREATE for a policy that judges creations only). A
// policy whose selectors read the requester is skipped, as a Rego rule
// that reads it is; a DELETE-only policy has nothing to say about an
// object that stays. Audit-mode policies report warn, as they warn at
// admission.
func auditPatterns(pols []*pattern.Policy, obj map[string]any) []RuleResult {
	var out []RuleResult
	for _, pol := range pols {
		rr := RuleResult{Package: pol.Name, Rule: PatternRule}
		line, reads := pol.RequesterReads()
		op := pol.StoredOperation()
		switch {
		case len(reads) > 0:
			rr.Skipped = []SkippedRule{{Location: fmt.Sprintf("%s:%d", pol.File, line), Reads: reads}}
			rr.Verdict, rr.Messages = VerdictSkip, []string{skipMessage(rr.Skipped)}
		case op == "":
			rr.Verdict = VerdictSkip
			rr.Messages = []string{fmt.Sprintf("not judged in the background: %s judges %s only, and a stored object is not being deleted",
				pol.File, strings.Join(pol.Operations, ", "))}
		default:
			req := pattern.Request{Operation: op, Object: obj}
			if op == "UPDATE" {
				req.OldObject = obj
			}
			switch v := pol.Judge(&req); {
			case v.Outcome != pattern.Failed:
				rr.Verdict = VerdictPass
			case pol.Audit:
				rr.Verdict, rr.Messages = VerdictWarn, []string{v.Message}
			default:
				rr.Verdict, rr.Messages = VerdictFail, []string{v.Message}
			}
		}
		out = append(out, rr)
	}
	return out
}

func skipMessage(skipped []SkippedRule) string {
	var parts []string
	for _, s := range skipped {
		parts = append(parts, fmt.Sprintf("%s reads %s", s.Location, strings.Join(s.Reads, ", ")))
	}
	return "not judged in the background: " + strings.Join(parts, "; ") + "; only an admission request has these"
}

// auditInput is the input of an UPDATE of obj to itself, with no requester.
func auditInput(obj map[string]any, now time.Time) *Input {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	group, version, found := strings.Cut(apiVersion, "/")
	if !found {
		group, version = "", apiVersion
	}
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	namespace, _ := meta["namespace"].(string)
	uid, _ := meta["uid"].(string)
	// The plural is the lowercase kind plus s: true of QuantumNode, the
	// one kind the audit judges; policies match on kind anyway.
	resource := strings.ToLower(kind) + "s"
	gvk := metav1.GroupVersionKind{Group: group, Version: version, Kind: kind}
	gvr := metav1.GroupVersionResource{Group: group, Version: version, Resource: resource}
	return &Input{
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID(""), Kind: gvk, Resource: gvr, RequestKind: &gvk, RequestResource: &gvr,
			Name: name, Namespace: namespace, Operation: admissionv1.Update,
		},
		Object:    obj,
		OldObject: obj,
		Facts: Facts{
			Operation: string(admissionv1.Update),
			Kind:      GroupVersionKind{Group: group, Version: version, Kind: kind},
			Resource:  GroupVersionRes{Group: group, Version: version, Resource: resource},
			Namespace: namespace, Name: name,
			Labels:      stringMap(meta["labels"]),
			Annotations: stringMap(meta["annotations"]),
			Role:        annotationOf(obj, RoleAnnotation),
			Groups:      []string{},
			Time:        now,
			// The object's uid stands in for the request's, which the
			// audit has none of; no rule that is judged reads it.
			UID: uid,
		},
	}
}

func stringMap(v any) map[string]string {
	m, _ := v.(map[string]any)
	out := make(map[string]string, len(m))
	for k, x := range m {
		if s, ok := x.(string); ok {
			out[k] = s
		}
	}
	return out
}

// auditPlan is what a policy set needs for the audit, built once per set:
// per package, its rules and which of their definitions read the requester,
// and a query over the set compiled without those definitions.
type auditPlan struct {
	packages map[string]*packageAudit
}

type packageAudit struct {
	// query evaluates the package's judged deny and warn definitions; nil
	// when every one is skipped.
	query *rego.Query
	err   error
	rules []auditedRule
}

type auditedRule struct {
	name    string
	judged  int
	skipped []SkippedRule
}

// auditPlans caches each Set's audit plan while the Set lives: the key is
// a weak pointer and a cleanup drops the entry when the Set is collected,
// so reloads do not pile plans up.
var auditPlans sync.Map // weak.Pointer[Set] → *auditPlanEntry

type auditPlanEntry struct {
	once sync.Once
	plan *auditPlan
}

func auditPlanOf(ctx context.Context, s *Set) *auditPlan {
	key := weak.Make(s)
	v, loaded := auditPlans.LoadOrStore(key, &auditPlanEntry{})
	entry := v.(*auditPlanEntry)
	if !loaded {
		runtime.AddCleanup(s, func(k weak.Pointer[Set]) { auditPlans.Delete(k) }, key)
	}
	// Built for the set, not for this caller: a caller's cancelled
	// context must not leave a broken plan behind for every later audit.
	entry.once.Do(func() { entry.plan = buildAuditPlan(context.WithoutCancel(ctx), s) })
	return entry.plan
}

// AuditSkips lists, for every package of the set, the deny and warn rule
// definitions the audit skips because they read the requester, and every
// pattern policy whose selectors read it (as name.validate): what
// qnctl audit and the docs show policy authors.
func AuditSkips(ctx context.Context, s *Set) map[string][]SkippedRule {
	out := map[string][]SkippedRule{}
	for pkg, pa := range auditPlanOf(ctx, s).packages {
		for _, r := range pa.rules {
			if len(r.skipped) > 0 {
				out[pkg+"."+r.name] = r.skipped
			}
		}
	}
	for _, pols := range s.patterns {
		for _, pol := range pols {
			if line, reads := pol.RequesterReads(); len(reads) > 0 {
				out[pol.Name+"."+PatternRule] = []SkippedRule{{Location: fmt.Sprintf("%s:%d", pol.File, line), Reads: reads}}
			}
		}
	}
	dialectSkips(s, out)
	return out
}

func buildAuditPlan(ctx context.Context, s *Set) *auditPlan {
	dropped := map[string]bool{}
	plan := &auditPlan{packages: map[string]*packageAudit{}}
	for _, r := range s.Compiled.RuleInputReads("deny", "warn") {
		pa := plan.packages[r.Package]
		if pa == nil {
			pa = &packageAudit{}
			plan.packages[r.Package] = pa
		}
		i := slices.IndexFunc(pa.rules, func(a auditedRule) bool { return a.name == r.Name })
		if i < 0 {
			pa.rules = append(pa.rules, auditedRule{name: r.Name})
			i = len(pa.rules) - 1
		}
		if fields := requesterReads(r); len(fields) > 0 {
			pa.rules[i].skipped = append(pa.rules[i].skipped, SkippedRule{Location: fmt.Sprintf("%s:%d", r.Location.File, r.Location.Row), Reads: fields})
			dropped[locationKey(r.Location)] = true
			continue
		}
		pa.rules[i].judged++
	}
	source := s.Compiled
	var err error
	if len(dropped) > 0 {
		source, err = s.Compiled.Without(func(r *ast.Rule) bool { return r.Location != nil && dropped[locationKey(r.Location)] })
	}
	for pkg, pa := range plan.packages {
		slices.SortFunc(pa.rules, func(a, b auditedRule) int { return strings.Compare(a.name, b.name) })
		if err != nil {
			pa.err = err
			continue
		}
		var judged []string
		for _, r := range pa.rules {
			if r.judged > 0 {
				judged = append(judged, r.name)
			}
		}
		if len(judged) > 0 {
			pa.query, pa.err = source.Prepare(ctx, []string{pkg}, judged, 0)
		}
	}
	return plan
}

// requesterReads are the requester fields a rule definition may read: those
// it reads or reads a parent of. input.request as a whole reads every one of
// input.request's; input.context.labels reads none.
func requesterReads(r rego.RuleInputReads) []string {
	var out []string
	for _, f := range RequesterFields {
		if r.Reads(strings.Split(strings.TrimPrefix(f, "input."), ".")) {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

// locationKey names a rule definition by file, row and column: the same
// in the parsed and the compiled modules.
func locationKey(l *ast.Location) string {
	return fmt.Sprintf("%s:%d:%d", l.File, l.Row, l.Col)
}
