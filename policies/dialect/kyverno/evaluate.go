package kyverno

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"github.com/kyverno/kyverno/pkg/engine/validate"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/quantumnode/qn-admission/policies/dialect"
)

// discard is the logger Kyverno's libraries get: what they log at debug
// level, the verdict already says.
var discard = logr.Discard()

// Policy is one loaded ClusterPolicy or Policy. It is immutable and safe
// for concurrent use.
type Policy struct {
	name, kind, file string
	line             int
	// namespace is a Policy's: it judges objects of that namespace only.
	namespace string
	spec      spec
	rules     []*rule
	// readsImages: one of its rules names Kyverno's images variable.
	readsImages bool
}

// Name is metadata.name.
func (p *Policy) Name() string { return p.name }

// Kind is ClusterPolicy or Policy.
func (p *Policy) Kind() string { return p.kind }

// File is the file that declares the policy.
func (p *Policy) File() string { return p.file }

// Line is the line of the policy's document.
func (p *Policy) Line() int { return p.line }

// Namespace is a Policy's namespace; "" for a ClusterPolicy.
func (p *Policy) Namespace() string { return p.namespace }

// Rules are the policy's validate rules and those Kyverno generates from
// them for Pod controllers.
func (p *Policy) Rules() []dialect.Rule {
	out := make([]dialect.Rule, len(p.rules))
	for i, r := range p.rules {
		out[i] = dialect.Rule{Name: r.spec.Name, Line: r.line, RequesterReads: r.requesterReads}
	}
	return out
}

type rule struct {
	spec ruleSpec
	line int
	// audit: a failure warns (failureAction Audit, Kyverno's default).
	audit bool
	// requesterReads say why the rule cannot judge a stored object.
	requesterReads []string
	// existingViolationsAllowed: on UPDATE an enforcing rule the old
	// object already failed is skipped.
	existingViolationsAllowed bool
	// readsImages: the rule names Kyverno's images variable somewhere, so
	// its document can load them.
	readsImages bool
}

// withImages gives d the request's images if the rule may read them.
func (r *rule) withImages(d document, images *imageSource) document {
	if r.readsImages {
		d.images = images
	}
	return d
}

// requesterVariables are the variables only an admission request has.
var requesterVariables = regexp.MustCompile(`\{\{[^}]*(request\.userInfo|request\.roles|request\.clusterRoles|serviceAccountName|serviceAccountNamespace)`)

func newRule(p *Policy, r ruleSpec, line int) (*rule, error) {
	action := p.spec.ValidationFailureAction
	if r.Validate.FailureAction != "" {
		action = r.Validate.FailureAction
	}
	enforce, err := failureAction(action)
	if err != nil {
		return nil, err
	}
	out := &rule{spec: r, line: line, audit: !enforce, existingViolationsAllowed: true}
	if v := r.Validate.AllowExistingViolations; v != nil {
		out.existingViolationsAllowed = *v
	}
	if b := p.spec.Background; b != nil && !*b {
		out.requesterReads = append(out.requesterReads, "spec.background: false")
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	out.readsImages = readsImages.Match(raw)
	for _, m := range requesterVariables.FindAllStringSubmatch(string(raw), -1) {
		if !slices.Contains(out.requesterReads, m[1]) {
			out.requesterReads = append(out.requesterReads, m[1])
		}
	}
	for _, f := range append(r.Match.filters(""), r.Exclude.filters("")...) {
		if len(f.filter.Subjects) > 0 && !slices.Contains(out.requesterReads, "request.userInfo") {
			out.requesterReads = append(out.requesterReads, "request.userInfo")
		}
	}
	return out, nil
}

// Status is one rule's verdict on one request, as Kyverno reports it.
type Status string

// The statuses of a rule that matched.
const (
	StatusPass  Status = "pass"
	StatusFail  Status = "fail"
	StatusSkip  Status = "skip"
	StatusError Status = "error"
)

// RuleResult is the verdict of one rule that matched a request.
type RuleResult struct {
	Rule    string
	Status  Status
	Message string
	// Audit says a failure only warns (failureAction Audit).
	Audit bool
}

// Evaluate judges req and returns the rules that failed (a warning for an
// Audit rule) or could not be judged (a denial unless spec.failurePolicy
// is Ignore).
func (p *Policy) Evaluate(ctx context.Context, req *dialect.Request) []dialect.Finding {
	var out []dialect.Finding
	for _, r := range p.Results(ctx, req) {
		switch r.Status {
		case StatusFail:
			out = append(out, dialect.Finding{Rule: r.Rule, Message: r.Message, Warn: r.Audit})
		case StatusError:
			if p.spec.FailurePolicy != "Ignore" {
				out = append(out, dialect.Finding{Rule: r.Rule, Message: r.Message, Error: true})
			}
		}
	}
	return out
}

// Results is the verdict of every rule that matches req, in rule order,
// as Kyverno's CLI reports them: a rule that does not match has none.
func (p *Policy) Results(_ context.Context, req *dialect.Request) []RuleResult {
	if req.Background && p.spec.Background != nil && !*p.spec.Background || !req.Background && p.spec.Admission != nil && !*p.spec.Admission {
		return nil
	}
	obj := req.Object
	if req.Operation == "DELETE" {
		obj = req.OldObject
	}
	if obj == nil {
		return nil
	}
	if p.namespace != "" && (&unstructured.Unstructured{Object: obj}).GetNamespace() != p.namespace {
		return nil
	}
	t := newTarget(req, obj, req.Operation)
	base := lazyDocument(func() document { return newDocument(req, req.Object, req.OldObject, req.Operation) })
	var images *imageSource
	if p.readsImages {
		images = newImageSource(req.Object, req.Operation)
	}
	var out []RuleResult
	for _, r := range p.rules {
		if req.Background && len(r.requesterReads) > 0 || !r.matches(t) {
			continue
		}
		res := r.judge(lazyDocument(func() document { return r.withImages(base().clone(), images) }), req, images)
		if res.status == statusNone {
			// Kyverno reports a rule with nothing to judge (an empty
			// foreach list, a DELETE) as passed... only when it applied:
			// like its CLI, say nothing.
			continue
		}
		out = append(out, RuleResult{Rule: r.spec.Name, Status: res.status.public(), Message: res.message, Audit: r.audit})
		if p.spec.ApplyRules == "One" && res.status != statusSkip {
			break
		}
	}
	return out
}

func newTarget(req *dialect.Request, obj map[string]any, op string) *target {
	u := &unstructured.Unstructured{Object: obj}
	gvk := schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind}
	if gvk.Kind == "" {
		gvk = u.GroupVersionKind()
	}
	return &target{obj: u, gvk: gvk, subresource: req.SubResource, operation: op, userInfo: req.UserInfo, background: req.Background}
}

// newDocument is the JSON context Kyverno gives a rule.
func newDocument(req *dialect.Request, obj, old map[string]any, op string) document {
	request := map[string]any{"operation": op, "namespace": req.Namespace}
	if obj != nil {
		request["object"] = jsonValue(obj)
	} else {
		request["object"] = nil
	}
	if old != nil {
		request["oldObject"] = jsonValue(old)
	} else {
		request["oldObject"] = nil
	}
	d := map[string]any{"request": request}
	if !req.Background {
		u := req.UserInfo
		groups := make([]any, len(u.Groups))
		for i, g := range u.Groups {
			groups[i] = g
		}
		request["userInfo"] = map[string]any{"username": u.Username, "uid": u.UID, "groups": groups}
		request["roles"], request["clusterRoles"] = []any{}, []any{}
		if ns, name, ok := serviceAccount(u.Username); ok {
			d["serviceAccountName"], d["serviceAccountNamespace"] = name, ns
		} else {
			d["serviceAccountName"], d["serviceAccountNamespace"] = "", ""
		}
	}
	return document{vars: d}
}

func serviceAccount(username string) (ns, name string, ok bool) {
	rest, found := strings.CutPrefix(username, "system:serviceaccount:")
	if !found {
		return "", "", false
	}
	ns, name, ok = strings.Cut(rest, ":")
	return ns, name, ok
}

// jsonValue is v as JSON decodes it (numbers float64), which Kyverno's
// JMESPath functions expect.
func jsonValue(v any) any {
	raw, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if json.Unmarshal(raw, &out) != nil {
		return v
	}
	return out
}

type status int

const (
	// statusNone: the rule had nothing to judge (a DELETE, an empty list).
	statusNone status = iota
	statusPass
	statusSkip
	statusFail
	statusError
)

func (s status) public() Status {
	switch s {
	case statusFail:
		return StatusFail
	case statusSkip:
		return StatusSkip
	case statusError:
		return StatusError
	}
	return StatusPass
}

type result struct {
	status  status
	message string
}

// level is what one level of a validate rule declares: the rule itself,
// or one foreach inside it.
type level struct {
	context       []contextEntry
	preconditions any
	deny          *deny
	pattern       any
	anyPattern    any
	foreach       []foreach
	elementScope  *bool
}

// judge is one rule's verdict, Kyverno's way: on an UPDATE an enforcing
// rule that the old object already failed is skipped (pre-existing
// violations are allowed unless the rule says allowExistingViolations:
// false).
func (r *rule) judge(doc docSource, req *dialect.Request, images *imageSource) (res result) {
	// Kyverno's matcher and JMESPath are not ours: if one panics on some
	// input, the rule could not be judged (an error, which denies under
	// failurePolicy Fail) and the request goes on.
	defer func() {
		if p := recover(); p != nil {
			res = result{statusError, fmt.Sprintf("validation error: rule %s execution error: %v", r.spec.Name, p)}
		}
	}()
	v := r.spec.Validate
	top := level{context: r.spec.Context, preconditions: r.spec.Preconditions, deny: v.Deny, pattern: v.Pattern, anyPattern: v.AnyPattern, foreach: v.Foreach}
	deleting := req.Operation == "DELETE"
	res = r.validate(doc, top, 0, req.Object, deleting)
	// In the background the object's state is judged, not a change to it.
	if res.status != statusFail || r.audit || req.Background || req.Operation != "UPDATE" || req.OldObject == nil || !r.existingViolationsAllowed {
		return res
	}
	if !r.matches(newTarget(req, req.OldObject, "CREATE")) {
		return res
	}
	// Kyverno judges the old object with the images of the new one: its
	// images are the request's, not the object's being judged.
	prior := r.validate(lazyDocument(func() document { return r.withImages(newDocument(req, req.OldObject, nil, "CREATE"), images) }), top, 0, req.OldObject, false)
	if prior.status == statusFail {
		return result{statusSkip, "skipping the rule evaluation as pre-existing violations are allowed"}
	}
	return res
}

// validate judges one level: context, preconditions, then deny, patterns
// or foreach, against resource (the foreach element when scoped to it).
func (r *rule) validate(doc docSource, l level, nesting int, resource map[string]any, deleting bool) result {
	for _, entry := range l.context {
		if err := loadVariable(doc, entry, deleting); err != nil {
			return result{statusError, fmt.Sprintf("failed to load context entry %q: %v", entry.Name, err)}
		}
	}
	if l.preconditions != nil {
		ok, msg, err := evaluateConditions(doc, l.preconditions, deleting)
		if err != nil {
			return result{statusError, "failed to evaluate preconditions: " + err.Error()}
		}
		if !ok {
			return result{statusSkip, strings.TrimSuffix("preconditions not met; "+msg, "; ")}
		}
	}
	switch {
	case l.deny != nil:
		return r.validateDeny(doc, l.deny, deleting)
	case l.pattern != nil || l.anyPattern != nil:
		if deleting && nesting == 0 {
			return result{}
		}
		return r.validatePatterns(doc, l, resource, deleting)
	case len(l.foreach) > 0:
		return r.validateForEach(doc, l.foreach, nesting, resource, deleting)
	}
	return result{}
}

func (r *rule) validateDeny(doc docSource, d *deny, deleting bool) result {
	denied, msg, err := evaluateConditions(doc, d.Conditions, deleting)
	if err != nil {
		return result{statusError, "failed to check deny conditions: " + err.Error()}
	}
	if !denied {
		return result{statusPass, ""}
	}
	text := r.spec.Validate.Message
	if text == "" && msg == "" {
		return result{statusFail, fmt.Sprintf("validation error: rule %s failed", r.spec.Name)}
	}
	if msg != "" {
		text = strings.TrimPrefix(text+"; "+msg, "; ")
	}
	s, err := substitute(doc, text, deleting)
	if err != nil {
		return result{statusFail, msg}
	}
	if str, ok := s.(string); ok {
		return result{statusFail, str}
	}
	return result{statusFail, "the produced message didn't resolve to a string, check your policy definition."}
}

func (r *rule) validatePatterns(doc docSource, l level, target map[string]any, deleting bool) result {
	if l.pattern != nil {
		pattern, err := substitute(doc, l.pattern, deleting)
		if err != nil {
			return result{statusError, r.substitutionError(err)}
		}
		err = validate.MatchPattern(discard, target, pattern)
		if err == nil {
			return result{statusPass, ""}
		}
		var pe *validate.PatternError
		switch {
		case errors.As(err, &pe) && pe.Skip:
			return result{statusSkip, pe.Error()}
		case errors.As(err, &pe) && pe.Path != "":
			return result{statusFail, r.failedAt(doc, err, pe.Path, deleting)}
		}
		return result{statusError, r.errorMessage(doc, err, deleting)}
	}
	substituted, err := substitute(doc, l.anyPattern, deleting)
	if err != nil {
		return result{statusError, r.substitutionError(err)}
	}
	alternatives, _ := substituted.([]any)
	var failed, skipped []string
	for i, pattern := range alternatives {
		err := validate.MatchPattern(discard, target, pattern)
		if err == nil {
			return result{statusPass, ""}
		}
		var pe *validate.PatternError
		switch {
		case errors.As(err, &pe) && pe.Skip:
			skipped = append(skipped, fmt.Sprintf("rule %s[%d] skipped: %s", r.spec.Name, i, err))
		case errors.As(err, &pe) && pe.Path == "":
			failed = append(failed, fmt.Sprintf("rule %s[%d] failed: %s", r.spec.Name, i, err))
		case errors.As(err, &pe):
			failed = append(failed, fmt.Sprintf("rule %s[%d] failed at path %s", r.spec.Name, i, pe.Path))
		}
	}
	if len(failed) == 0 && len(skipped) > 0 {
		return result{statusSkip, strings.Join(skipped, " ")}
	}
	if len(failed) == 0 {
		return result{statusPass, ""}
	}
	detail := strings.Join(failed, " ")
	msg, ok := r.message(doc, deleting)
	switch {
	case !ok:
		return result{statusFail, fmt.Sprintf("validation error: variables substitution error in rule %s execution error: %s", r.spec.Name, detail)}
	case msg == "":
		return result{statusFail, "validation error: " + detail}
	case strings.HasSuffix(msg, "."):
		return result{statusFail, fmt.Sprintf("validation error: %s %s", msg, detail)}
	}
	return result{statusFail, fmt.Sprintf("validation error: %s. %s", msg, detail)}
}

func (r *rule) validateForEach(doc docSource, list []foreach, nesting int, resource map[string]any, deleting bool) result {
	applied := 0
	var listErr error
	for i := range list {
		fe := &list[i]
		// A list is a JMESPath, not a variable: Kyverno does not read the
		// old object for request.object on DELETE here, so a list over
		// request.object finds nothing to judge.
		found, err := doc().query(strings.TrimSpace(fe.List))
		if err != nil {
			if strings.Contains(err.Error(), "Unknown key") {
				continue
			}
			listErr = err
			continue
		}
		// What is not a list is Kyverno's list of one element (a map
		// such as images.containers: the map itself); null is nothing.
		elements, ok := found.([]any)
		if !ok {
			if found == nil {
				continue
			}
			elements = []any{found}
		}
		l := level{context: fe.Context, preconditions: fe.Preconditions, deny: fe.Deny, pattern: fe.Pattern, anyPattern: fe.AnyPattern, foreach: fe.Foreach, elementScope: fe.ElementScope}
		res, n := r.validateElements(doc, l, elements, nesting, resource, deleting)
		if res.status != statusPass {
			return res
		}
		applied += n
	}
	if applied == 0 {
		if listErr != nil {
			return result{statusError, "failed to evaluate list: " + listErr.Error()}
		}
		return result{}
	}
	return result{statusPass, ""}
}

func (r *rule) validateElements(doc docSource, l level, elements []any, nesting int, resource map[string]any, deleting bool) (result, int) {
	applied := 0
	for i, element := range elements {
		if element == nil {
			continue
		}
		scoped := doc().clone()
		scoped.vars["element"], scoped.vars[fmt.Sprintf("element%d", nesting)] = element, element
		scoped.vars["elementIndex"], scoped.vars[fmt.Sprintf("elementIndex%d", nesting)] = float64(i), float64(i)
		scope := docSource(func() document { return scoped })
		target := resource
		m, isMap := element.(map[string]any)
		toElement := isMap
		if l.elementScope != nil {
			if *l.elementScope && !isMap {
				return result{statusError, fmt.Sprintf("failed to process foreach: cannot use elementScope=true foreach rules for elements that are not maps, expected type=map got type=%T", element)}, applied
			}
			toElement = *l.elementScope
		}
		if toElement {
			target = m
		}
		res := r.validate(scope, l, nesting+1, target, deleting)
		switch {
		case res.status == statusNone || res.status == statusSkip:
			continue
		case res.status == statusError && strings.Contains(res.message, "failed to evaluate preconditions"):
			continue
		case res.status != statusPass:
			return result{res.status, "validation failure: " + res.message}, applied
		}
		applied++
	}
	return result{statusPass, ""}, applied
}

// message is the rule's validate.message with its variables substituted;
// ok is false when they do not resolve.
func (r *rule) message(doc docSource, deleting bool) (string, bool) {
	if r.spec.Validate.Message == "" {
		return "", true
	}
	s, err := substitute(doc, r.spec.Validate.Message, deleting)
	if err != nil {
		return "", false
	}
	str, ok := s.(string)
	return str, ok
}

func (r *rule) failedAt(doc docSource, err error, path string, deleting bool) string {
	msg, ok := r.message(doc, deleting)
	switch {
	case !ok:
		return r.substitutionError(err)
	case msg == "":
		return fmt.Sprintf("validation error: rule %s failed at path %s", r.spec.Name, path)
	case !strings.HasSuffix(msg, "."):
		msg += "."
	}
	return fmt.Sprintf("validation error: %s rule %s failed at path %s", msg, r.spec.Name, path)
}

func (r *rule) errorMessage(doc docSource, err error, deleting bool) string {
	msg, ok := r.message(doc, deleting)
	switch {
	case !ok:
		return r.substitutionError(err)
	case msg == "":
		return fmt.Sprintf("validation error: rule %s execution error: %s", r.spec.Name, err)
	case !strings.HasSuffix(msg, "."):
		msg += "."
	}
	return fmt.Sprintf("validation error: %s rule %s execution error: %s", msg, r.spec.Name, err)
}

func (r *rule) substitutionError(err error) string {
	return fmt.Sprintf("validation error: variables substitution error in rule %s execution error: %s", r.spec.Name, err)
}

// loadVariable adds a `variable` context entry with Kyverno's semantics:
// its value (variables substituted), or its JMESPath over the context, or
// the JMESPath applied to the value when both are set; the default when
// the query fails or finds nothing.
func loadVariable(doc docSource, entry contextEntry, deleting bool) error {
	v := entry.Variable
	path := ""
	if v.JMESPath != "" {
		s, err := substitute(doc, v.JMESPath, deleting)
		if err != nil {
			return fmt.Errorf("failed to substitute variables in context entry %s %s: %v", entry.Name, v.JMESPath, err)
		}
		var ok bool
		if path, ok = s.(string); !ok {
			return fmt.Errorf("jmespath value must be a string %s %s", entry.Name, v.JMESPath)
		}
	}
	var def any
	if v.Default != nil {
		var err error
		if def, err = substitute(doc, v.Default, deleting); err != nil {
			return fmt.Errorf("failed to substitute variables in context entry %s default: %v", entry.Name, err)
		}
	}
	output := def
	switch {
	case v.Value != nil:
		value, err := substitute(doc, v.Value, deleting)
		if err != nil {
			return fmt.Errorf("failed to substitute variables in context entry %s value: %v", entry.Name, err)
		}
		if path == "" {
			output = value
			break
		}
		if found, err := search(path, value); err == nil {
			output = found
		} else if def == nil {
			return fmt.Errorf("failed to apply jmespath %s to variable %v: %v", path, value, err)
		}
	case path != "":
		if found, err := doc().query(path); err == nil {
			if found != nil {
				output = found
			}
		} else if def == nil {
			return fmt.Errorf("failed to apply jmespath %s: %v", path, err)
		}
	}
	if output == nil {
		return fmt.Errorf("failed to add context entry for variable %s since it evaluated to nil", entry.Name)
	}
	setPath(doc().vars, entry.Name, jsonValue(output))
	return nil
}

// setPath sets a dotted name (a.b.c) in doc, as Kyverno's context does.
func setPath(doc map[string]any, name string, value any) {
	parts := strings.Split(name, ".")
	m := doc
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
		} else {
			next = cloneMap(next)
		}
		m[p] = next
		m = next
	}
	m[parts[len(parts)-1]] = value
}

func cloneMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Verdicts is what each rule that matches req made of it, for qnctl eval
// --explain.
func (p *Policy) Verdicts(ctx context.Context, req *dialect.Request) []dialect.Verdict {
	lines := map[string]int{}
	for _, r := range p.rules {
		lines[r.spec.Name] = r.line
	}
	var out []dialect.Verdict
	for _, r := range p.Results(ctx, req) {
		out = append(out, dialect.Verdict{Rule: r.Rule, Status: string(r.Status), Message: r.Message, Warn: r.Audit, Line: lines[r.Rule]})
	}
	return out
}
