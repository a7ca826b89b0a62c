package admissionpolicy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	celtypes "github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	apiservercel "k8s.io/apiserver/pkg/cel"

	"github.com/quantumnode/qn-admission/policies/dialect"
)

// Policy is one ValidatingAdmissionPolicy with the bindings of its
// directory, or one Kyverno ValidatingPolicy. It is immutable and safe
// for concurrent use.
type Policy struct {
	name, kind, file string
	line             int
	// constraints are the policy's matchConstraints, defaulted as the API
	// server defaults them.
	constraints *selection
	failure     admissionregistrationv1.FailurePolicyType
	paramKind   *admissionregistrationv1.ParamKind
	program     *program
	bindings    []*binding
	rules       []dialect.Rule
	// namespace is a NamespacedValidatingPolicy's: it judges the requests
	// of that namespace only.
	namespace string
	// admission and background say when a Kyverno ValidatingPolicy is
	// judged (spec.evaluation); always both for a ValidatingAdmissionPolicy.
	admission, background bool
	// autogen are a ValidatingPolicy's variants for Pod controllers
	// (autogen.go), tried when the policy's own constraints leave a
	// request out; their findings are the policy's.
	autogen []*variant
}

// binding is one ValidatingAdmissionPolicyBinding of the policy, or the
// role table standing in for one (name "").
type binding struct {
	name     string
	match    *selection
	paramRef *admissionregistrationv1.ParamRef
	actions  []admissionregistrationv1.ValidationAction
	params   *paramStore
}

// Name implements dialect.Policy.
func (p *Policy) Name() string { return p.name }

// Kind implements dialect.Policy.
func (p *Policy) Kind() string { return p.kind }

// File implements dialect.Policy.
func (p *Policy) File() string { return p.file }

// Line implements dialect.Policy.
func (p *Policy) Line() int { return p.line }

// Namespace is a NamespacedValidatingPolicy's namespace; "" for others.
func (p *Policy) Namespace() string { return p.namespace }

// Rules implements dialect.Policy: one rule per validation.
func (p *Policy) Rules() []dialect.Rule { return p.rules }

// Evaluate implements dialect.Policy, as the API server's validating
// admission plugin dispatches a policy and its bindings: match the
// policy, then each binding; collect the binding's parameters; run the
// match conditions, validations, message expressions and audit
// annotations in the request's CEL cost budget; and act on a failed
// validation as the binding's validationActions say.
func (p *Policy) Evaluate(ctx context.Context, req *dialect.Request) []dialect.Finding {
	o := &outcome{p: p, background: req.Background}
	p.dispatch(ctx, req, o.configError, func(b *binding, res *result) { o.judge(ctx, b, res) })
	return o.findings
}

// dispatch matches the policy and each binding to req and calls run with
// each binding's validation of each of its parameters; a policy or
// binding that cannot be matched goes to configErr. It says whether the
// policy's match constraints take req in.
func (p *Policy) dispatch(ctx context.Context, req *dialect.Request, configErr func(error), run func(*binding, *result)) bool {
	if req.Background && !p.background || !req.Background && !p.admission {
		return false
	}
	if p.namespace != "" && req.Namespace != p.namespace {
		return false
	}
	attrs := attributes(req)
	prog, ok, err := p.match(attrs)
	if !ok && err == nil && req.Background {
		// The audit judges a stored object as an UPDATE of itself; a
		// policy of CREATE only judges it as its creation, as the
		// pattern policies do.
		created := *req
		created.Operation, created.OldObject = string(admission.Create), nil
		attrs = attributes(&created)
		prog, ok, err = p.match(attrs)
	}
	if err != nil {
		configErr(fmt.Errorf("failed to configure policy: %w", err))
		return true
	}
	if !ok {
		return false
	}
	gvk := attrs.GetKind()
	va := &admission.VersionedAttributes{Attributes: attrs, VersionedObject: attrs.GetObject(), VersionedOldObject: attrs.GetOldObject(), VersionedKind: gvk}
	var ns *corev1.Namespace
	if n := attrs.GetNamespace(); n != "" && !(gvk.Group == "" && gvk.Kind == "Namespace") {
		// All the webhook knows of the namespace: its name, and the label
		// the API server sets from it. The policy was refused at load if
		// it reads more.
		ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{corev1.LabelMetadataName: n}}}
	}
	for _, b := range p.bindings {
		if b.match != nil {
			ok, err := b.match.matches(attrs)
			if err != nil {
				configErr(fmt.Errorf("failed to configure binding: %w", err))
				continue
			}
			if !ok {
				continue
			}
		}
		params, err := b.collect(p.paramKind, attrs.GetNamespace())
		if err != nil {
			configErr(fmt.Errorf("failed to configure binding: %w", err))
			continue
		}
		for _, param := range params {
			run(b, p.validate(ctx, prog, attrs.GetResource(), va, param, ns))
		}
	}
	return true
}

// match is the program that judges attrs: the policy's when its
// constraints take attrs in, else that of the autogen variant whose
// constraints do (the policy's resources and its variants' are apart).
func (p *Policy) match(attrs admission.Attributes) (*program, bool, error) {
	ok, err := p.constraints.matches(attrs)
	if ok || err != nil {
		return p.program, ok, err
	}
	for _, v := range p.autogen {
		if ok, err := v.constraints.matches(attrs); ok || err != nil {
			return v.program, ok, err
		}
	}
	return nil, false, nil
}

// outcome gathers a request's findings, each once.
type outcome struct {
	p          *Policy
	background bool
	findings   []dialect.Finding
	seen       map[dialect.Finding]bool
}

func (o *outcome) add(f dialect.Finding) {
	if o.seen == nil {
		o.seen = map[dialect.Finding]bool{}
	}
	if o.seen[f] {
		return
	}
	o.seen[f] = true
	o.findings = append(o.findings, f)
}

// policyError is an error that keeps the whole policy from being judged:
// one finding at admission; in the audit, one for each rule it kept from
// being judged, so each is reported.
func (o *outcome) policyError(msg string, warn bool) {
	if !o.background || len(o.p.rules) == 0 {
		o.add(dialect.Finding{Message: msg, Error: true, Warn: warn})
		return
	}
	for _, r := range o.p.rules {
		o.add(dialect.Finding{Rule: r.Name, Message: msg, Error: true, Warn: warn})
	}
}

// configError is a policy or binding the request cannot be judged by:
// a denial under failurePolicy Fail, nothing under Ignore, whatever the
// binding's actions (as the API server's dispatcher does).
func (o *outcome) configError(err error) {
	if o.p.failure == admissionregistrationv1.Ignore {
		return
	}
	o.policyError(err.Error(), false)
}

// judge turns one validation run into findings by the binding's actions.
func (o *outcome) judge(ctx context.Context, b *binding, res *result) {
	act := func(f dialect.Finding) {
		deny, warn, audit := false, false, false
		for _, a := range b.actions {
			switch a {
			case admissionregistrationv1.Deny:
				deny = true
			case admissionregistrationv1.Warn:
				warn = true
			case admissionregistrationv1.Audit:
				audit = true
			}
		}
		switch {
		case deny, audit && o.background:
			// Audit records the failure where failures are recorded: the
			// audit's report, not the admission response.
			f.Warn = false
		case warn:
			f.Warn = true
		default:
			return
		}
		if f.Rule == "" {
			o.policyError(f.Message, f.Warn)
			return
		}
		o.add(f)
	}
	for _, d := range res.decisions {
		switch {
		case d.admit:
		case d.always:
			o.policyError(d.message, false)
		case d.err:
			act(dialect.Finding{Rule: d.rule, Message: d.message, Error: true})
		default:
			act(dialect.Finding{Rule: d.rule, Message: d.message})
		}
	}
}

// decision is one validation's answer, as the plugin's PolicyDecision.
type decision struct {
	rule  string // "" for an error of the whole policy
	admit bool
	err   bool
	// always denies whatever the binding's actions (an audit annotation
	// that cannot be evaluated).
	always  bool
	message string
	reason  metav1.StatusReason
}

type result struct {
	decisions []decision
	// unmatched says the match conditions left the request out (or could
	// not be evaluated under failurePolicy Ignore).
	unmatched bool
	// ignored is an error of the whole run that failurePolicy Ignore
	// lets pass.
	ignored string
}

// validate is the validating admission plugin's validator.Validate for
// one binding and parameter, by prog (the policy's or a variant's): the
// decisions of the match conditions, the validations with their
// messages, and the audit annotations' errors.
func (p *Policy) validate(ctx context.Context, prog *program, gvr schema.GroupVersionResource, va *admission.VersionedAttributes, param runtime.Object, ns *corev1.Namespace) *result {
	failed := func(msg string) *result {
		if p.failure == admissionregistrationv1.Ignore {
			return &result{ignored: msg}
		}
		return &result{decisions: []decision{{err: true, message: msg}}}
	}
	if prog.matcher != nil {
		m := prog.matcher.Match(ctx, va, param, nil)
		if m.Error != nil {
			return failed(m.Error.Error())
		}
		if !m.Matches {
			return &result{unmatched: true}
		}
	}
	optional := plugincel.OptionalVariableBindings{VersionedParams: param}
	request := plugincel.CreateAdmissionRequest(va.Attributes, metav1.GroupVersionResource(gvr), metav1.GroupVersionKind(va.VersionedKind))
	nsObject := plugincel.CreateNamespaceObject(ns)
	evals, remaining, err := prog.validationFilter.ForInput(ctx, va, request, optional, nsObject, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return failed(err.Error())
	}
	var messages []plugincel.EvaluationResult
	var msgErr error
	// The API server evaluates the message expressions for every request;
	// only a failed validation reads them. Evaluating them then alone
	// halves the cost of an admitted request; what differs is that a
	// message expression running out of what the validations left of the
	// request's cost budget cannot fail an admitted request here.
	if prog.messageFilter != nil && slices.ContainsFunc(evals, func(e plugincel.EvaluationResult) bool { return e.Error == nil && e.EvalResult != celtypes.True }) {
		messages, _, msgErr = prog.messageFilter.ForInput(ctx, va, request, optional, nsObject, remaining)
	}
	out := &result{}
	for i, ev := range evals {
		d := decision{rule: ruleName(i)}
		v := prog.validations[i]
		switch {
		case ev.Error != nil:
			d.err, d.message = true, ev.Error.Error()
			if p.failure == admissionregistrationv1.Ignore {
				d.admit = true
			}
		case errors.Is(msgErr, apiservercel.ErrInternal) || errors.Is(msgErr, apiservercel.ErrOutOfBudget):
			d.err, d.message = true, fmt.Sprintf("failed messageExpression: %s", msgErr)
			if p.failure == admissionregistrationv1.Ignore {
				d.admit = true
			}
		case ev.EvalResult != celtypes.True:
			d.reason = metav1.StatusReasonInvalid
			if v.reason != nil {
				d.reason = *v.reason
			}
			d.message = failureMessage(v, messages, i)
		default:
			d.admit = true
		}
		out.decisions = append(out.decisions, d)
	}
	if prog.auditFilter == nil {
		return out
	}
	audits, _, err := prog.auditFilter.ForInput(ctx, va, request, optional, nsObject, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return failed(err.Error())
	}
	for _, a := range audits {
		if a.ExpressionAccessor == nil || p.failure == admissionregistrationv1.Ignore {
			continue
		}
		// An audit annotation's value is dropped (the webhook's decision
		// log has no place for it); one that cannot be evaluated refuses
		// under failurePolicy Fail whatever the binding's actions, as in
		// the API server.
		switch {
		case a.Error != nil:
			out.decisions = append(out.decisions, decision{err: true, always: true, message: a.Error.Error()})
		case a.EvalResult.Type() != celtypes.StringType && a.EvalResult.Type() != celtypes.NullType:
			out.decisions = append(out.decisions, decision{err: true, always: true, message: fmt.Sprintf("valueExpression '%v' resulted in unsupported return type: %v. "+
				"Return type must be either string or null.", a.ExpressionAccessor.GetExpression(), a.EvalResult.Type())})
		}
	}
	return out
}

// failureMessage is what the API server says of a failed validation: its
// messageExpression's value, else its message, else the expression.
func failureMessage(v *validationCondition, messages []plugincel.EvaluationResult, i int) string {
	var message string
	if i < len(messages) && messages[i].Error == nil && messages[i].EvalResult != nil {
		if s, ok := messages[i].EvalResult.Value().(string); ok {
			s = strings.TrimSpace(s)
			if len(s) <= celconfig.MaxEvaluatedMessageExpressionSizeBytes && !strings.ContainsAny(s, "\n") {
				message = s
			}
		}
	}
	if message == "" {
		message = strings.TrimSpace(v.message)
	}
	if message == "" {
		message = fmt.Sprintf("failed expression: %v", strings.TrimSpace(v.expression))
	}
	return message
}

// attributes is the request as the API server's admission plugins see it.
func attributes(req *dialect.Request) admission.Attributes {
	var obj, old runtime.Object
	if req.Object != nil {
		obj = &unstructured.Unstructured{Object: req.Object}
	}
	if req.OldObject != nil {
		old = &unstructured.Unstructured{Object: req.OldObject}
	}
	gvk := schema.GroupVersionKind(req.Kind)
	gvr := schema.GroupVersionResource(req.Resource)
	var u user.Info
	if !req.Background {
		extra := map[string][]string{}
		for k, v := range req.UserInfo.Extra {
			extra[k] = v
		}
		u = &user.DefaultInfo{Name: req.UserInfo.Username, UID: req.UserInfo.UID, Groups: req.UserInfo.Groups, Extra: extra}
	}
	return admission.NewAttributesRecord(obj, old, gvk, req.Namespace, req.Name, gvr, req.SubResource, admission.Operation(req.Operation), nil, req.DryRun, u)
}

// selection is a MatchResources as the API server's matcher reads it:
// the namespace and object selectors and the resource rules.
type selection struct {
	namespaceSelector, objectSelector labels.Selector
	resourceRules, excludeRules       []admissionregistrationv1.NamedRuleWithOperations
}

// matches mirrors k8s.io/apiserver's policy matching: selectors first,
// then the excluded rules, then the rules (none: every resource).
// Equivalent resources (another version of the same kind) are not looked
// up: the webhook has no discovery; a rule names the version it judges,
// or "*".
func (s *selection) matches(attr admission.Attributes) (bool, error) {
	if !s.namespaceMatches(attr) || !s.objectMatches(attr) {
		return false, nil
	}
	if matchesRules(s.excludeRules, attr) {
		return false, nil
	}
	if len(s.resourceRules) == 0 {
		return true, nil
	}
	return matchesRules(s.resourceRules, attr), nil
}

func (s *selection) namespaceMatches(attr admission.Attributes) bool {
	ns := attr.GetNamespace()
	if ns == "" && attr.GetResource().Resource != "namespaces" {
		return true
	}
	if s.namespaceSelector.Empty() {
		return true
	}
	set := labels.Set{corev1.LabelMetadataName: ns}
	if attr.GetResource().Resource == "namespaces" {
		set = labels.Set{corev1.LabelMetadataName: attr.GetName()}
	}
	return s.namespaceSelector.Matches(set)
}

func (s *selection) objectMatches(attr admission.Attributes) bool {
	if s.objectSelector.Empty() {
		return true
	}
	return objectLabelsMatch(attr.GetObject(), s.objectSelector) || objectLabelsMatch(attr.GetOldObject(), s.objectSelector)
}

func objectLabelsMatch(obj runtime.Object, sel labels.Selector) bool {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u == nil {
		return false
	}
	return sel.Matches(labels.Set(u.GetLabels()))
}

func matchesRules(named []admissionregistrationv1.NamedRuleWithOperations, attr admission.Attributes) bool {
	for _, r := range named {
		m := rules.Matcher{Rule: r.RuleWithOperations, Attr: attr}
		if !m.Matches() {
			continue
		}
		if len(r.ResourceNames) == 0 {
			return true
		}
		for _, n := range r.ResourceNames {
			if n == attr.GetName() {
				return true
			}
		}
	}
	return false
}
