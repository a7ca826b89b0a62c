package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
)

// explainJSON is an explanation in -o json|yaml.
type explainJSON struct {
	Exempt           string                `json:"exempt,omitempty"`
	Role             string                `json:"role,omitempty"`
	RoleFrom         string                `json:"roleFrom,omitempty"`
	RoleKnown        bool                  `json:"roleKnown"`
	RoleLocation     string                `json:"roleLocation,omitempty"`
	Operation        string                `json:"operation"`
	OperationAllowed bool                  `json:"operationAllowed"`
	StoredRole       string                `json:"storedRole,omitempty"`
	Refusal          string                `json:"refusal,omitempty"`
	RoleWarnings     []string              `json:"roleWarnings,omitempty"`
	Operations       []string              `json:"operations,omitempty"`
	Enforcement      string                `json:"enforcement,omitempty"`
	WindowKey        string                `json:"windowKey,omitempty"`
	Window           *policies.WindowState `json:"window,omitempty"`
	Evaluated        bool                  `json:"evaluated"`
	Rules            []string              `json:"rules,omitempty"`
	Packages         []packageView         `json:"packages,omitempty"`
	Patterns         []patternView         `json:"patterns,omitempty"`
	Policies         []policyView          `json:"policies,omitempty"`
	Error            string                `json:"error,omitempty"`
	Trace            string                `json:"trace,omitempty"`
}

// policyView is one dialect policy's verdicts (a ClusterPolicy's rules).
type policyView struct {
	Kind     string           `json:"kind"`
	Name     string           `json:"name"`
	Location string           `json:"location"`
	Rules    []policyRuleView `json:"rules"`
}

type policyRuleView struct {
	Rule     string `json:"rule"`
	Status   string `json:"status"`
	Action   string `json:"action,omitempty"`
	Message  string `json:"message,omitempty"`
	Location string `json:"location"`
}

func policyViews(x *policies.Explanation) []policyView {
	var out []policyView
	for _, pv := range x.Policies {
		p := pv.Policy
		v := policyView{Kind: p.Kind(), Name: p.Name(), Location: fmt.Sprintf("%s:%d", p.File(), p.Line()), Rules: []policyRuleView{}}
		for _, r := range pv.Verdicts {
			rv := policyRuleView{Rule: r.Rule, Status: r.Status, Message: r.Message, Location: fmt.Sprintf("%s:%d", p.File(), r.Line)}
			if r.Status == "fail" {
				rv.Action = "deny"
				if r.Warn {
					rv.Action = "warn"
				}
			}
			v.Rules = append(v.Rules, rv)
		}
		out = append(out, v)
	}
	return out
}

// packageView is one package of an explanation: the entries its deny,
// warn or patch rules produced, and every rule of it that held.
type packageView struct {
	Name string `json:"name"`
	// Listed is false for a package the role does not list but whose
	// rules its packages read.
	Listed  bool        `json:"listed"`
	Entries []entryView `json:"entries"`
	Held    []string    `json:"held"`
}

// patternView is one pattern policy's verdict on the request.
type patternView struct {
	Name string `json:"name"`
	// Location is file:line of the policy's pattern (of the failing
	// element, for a failure).
	Location string `json:"location"`
	// Outcome is passed, failed, skipped or not applicable.
	Outcome string `json:"outcome"`
	// Why explains a skipped or not applicable outcome.
	Why string `json:"why,omitempty"`
	// Action is deny or warn (failureAction Audit), for a failure.
	Action   string           `json:"action,omitempty"`
	Message  string           `json:"message,omitempty"`
	Failures []patternFailure `json:"failures,omitempty"`
}

// patternFailure is where one pattern (or anyPattern alternative) failed.
type patternFailure struct {
	Pattern  string `json:"pattern"`
	Path     string `json:"path,omitempty"`
	Detail   string `json:"detail"`
	Location string `json:"location"`
}

func patternViews(x *policies.Explanation) []patternView {
	var out []patternView
	for _, v := range x.Patterns {
		pv := patternView{Name: v.Policy.Name, Outcome: v.Outcome.String(), Why: v.Why, Message: v.Message,
			Location: fmt.Sprintf("%s:%d", v.Policy.File, v.Policy.Patterns[0].Line)}
		for _, f := range v.Failures {
			pv.Failures = append(pv.Failures, patternFailure{Pattern: f.Pattern, Path: f.Path, Detail: f.Detail, Location: fmt.Sprintf("%s:%d", v.Policy.File, f.Line)})
		}
		if len(pv.Failures) > 0 {
			pv.Location = pv.Failures[0].Location
			pv.Action = "deny"
			if v.Policy.Audit {
				pv.Action = "warn"
			}
		}
		out = append(out, pv)
	}
	return out
}

// entryView is one deny, warn or patch entry and the rules behind it.
type entryView struct {
	Rule  string `json:"rule"`
	Value any    `json:"value"`
	// Location is file:line of the rule that added the entry.
	Location string `json:"location"`
	// Via names other rules that produced the same value (the detailed
	// rule a guarded deny reads its messages from), as "rule file:line".
	Via []string `json:"via,omitempty"`
}

// roleFrom says where the role came from: "storedObject" (UPDATE and
// DELETE are judged by the stored object's role), "annotation" or
// "defaultRole".
func roleFrom(x *policies.Explanation) string {
	if x.StoredRole != "" && x.StoredRole == x.Role {
		return "storedObject"
	}
	if x.RoleFromAnnotation {
		return "annotation"
	}
	return "defaultRole"
}

func (p *policySet) roleLocation(x *policies.Explanation) string {
	if x.RoleKnown {
		return p.rolesLine("roles." + x.Role)
	}
	return ""
}

func explanationJSON(p *policySet, a *webhookAnswer, trace string) *explainJSON {
	x := a.Explanation
	j := &explainJSON{
		Exempt: x.Exempt, Role: x.Role, RoleKnown: x.RoleKnown, Operation: x.Operation,
		OperationAllowed: x.OperationAllowed, StoredRole: x.StoredRole, Refusal: x.Refusal, RoleWarnings: x.Warnings,
		WindowKey: x.WindowKey, Window: x.Window,
		Evaluated: x.Evaluated, Rules: x.Rules, Packages: packageViews(x), Patterns: patternViews(x),
		Policies: policyViews(x),
	}
	if x.Exempt == "" {
		j.RoleFrom, j.RoleLocation = roleFrom(x), p.roleLocation(x)
	}
	if x.RoleKnown {
		j.Operations, j.Enforcement = x.Spec.Operations, string(enforcement(x.Spec))
	}
	if x.Err != nil {
		j.Error = x.Err.Error()
	}
	if trace != "" && x.Evaluated {
		j.Trace = prettyTrace(x.Trace, trace)
	}
	return j
}

func enforcement(r policies.Role) policies.Enforcement {
	if r.Enforcement == "" {
		return policies.EnforceDeny
	}
	return r.Enforcement
}

// packageViews attributes each entry of the role's deny, warn or patch sets
// to the rule (file:line) that added it, and lists every rule that held.
func packageViews(x *policies.Explanation) []packageView {
	if !x.Evaluated {
		return nil
	}
	var out []packageView
	listed := map[string]bool{}
	for _, pkg := range x.Packages {
		listed[pkg] = true
		out = append(out, packageView{Name: pkg, Listed: true})
	}
	for _, f := range x.Firings {
		if !listed[f.Package] {
			listed[f.Package] = true
			out = append(out, packageView{Name: f.Package})
		}
	}
	for i := range out {
		pv := &out[i]
		held := map[string]rego.Firing{}
		for _, f := range x.Firings {
			if f.Package != pv.Name {
				continue
			}
			held[f.Rule+" "+f.Location()] = f
			if !f.Entry || !pv.Listed || !contains(x.Rules, f.Rule) {
				continue
			}
			e := entryView{Rule: f.Rule, Value: f.Value, Location: f.Location()}
			key := canonical(f.Value)
			for _, g := range x.Firings {
				if g.Entry && !(g.Package == f.Package && g.Rule == f.Rule) && canonical(g.Value) == key {
					via := g.Rule + " " + g.Location()
					if g.Package != f.Package {
						via = g.Package + "." + via
					}
					if !contains(e.Via, via) {
						e.Via = append(e.Via, via)
					}
				}
			}
			pv.Entries = append(pv.Entries, e)
		}
		sort.SliceStable(pv.Entries, func(a, b int) bool {
			ea, eb := pv.Entries[a], pv.Entries[b]
			if ra, rb := ruleOrder(x.Rules, ea.Rule), ruleOrder(x.Rules, eb.Rule); ra != rb {
				return ra < rb
			}
			return entryText(ea.Value) < entryText(eb.Value)
		})
		firings := make([]rego.Firing, 0, len(held))
		for _, f := range held {
			firings = append(firings, f)
		}
		sort.Slice(firings, func(a, b int) bool {
			if firings[a].File != firings[b].File {
				return firings[a].File < firings[b].File
			}
			if firings[a].Line != firings[b].Line {
				return firings[a].Line < firings[b].Line
			}
			return firings[a].Rule < firings[b].Rule
		})
		pv.Held = make([]string, 0, len(firings))
		for _, f := range firings {
			pv.Held = append(pv.Held, f.Rule+" "+f.Location())
		}
		if pv.Entries == nil {
			pv.Entries = []entryView{}
		}
	}
	return out
}

func ruleOrder(rules []string, rule string) int {
	for i, r := range rules {
		if r == rule {
			return i
		}
	}
	return len(rules)
}

// canonical is a comparable form of a JSON-like value.
func canonical(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// entryText shows an entry as a person reads it: a message as it is, the
// "msg" of an object entry, anything else as compact JSON.
func entryText(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case map[string]any:
		if m, ok := t["msg"].(string); ok {
			return m
		}
	}
	return canonical(v)
}

// prettyTrace renders the trace of an evaluation, filtered as --trace asks.
func prettyTrace(events []*topdown.Event, mode string) string {
	filter, ok := traceModes[mode]
	if !ok {
		filter = traceModes["full"]
	}
	var b bytes.Buffer
	topdown.PrettyTraceWithLocation(&b, filter(events))
	return b.String()
}

// describeRequest is one line saying who asks to do what, to what, when.
func describeRequest(a *webhookAnswer) string {
	r := a.Request
	target := r.Name
	if r.Namespace != "" {
		target = r.Namespace + "/" + r.Name
	}
	gv := r.Kind.Version
	if r.Kind.Group != "" {
		gv = r.Kind.Group + "/" + gv
	}
	s := fmt.Sprintf("%s %s %s %s by %s", r.Operation, gv, r.Kind.Kind, target, strconv.Quote(r.UserInfo.Username))
	if len(r.UserInfo.Groups) > 0 {
		s += " (groups " + strings.Join(r.UserInfo.Groups, ", ") + ")"
	}
	if r.DryRun != nil && *r.DryRun {
		s += ", dry run"
	}
	return s + " at " + a.Now.Format(time.RFC3339)
}

// writeExplanation prints how one webhook reaches its answer.
func writeExplanation(tw *textWriter, p *policySet, a *webhookAnswer, trace string) {
	tw.line(webhookTitle(a.Webhook) + ": " + verdict(a.Decision))
	tw.field("request", describeRequest(a))
	tw.field("policies", fmt.Sprintf("%s (revision %s)", p.Source, p.Set.Revision))
	x := a.Explanation
	switch {
	case a.ByKind:
		tw.field("judged", "by the check of its kind, not by the policies: every PromQL query of a HorizontalQNScaler (qnMetric.query, each stage's abortWhen) must parse with Prometheus' parser")
	case x == nil:
		tw.field("refused", "before any policy ran: the webhook found the request malformed")
	case x.Exempt != "":
		tw.field("exempt", fmt.Sprintf("%s, listed under exemptions (%s): admitted without role, policies or window", x.Exempt, p.rolesLine("exemptions")))
	default:
		writeRoleSteps(tw, p, x)
	}
	writeAnswerFields(tw, a.Decision, "answer", answerIsDryRun(a))
	if trace != "" && x != nil && x.Evaluated {
		tw.line(fmt.Sprintf("  trace (%s):", trace))
		for _, l := range strings.Split(strings.TrimRight(prettyTrace(x.Trace, trace), "\n"), "\n") {
			tw.line("    " + strings.TrimRight(l, " "))
		}
	}
}

func writeRoleSteps(tw *textWriter, p *policySet, x *policies.Explanation) {
	switch {
	case !x.RoleKnown:
		tw.field("role", fmt.Sprintf("%q, named by annotation %s, is not a role of %s (known: %s)",
			x.Role, policies.RoleAnnotation, policies.RolesFile, strings.Join(p.Set.Roles.Names(), ", ")))
		return
	case roleFrom(x) == "storedObject":
		tw.field("role", fmt.Sprintf("%s, the role of the stored object, which judges its %s (%s)", x.Role, x.Operation, p.roleLocation(x)))
	case x.RoleFromAnnotation:
		tw.field("role", fmt.Sprintf("%s, named by annotation %s=%s (%s)", x.Role, policies.RoleAnnotation, x.Role, p.roleLocation(x)))
	default:
		tw.field("role", fmt.Sprintf("%s: no %s annotation, so defaultRole (%s)", x.Role, policies.RoleAnnotation, p.rolesLine("defaultRole")))
	}
	ops := strings.Join(x.Spec.Operations, ", ")
	opsAt := p.rolesLine("roles." + x.Role + ".operations")
	if x.StoredRole != "" && x.StoredRole != x.Role {
		tw.field("stored role", fmt.Sprintf("%s; the change moves the object to role %s", x.StoredRole, x.Role))
	}
	for _, w := range x.Warnings {
		tw.field("warning", w)
	}
	if !x.OperationAllowed {
		tw.field("refused", x.Refusal)
		if !x.Evaluated {
			return
		}
	} else {
		tw.field("operation", fmt.Sprintf("%s is allowed: role %s may %s (%s)", x.Operation, x.Role, ops, opsAt))
	}
	tw.field("enforcement", fmt.Sprintf("%s, onError %s", enforcement(x.Spec), onError(x.Spec)))
	switch {
	case x.Path == policies.PathMutate:
	case x.Window == nil && x.RoleKnown && x.Spec.Window != nil:
		kinds := x.Spec.Window.Kinds
		if len(kinds) == 0 {
			kinds = policies.DefaultWindowKinds
		}
		tw.field("window", fmt.Sprintf("not counted: the role's window counts changes of %s only (%s)", strings.Join(kinds, ", "), p.rolesLine("roles."+x.Role+".window")))
	case x.Window == nil:
		tw.field("window", "none: the role has no rate window")
	default:
		w := x.Window
		tw.field("window", fmt.Sprintf("%s (%s): %d of %d changes in the last %s before this request, %d remaining (input.context.window)",
			x.WindowKey, x.WindowSubject, w.Count, w.Limit, seconds(w.PeriodSeconds), w.Remaining))
	}
	switch {
	case len(x.Packages) == 0:
		tw.field("evaluated", "no Rego packages: the role is judged by its pattern policies")
	default:
		tw.field("evaluated", fmt.Sprintf("%s rules of %s", joinAnd(x.Rules), strings.Join(x.Packages, ", ")))
	}
	if x.Err != nil {
		tw.field("error", x.Err.Error())
	}
	for _, pv := range packageViews(x) {
		title := pv.Name
		if !pv.Listed {
			title += " (read by the role's packages)"
		}
		if len(pv.Entries) == 0 && pv.Listed {
			title += ": no " + joinOr(x.Rules) + " entries"
		}
		tw.line("  " + title)
		for _, e := range pv.Entries {
			by := "by " + e.Rule + " " + e.Location
			if len(e.Via) > 0 {
				by += ", via " + strings.Join(e.Via, ", ")
			}
			tw.field("  "+e.Rule, entryText(e.Value)+"\n"+by)
		}
		if len(pv.Held) > 0 {
			tw.field("  held", heldText(pv.Held))
		}
	}
	for _, pv := range patternViews(x) {
		title := "pattern " + pv.Name + ": " + pv.Outcome
		if pv.Why != "" {
			title += ": " + pv.Why
		}
		if len(pv.Failures) == 0 {
			title += " (" + pv.Location + ")"
		}
		tw.line("  " + title)
		if len(pv.Failures) == 0 {
			continue
		}
		var by []string
		for _, f := range pv.Failures {
			at := f.Pattern
			if f.Path != "" {
				at += " at " + f.Path
			}
			by = append(by, f.Location+" ("+at+")")
		}
		tw.field("  "+pv.Action, pv.Message+"\nby "+strings.Join(by, ", "))
	}
	for _, pv := range x.Policies {
		p := pv.Policy
		if len(pv.Verdicts) == 0 {
			tw.line(fmt.Sprintf("  %s %s: no rule applies (%s:%d)", p.Kind(), p.Name(), p.File(), p.Line()))
			continue
		}
		tw.line(fmt.Sprintf("  %s %s", p.Kind(), p.Name()))
		for _, v := range pv.Verdicts {
			status := v.Status
			if v.Status == "fail" && v.Warn {
				status = "fail (warn: failureAction Audit)"
			}
			text := fmt.Sprintf("%s (%s:%d)", status, p.File(), v.Line)
			if v.Message != "" {
				text += "\n" + v.Message
			}
			tw.field("    rule "+v.Rule, text)
		}
	}
}

func onError(r policies.Role) policies.OnError {
	if r.OnError == "" {
		return policies.OnErrorDeny
	}
	return r.OnError
}

// heldText lists the rules that held, the file named once per run of rules
// in the same file: "quantumnode.rego: is_quantumnode:7 judged:13".
func heldText(held []string) string {
	var parts []string
	file := ""
	for _, h := range held {
		rule, loc, _ := strings.Cut(h, " ")
		f, line, _ := strings.Cut(loc, ":")
		if f != file {
			parts = append(parts, path.Base(f)+":")
			file = f
		}
		parts = append(parts, rule+":"+line)
	}
	return strings.Join(parts, " ")
}

func joinAnd(list []string) string { return joinWith(list, " and ") }
func joinOr(list []string) string  { return joinWith(list, " or ") }

func joinWith(list []string, last string) string {
	switch len(list) {
	case 0:
		return ""
	case 1:
		return list[0]
	}
	return strings.Join(list[:len(list)-1], ", ") + last + list[len(list)-1]
}

// writeAnswerFields prints a decision's fields under a webhook's title.
func writeAnswerFields(tw *textWriter, d policies.Decision, first string, dryRun bool) {
	if d.Message != "" {
		tw.field(first, d.Message)
	} else {
		tw.field(first, verdict(d))
	}
	writeDetails(tw, d, dryRun)
}

// answerIsDryRun says whether a's request is a dry run (it takes no slot).
func answerIsDryRun(a *webhookAnswer) bool {
	return a.Request != nil && a.Request.DryRun != nil && *a.Request.DryRun
}

// writeDetails prints warnings, unenforced denials, the window after the
// request and the patch of a decision.
func writeDetails(tw *textWriter, d policies.Decision, dryRun bool) {
	for _, warn := range d.Warnings {
		tw.field("warning", warn)
	}
	for _, wd := range d.WouldDeny {
		tw.field("not enforced", wd)
	}
	if d.Window != nil {
		tw.field("window", windowAfter(d.Window, d.Allowed && !dryRun, dryRun))
	}
	if len(d.Patch) > 0 {
		tw.field("patch", string(d.Patch))
	}
}
