package admissionpolicy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// Kyverno (v1.19, pkg/cel/policies/vpol/autogen) judges the Pod template
// of Pod controllers by a ValidatingPolicy of Pods: from the policy it
// generates variants whose matchConstraints name the controllers and
// whose text reads the template where it read the Pod. A variant is the
// policy still: its results carry the policy's name and rules, so a
// Deployment refused by it is reported as by the Pod policy. The same
// variants are built here, as Kyverno builds them: by rewriting the text
// of the whole spec, so that an expression means what it means there.

// podController is a controller Kyverno generates a variant for.
type podController struct {
	// name is how spec.autogen.podControllers.controllers lists it.
	name                     string
	group, version, resource string
	// template is where its Pod template lies: object.spec and
	// object.metadata are rewritten to template+".spec" and
	// template+".metadata".
	template string
}

// podControllers are Kyverno's.
var podControllers = []podController{
	{"daemonsets", "apps", "v1", "daemonsets", "spec.template"},
	{"deployments", "apps", "v1", "deployments", "spec.template"},
	{"replicasets", "apps", "v1", "replicasets", "spec.template"},
	{"statefulsets", "apps", "v1", "statefulsets", "spec.template"},
	{"jobs", "batch", "v1", "jobs", "spec.template"},
	{"cronjobs", "batch", "v1", "cronjobs", "spec.jobTemplate.spec.template"},
}

// variant is one autogen variant of a ValidatingPolicy: the policy for
// the controllers whose Pod template lies at the same place.
type variant struct {
	// resources are the controllers' resources, as load errors name them.
	resources   []string
	constraints *selection
	program     *program
}

// canAutogen says Kyverno generates variants from these matchConstraints:
// one rule of Pods (core v1), by no name, no object labels, nothing
// excluded (its autogen.CanAutoGen).
func canAutogen(mr *admissionregistrationv1.MatchResources) bool {
	if mr == nil || len(mr.ExcludeResourceRules) > 0 || len(mr.ResourceRules) != 1 {
		return false
	}
	if s := mr.ObjectSelector; s != nil && (len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0) {
		return false
	}
	r := mr.ResourceRules[0]
	return len(r.ResourceNames) == 0 && slices.Equal(r.APIGroups, []string{""}) &&
		slices.Equal(r.APIVersions, []string{"v1"}) && slices.Equal(r.Resources, []string{"pods"})
}

// autogenSpec is the spec of the variant for controllers whose Pod
// template lies at template: the match constraints name the controllers
// (a rule per group and version, with the policy's operations and its
// namespace selector), and every object.spec and object.metadata of the
// spec's text (oldObject's too) reads the template, except
// object.metadata.namespace, which the template does not have.
func autogenSpec(s *validatingPolicySpec, controllers []podController, template string) (*validatingPolicySpec, error) {
	out := *s
	mr := &admissionregistrationv1.MatchResources{}
	if ns := s.MatchConstraints.NamespaceSelector; ns != nil {
		mr.NamespaceSelector = ns.DeepCopy()
	}
	ops := s.MatchConstraints.ResourceRules[0].Operations
	for _, c := range controllers {
		i := slices.IndexFunc(mr.ResourceRules, func(r admissionregistrationv1.NamedRuleWithOperations) bool {
			return r.APIGroups[0] == c.group && r.APIVersions[0] == c.version
		})
		if i < 0 {
			mr.ResourceRules = append(mr.ResourceRules, admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: slices.Clone(ops), Rule: admissionregistrationv1.Rule{APIGroups: []string{c.group}, APIVersions: []string{c.version}}}})
			i = len(mr.ResourceRules) - 1
		}
		mr.ResourceRules[i].Resources = append(mr.ResourceRules[i].Resources, c.resource)
	}
	for _, r := range mr.ResourceRules {
		slices.Sort(r.Resources)
	}
	slices.SortFunc(mr.ResourceRules, func(a, b admissionregistrationv1.NamedRuleWithOperations) int {
		return strings.Compare(a.APIGroups[0]+"/"+a.APIVersions[0], b.APIGroups[0]+"/"+b.APIVersions[0])
	})
	out.MatchConstraints = mr
	raw, err := json.Marshal(&out)
	if err != nil {
		return nil, err
	}
	for _, from := range []string{"spec", "metadata"} {
		for _, root := range []string{"object.", "oldObject."} {
			raw = rewrite(raw, root+from, root+template+"."+from)
		}
	}
	var g validatingPolicySpec
	if err := json.Unmarshal(raw, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// rewrite replaces every from in data with to, but for a from followed
// by the path segment .namespace.
func rewrite(data []byte, from, to string) []byte {
	if !bytes.Contains(data, []byte(from)) {
		return data
	}
	var b bytes.Buffer
	for {
		i := bytes.Index(data, []byte(from))
		if i < 0 {
			b.Write(data)
			return b.Bytes()
		}
		b.Write(data[:i])
		data = data[i+len(from):]
		if rest, ok := bytes.CutPrefix(data, []byte(".namespace")); ok && (len(rest) == 0 || !identByte(rest[0])) {
			b.WriteString(from)
		} else {
			b.WriteString(to)
		}
	}
}

// identByte says b may continue a CEL identifier.
func identByte(b byte) bool {
	return b == '_' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
}

// autogen builds and compiles the variants of a ValidatingPolicy whose
// spec (checked, compiled) is s; a variant that does not compile is a
// problem of the policy that says it is the variant.
func (c *checker) autogen(s *validatingPolicySpec, name string) []*variant {
	if !canAutogen(s.MatchConstraints) {
		return nil
	}
	names := []string{}
	for _, pc := range podControllers {
		names = append(names, pc.name)
	}
	if a := s.AutogenConfiguration; a != nil && a.PodControllers != nil && a.PodControllers.Controllers != nil {
		names = a.PodControllers.Controllers
	}
	// The controllers by where their template lies, each place once.
	var templates []string
	byTemplate := map[string][]podController{}
	for i, n := range names {
		j := slices.IndexFunc(podControllers, func(pc podController) bool { return pc.name == n })
		if j < 0 {
			c.at([]any{"spec", "autogen", "podControllers", "controllers", i}, fmt.Sprintf("spec.autogen.podControllers.controllers[%d]", i),
				"%q: qn-admission generates variants for daemonsets, deployments, replicasets, statefulsets, jobs and cronjobs only", n)
			c.hint("name them as Kyverno does, by lower-case plural; another controller (resource.version.group), whose Pod template Kyverno extracts at evaluation, needs a policy of its own that matches it")
			continue
		}
		pc := podControllers[j]
		if slices.ContainsFunc(byTemplate[pc.template], func(x podController) bool { return x == pc }) {
			continue
		}
		if byTemplate[pc.template] == nil {
			templates = append(templates, pc.template)
		}
		byTemplate[pc.template] = append(byTemplate[pc.template], pc)
	}
	slices.Sort(templates)
	var out []*variant
	for _, t := range templates {
		v := &variant{}
		for _, pc := range byTemplate[t] {
			v.resources = append(v.resources, pc.resource)
		}
		slices.Sort(v.resources)
		g, err := autogenSpec(s, byTemplate[t], t)
		if err != nil {
			c.at([]any{"spec"}, "spec", "the autogen variant for %s: %v", strings.Join(v.resources, ", "), err)
			continue
		}
		vc := &checker{doc: c.doc}
		v.constraints = vc.selection([]any{"spec", "matchConstraints"}, g.MatchConstraints, true)
		v.program = vc.compile(&admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: g.MatchConstraints, Validations: g.Validations, FailurePolicy: g.FailurePolicy,
			AuditAnnotations: g.AuditAnnotations, MatchConditions: g.MatchConditions, Variables: g.Variables,
		}, name)
		for _, p := range vc.problems {
			p.Message = fmt.Sprintf("the autogen variant for %s (object.spec and object.metadata read as %s.spec and %s.metadata): %s", strings.Join(v.resources, ", "), t, t, p.Message)
			if p.Hint == "" {
				p.Hint = "Kyverno generates it from a policy of Pods (spec.autogen.podControllers.controllers lists the controllers; [] for none)"
			}
		}
		c.problems = append(c.problems, vc.problems...)
		if len(vc.problems) == 0 {
			out = append(out, v)
		}
	}
	return out
}
