// Package admissionpolicy reads and judges the CEL policies users keep for
// the API server and for Kyverno: Kubernetes ValidatingAdmissionPolicies
// with their ValidatingAdmissionPolicyBindings and parameters, and Kyverno
// ValidatingPolicies and NamespacedValidatingPolicies (the
// ValidatingAdmissionPolicy subset with Kyverno's field names; one of
// Pods judges Pod controllers too, as Kyverno's autogen variants do).
// Expressions compile and run in k8s.io/apiserver's own CEL
// environment and admission libraries, so a policy means here what it
// means in the API server; what needs a cluster (the authorizer, a
// namespace's labels, Kyverno's resource and http libraries) is refused
// at load naming the file, line and reason, never skipped.
package admissionpolicy

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/quantumnode/qn-admission/internal/problem"
	"github.com/quantumnode/qn-admission/policies/dialect"
)

// The kinds a directory may hold.
const (
	KindPolicy           = "ValidatingAdmissionPolicy"
	KindBinding          = "ValidatingAdmissionPolicyBinding"
	KindValidatingPolicy = "ValidatingPolicy"
	// KindNamespacedValidatingPolicy is a ValidatingPolicy that judges
	// the requests of its own namespace only.
	KindNamespacedValidatingPolicy = "NamespacedValidatingPolicy"
)

var (
	admissionVersions = []string{"admissionregistration.k8s.io/v1", "admissionregistration.k8s.io/v1beta1"}
	kyvernoVersions   = []string{"policies.kyverno.io/v1", "policies.kyverno.io/v1beta1", "policies.kyverno.io/v1alpha1"}
)

// Reader reads ValidatingAdmissionPolicies, their bindings and Kyverno
// ValidatingPolicies.
type Reader struct{}

// Kinds implements dialect.Reader.
func (Reader) Kinds() []string {
	var out []string
	for _, v := range admissionVersions {
		out = append(out, dialect.Key(v, KindPolicy), dialect.Key(v, KindBinding))
	}
	for _, v := range kyvernoVersions {
		out = append(out, dialect.Key(v, KindValidatingPolicy))
		if v != "policies.kyverno.io/v1alpha1" {
			out = append(out, dialect.Key(v, KindNamespacedValidatingPolicy))
		}
	}
	return out
}

// Read implements dialect.Reader, for a directory without parameters.
func (r Reader) Read(docs []dialect.Document) ([]dialect.Policy, []*problem.Problem) {
	return r.ReadWithParams(docs, nil)
}

// ReadWithParams implements dialect.ParamsReader: docs are the policies
// and bindings, others the directory's other documents, among which the
// parameters a binding's paramRef names.
func (Reader) ReadWithParams(docs, others []dialect.Document) ([]dialect.Policy, []*problem.Problem) {
	var problems []*problem.Problem
	type boundDoc struct {
		doc dialect.Document
		b   *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	}
	bindings := map[string][]boundDoc{}
	var vaps []dialect.Document
	var vps []dialect.Document
	for _, d := range docs {
		switch d.Kind {
		case KindPolicy:
			vaps = append(vaps, d)
		case KindValidatingPolicy, KindNamespacedValidatingPolicy:
			vps = append(vps, d)
		case KindBinding:
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			if ps := decode(d, &b); len(ps) > 0 {
				problems = append(problems, ps...)
				continue
			}
			c := &checker{doc: d}
			c.checkBinding(&b)
			if len(c.problems) > 0 {
				problems = append(problems, c.problems...)
				continue
			}
			bindings[b.Spec.PolicyName] = append(bindings[b.Spec.PolicyName], boundDoc{d, &b})
		}
	}
	var out []*Policy
	names := map[string]*Policy{}
	for _, d := range vaps {
		var v admissionregistrationv1.ValidatingAdmissionPolicy
		if ps := decode(d, &v); len(ps) > 0 {
			problems = append(problems, ps...)
			continue
		}
		c := &checker{doc: d}
		p := c.policy(v.Name, KindPolicy, &v.Spec, true)
		var store *paramStore
		if p != nil && v.Spec.ParamKind != nil {
			s, err := newParamStore(v.Spec.ParamKind, others)
			if err != nil {
				c.at([]any{"spec", "paramKind"}, "spec.paramKind", "parameters: %v", err)
			}
			store = s
		}
		bound := bindings[v.Name]
		delete(bindings, v.Name)
		if p != nil {
			sort.Slice(bound, func(i, j int) bool { return bound[i].b.Name < bound[j].b.Name })
			for _, bd := range bound {
				bc := &checker{doc: bd.doc}
				b := &binding{name: bd.b.Name, paramRef: bd.b.Spec.ParamRef, actions: bd.b.Spec.ValidationActions, params: store}
				if mr := bd.b.Spec.MatchResources; mr != nil {
					b.match = bc.selection([]any{"spec", "matchResources"}, mr, false)
				}
				if b.paramRef != nil && v.Spec.ParamKind != nil && b.paramRef.Name != "" && store != nil && !store.has(b.paramRef.Name) {
					bc.at([]any{"spec", "paramRef", "name"}, "spec.paramRef.name", "no %s %s named %q in the policy directory", v.Spec.ParamKind.APIVersion, v.Spec.ParamKind.Kind, b.paramRef.Name)
					bc.hint("put the parameters in a *.yaml file beside the policy")
					if b.paramRef.ParameterNotFoundAction != nil && *b.paramRef.ParameterNotFoundAction == admissionregistrationv1.AllowAction {
						// Allowed by the binding: the API server judges
						// nothing then, and so do we; not an error.
						bc.problems = nil
					}
				}
				c.problems = append(c.problems, bc.problems...)
				p.bindings = append(p.bindings, b)
			}
			if len(bound) == 0 {
				// The role table is the binding: a policy a role lists
				// with no binding in the directory is enforced, without
				// parameters.
				p.bindings = []*binding{{actions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
			}
			p.paramKind = v.Spec.ParamKind
		}
		if len(c.problems) > 0 {
			problems = append(problems, c.problems...)
			continue
		}
		out = append(out, p)
	}
	for _, d := range vps {
		var v validatingPolicy
		if ps := decode(d, &v); len(ps) > 0 {
			problems = append(problems, ps...)
			continue
		}
		c := &checker{doc: d}
		p := c.validatingPolicy(&v, d.Kind)
		if len(c.problems) > 0 {
			problems = append(problems, c.problems...)
			continue
		}
		out = append(out, p)
	}
	for name, bs := range bindings {
		for _, bd := range bs {
			problems = append(problems, &problem.Problem{File: bd.doc.File, Line: lineAt(bd.doc.Node, "spec", "policyName"), Path: "spec.policyName",
				Message: fmt.Sprintf("binds %q, which is no ValidatingAdmissionPolicy of the directory", name), Hint: "name a ValidatingAdmissionPolicy by its metadata.name"})
		}
	}
	var pols []dialect.Policy
	for _, p := range out {
		if prev, dup := names[p.name]; dup {
			problems = append(problems, &problem.Problem{File: p.file, Line: p.line, Path: "metadata.name",
				Message: fmt.Sprintf("%s %q is also declared at %s:%d (%s)", p.kind, p.name, prev.file, prev.line, prev.kind), Hint: "names must be unique: roles.yaml lists policies by name"})
			continue
		}
		names[p.name] = p
		pols = append(pols, p)
	}
	sort.Slice(problems, func(i, j int) bool {
		if problems[i].File != problems[j].File {
			return problems[i].File < problems[j].File
		}
		return problems[i].Line < problems[j].Line
	})
	return pols, problems
}

func (s *paramStore) has(name string) bool {
	for _, u := range s.objects {
		if u.GetName() == name {
			return true
		}
	}
	return false
}

// policy checks and compiles the spec of a ValidatingAdmissionPolicy (or
// of a ValidatingPolicy, converted); nil when it cannot be used.
func (c *checker) policy(name, kind string, spec *admissionregistrationv1.ValidatingAdmissionPolicySpec, _ bool) *Policy {
	if name == "" {
		c.at([]any{"metadata"}, "metadata.name", "a policy needs a name: roles.yaml lists policies by metadata.name")
	}
	constraints := c.selection([]any{"spec", "matchConstraints"}, spec.MatchConstraints, true)
	prog := c.compile(spec, name)
	if prog == nil || constraints == nil || name == "" {
		return nil
	}
	failure := admissionregistrationv1.Fail
	if spec.FailurePolicy != nil {
		failure = *spec.FailurePolicy
	}
	rules := prog.rules
	if !writes(spec.MatchConstraints) {
		// A policy of DELETE or CONNECT only judges no stored object.
		rules = make([]dialect.Rule, len(prog.rules))
		for i, r := range prog.rules {
			r.RequesterReads = append(slices.Clone(r.RequesterReads), "DELETE or CONNECT requests only (matchConstraints.resourceRules)")
			rules[i] = r
		}
	}
	return &Policy{name: name, kind: kind, file: c.doc.File, line: c.doc.Line, constraints: constraints, failure: failure,
		program: prog, rules: rules, admission: true, background: true}
}

// validatingPolicy checks a Kyverno ValidatingPolicy and compiles it as
// the ValidatingAdmissionPolicy it reads as: the role table binds it, with
// its own validationActions.
func (c *checker) validatingPolicy(v *validatingPolicy, kind string) *Policy {
	s := &v.Spec
	if kind == KindNamespacedValidatingPolicy && v.Namespace == "" {
		c.at([]any{"metadata"}, "metadata.namespace", "a NamespacedValidatingPolicy judges the requests of its namespace: set metadata.namespace")
	}
	if e := s.Evaluation; e != nil && e.Mode != "" && e.Mode != "Kubernetes" {
		c.at([]any{"spec", "evaluation", "mode"}, "spec.evaluation.mode", "mode %s judges JSON documents, not admission requests: not supported offline", e.Mode)
		c.hint("qn-admission judges Kubernetes admission requests (mode: Kubernetes)")
	}
	actions := s.ValidationActions
	if len(actions) == 0 {
		actions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	}
	c.checkActions([]any{"spec", "validationActions"}, "spec.validationActions", actions)
	spec := &admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: s.MatchConstraints, Validations: s.Validations, FailurePolicy: s.FailurePolicy,
		AuditAnnotations: s.AuditAnnotations, MatchConditions: s.MatchConditions, Variables: s.Variables,
	}
	p := c.policy(v.Name, kind, spec, false)
	if p == nil || len(c.problems) > 0 {
		return nil
	}
	// Compiled only once the policy compiles: a variant's problems would
	// repeat the policy's.
	if p.autogen = c.autogen(s, v.Name); len(c.problems) > 0 {
		return nil
	}
	if kind == KindNamespacedValidatingPolicy {
		p.namespace = v.Namespace
	}
	p.bindings = []*binding{{actions: actions}}
	if e := s.Evaluation; e != nil {
		if e.Admission != nil && e.Admission.Enabled != nil {
			p.admission = *e.Admission.Enabled
		}
		if e.Background != nil && e.Background.Enabled != nil {
			p.background = *e.Background.Enabled
		}
	}
	if !p.background {
		// The audit skips every rule of a policy Kyverno would not run in
		// the background, and says why.
		rules := make([]dialect.Rule, len(p.rules))
		for i, r := range p.rules {
			r.RequesterReads = append(slices.Clone(r.RequesterReads), "the admission request only (spec.evaluation.background.enabled: false)")
			rules[i] = r
		}
		p.rules = rules
	}
	return p
}

// writes says the policy's rules judge CREATE or UPDATE.
func writes(mr *admissionregistrationv1.MatchResources) bool {
	for _, r := range mr.ResourceRules {
		for _, op := range r.Operations {
			if op == admissionregistrationv1.Create || op == admissionregistrationv1.Update || op == admissionregistrationv1.OperationAll {
				return true
			}
		}
	}
	return false
}

func (c *checker) checkBinding(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	if b.Name == "" {
		c.at([]any{"metadata"}, "metadata.name", "a binding needs a name")
	}
	if b.Spec.PolicyName == "" {
		c.at([]any{"spec"}, "spec.policyName", "a binding names the policy it binds")
	}
	if len(b.Spec.ValidationActions) == 0 {
		c.at([]any{"spec"}, "spec.validationActions", "a binding needs validationActions")
		c.hint("Deny, Warn or Audit; Deny and Warn not together")
	}
	c.checkActions([]any{"spec", "validationActions"}, "spec.validationActions", b.Spec.ValidationActions)
	if r := b.Spec.ParamRef; r != nil {
		rp := []any{"spec", "paramRef"}
		if r.Name != "" && r.Selector != nil {
			c.at(rp, "spec.paramRef", "name and selector are mutually exclusive")
		}
		if r.Name == "" && r.Selector == nil {
			c.at(rp, "spec.paramRef", "one of name or selector must be set")
		}
		if r.ParameterNotFoundAction == nil {
			c.at(rp, "spec.paramRef.parameterNotFoundAction", "parameterNotFoundAction is required")
			c.hint("Allow or Deny")
		} else if a := *r.ParameterNotFoundAction; a != admissionregistrationv1.AllowAction && a != admissionregistrationv1.DenyAction {
			c.at(with(rp, "parameterNotFoundAction"), "spec.paramRef.parameterNotFoundAction", "%q is not an action", a)
		}
		if r.Selector != nil {
			if _, err := metav1.LabelSelectorAsSelector(r.Selector); err != nil {
				c.at(with(rp, "selector"), "spec.paramRef.selector", "%v", err)
			}
		}
	}
}

func (c *checker) checkActions(path []any, f string, actions []admissionregistrationv1.ValidationAction) {
	seen := map[admissionregistrationv1.ValidationAction]bool{}
	for i, a := range actions {
		switch a {
		case admissionregistrationv1.Deny, admissionregistrationv1.Warn, admissionregistrationv1.Audit:
		default:
			c.at(with(path, i), f, "%q is not a validation action", a)
			c.hint("Deny, Warn or Audit")
		}
		if seen[a] {
			c.at(with(path, i), f, "%q is listed twice", a)
		}
		seen[a] = true
	}
	if seen[admissionregistrationv1.Deny] && seen[admissionregistrationv1.Warn] {
		c.at(path, f, "Deny and Warn may not be used together")
	}
}

var operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update,
	admissionregistrationv1.Delete, admissionregistrationv1.Connect, admissionregistrationv1.OperationAll}

// selection checks a matchConstraints or a binding's matchResources and
// defaults it as the API server does; nil when it cannot be used.
func (c *checker) selection(path []any, mr *admissionregistrationv1.MatchResources, policy bool) *selection {
	f := field(path...)
	if mr == nil {
		if policy {
			c.at([]any{"spec"}, f, "matchConstraints is required: it says which requests the policy judges")
			c.hint("e.g. resourceRules: [{apiGroups: [qn.dev], apiVersions: [\"*\"], resources: [quantumnodes], operations: [CREATE, UPDATE]}]")
		}
		return nil
	}
	before := len(c.problems)
	s := &selection{namespaceSelector: labels.Everything(), objectSelector: labels.Everything()}
	if mr.NamespaceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(mr.NamespaceSelector)
		if err != nil {
			c.at(with(path, "namespaceSelector"), f+".namespaceSelector", "%v", err)
		} else {
			s.namespaceSelector = sel
			var keys []string
			for k := range mr.NamespaceSelector.MatchLabels {
				keys = append(keys, k)
			}
			for _, e := range mr.NamespaceSelector.MatchExpressions {
				keys = append(keys, e.Key)
			}
			for _, k := range keys {
				if k != corev1.LabelMetadataName {
					c.at(with(path, "namespaceSelector"), f+".namespaceSelector", "selects namespaces by label %q: qn-admission is told a request's namespace name, not the namespace's labels", k)
					c.hint("select namespaces by name with the label kubernetes.io/metadata.name, which the API server sets from it")
					break
				}
			}
		}
	}
	if mr.ObjectSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(mr.ObjectSelector)
		if err != nil {
			c.at(with(path, "objectSelector"), f+".objectSelector", "%v", err)
		} else {
			s.objectSelector = sel
		}
	}
	if policy && len(mr.ResourceRules) == 0 {
		c.at(path, f+".resourceRules", "resourceRules are required: they say which resources the policy judges")
	}
	s.resourceRules = c.rules(with(path, "resourceRules"), f+".resourceRules", mr.ResourceRules)
	s.excludeRules = c.rules(with(path, "excludeResourceRules"), f+".excludeResourceRules", mr.ExcludeResourceRules)
	if len(c.problems) > before {
		return nil
	}
	return s
}

func (c *checker) rules(path []any, f string, in []admissionregistrationv1.NamedRuleWithOperations) []admissionregistrationv1.NamedRuleWithOperations {
	out := make([]admissionregistrationv1.NamedRuleWithOperations, len(in))
	for i, r := range in {
		rp := with(path, i)
		rf := fmt.Sprintf("%s[%d]", f, i)
		for what, list := range map[string][]string{"apiGroups": r.APIGroups, "apiVersions": r.APIVersions, "resources": r.Resources} {
			if len(list) == 0 {
				c.at(rp, rf+"."+what, "%s is required (\"*\" for all)", what)
			}
		}
		if len(r.Operations) == 0 {
			c.at(rp, rf+".operations", "operations are required")
		}
		for _, op := range r.Operations {
			if !slices.Contains(operations, op) {
				c.at(with(rp, "operations"), rf+".operations", "%q is not an operation", op)
				c.hint("CREATE, UPDATE, DELETE, CONNECT or *")
			}
		}
		if r.Scope != nil && !slices.Contains([]admissionregistrationv1.ScopeType{admissionregistrationv1.ClusterScope, admissionregistrationv1.NamespacedScope, admissionregistrationv1.AllScopes}, *r.Scope) {
			c.at(with(rp, "scope"), rf+".scope", "%q is not a scope", *r.Scope)
		}
		r.RuleWithOperations = *r.RuleWithOperations.DeepCopy()
		if r.Scope == nil {
			all := admissionregistrationv1.AllScopes
			r.Scope = &all
		}
		for j, res := range r.Resources {
			if strings.Contains(res, "/") && strings.HasPrefix(res, "/") {
				c.at(with(rp, "resources", j), rf+".resources", "%q names no resource", res)
			}
		}
		out[i] = r
	}
	return out
}
