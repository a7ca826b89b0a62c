// Package kyverno judges Kyverno ClusterPolicies and Policies (kyverno.io/v1
// and v2beta1) as users keep them: validate rules with pattern,
// anyPattern, deny conditions, preconditions, foreach (nested), `{{ }}`
// variables with Kyverno's JMESPath and its functions (and its images
// variable), variable context entries, match and exclude (kinds, names, namespaces, annotations,
// selectors, operations, subjects), failureAction per rule, applyRules,
// failurePolicy, pre-existing violations on UPDATE, and the rules Kyverno
// generates for Pod controllers (autogen).
//
// Kyverno's own pieces do the matching (pkg/engine/validate.MatchPattern,
// as the pattern policies use) and the JMESPath (pkg/engine/jmespath, with
// Kyverno's functions); the rule's orchestration, conditions and variable
// substitution are ours, written to Kyverno's semantics, because Kyverno's
// engine and API packages link in its image-signing and cloud libraries
// (and its engine does not build against this module's Kubernetes). A
// separate module (test/kyvernoparity) holds our answers to Kyverno's
// engine.
//
// What needs a cluster (apiCall, configMap, imageRegistry and global
// context entries, roles and clusterRoles, namespaceSelector) and what is
// not a validate rule (mutate, generate, verifyImages, podSecurity, cel,
// manifests) is refused at load with the file, line and reason.
package kyverno

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/quantumnode/qn-admission/internal/problem"
	"github.com/quantumnode/qn-admission/policies/dialect"
)

// Reader reads Kyverno ClusterPolicies and Policies.
type Reader struct{}

var kinds = []string{
	dialect.Key("kyverno.io/v1", "ClusterPolicy"), dialect.Key("kyverno.io/v1", "Policy"),
	dialect.Key("kyverno.io/v2beta1", "ClusterPolicy"), dialect.Key("kyverno.io/v2beta1", "Policy"),
}

// Kinds are the document kinds the reader takes.
func (Reader) Kinds() []string { return kinds }

// Read parses and checks each document; each policy is a *Policy.
func (Reader) Read(docs []dialect.Document) ([]dialect.Policy, []*problem.Problem) {
	var out []dialect.Policy
	var problems []*problem.Problem
	for _, d := range docs {
		p, pr := Parse(d)
		if pr != nil {
			problems = append(problems, pr)
			continue
		}
		out = append(out, p)
	}
	return out, problems
}

var selfReference = regexp.MustCompile(`\{\{\s*@\s*\}\}`)

var unknownField = regexp.MustCompile(`unknown field "([^"]+)"`)

// Parse reads one ClusterPolicy or Policy document.
func Parse(d dialect.Document) (*Policy, *problem.Problem) {
	errAt := func(line int, path, format string, args ...any) *problem.Problem {
		return &problem.Problem{File: d.File, Line: line, Path: path, Message: fmt.Sprintf(format, args...)}
	}
	raw, err := d.JSON()
	if err != nil {
		return nil, errAt(d.Line, "", "cannot read the %s: %v", d.Kind, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var doc policyDoc
	if err := dec.Decode(&doc); err != nil {
		field := ""
		if m := unknownField.FindStringSubmatch(err.Error()); m != nil {
			field = m[1]
			return nil, errAt(lineOfKey(d.Node, lastPart(field), d.Line), field, "%s %s has no field %q here, or it is not supported", d.APIVersion, d.Kind, lastPart(field))
		}
		return nil, errAt(d.Line, field, "not a valid %s %s: %v", d.APIVersion, d.Kind, err)
	}
	if doc.Metadata.Name == "" {
		return nil, errAt(d.Line, "metadata.name", "a %s needs metadata.name: roles.yaml lists it by that name", d.Kind)
	}
	if d.Kind == "Policy" && doc.Metadata.Namespace == "" {
		return nil, errAt(d.Line, "metadata.namespace", "a Policy applies in its own namespace: set metadata.namespace (or make it a ClusterPolicy)")
	}
	if len(doc.Spec.Rules) == 0 {
		return nil, errAt(lineOfKey(d.Node, "spec", d.Line), "spec.rules", "the %s has no rules", d.Kind)
	}
	if len(doc.Spec.ValidationFailureActionOverrides) > 0 {
		return nil, errAt(lineOfKey(d.Node, "validationFailureActionOverrides", d.Line), "spec.validationFailureActionOverrides",
			"per-namespace failure action overrides are not supported; split the policy, or route namespaces through roles.yaml")
	}
	switch doc.Spec.FailurePolicy {
	case "", "Fail", "Ignore":
	default:
		return nil, errAt(lineOfKey(d.Node, "failurePolicy", d.Line), "spec.failurePolicy", "%q is not a failure policy (Fail or Ignore)", doc.Spec.FailurePolicy)
	}
	if _, err := failureAction(doc.Spec.ValidationFailureAction); err != nil {
		return nil, errAt(lineOfKey(d.Node, "validationFailureAction", d.Line), "spec.validationFailureAction", "%v", err)
	}
	p := &Policy{name: doc.Metadata.Name, kind: d.Kind, file: d.File, line: d.Line, namespace: doc.Metadata.Namespace, spec: doc.Spec}
	for i := range doc.Spec.Rules {
		r := &doc.Spec.Rules[i]
		line := ruleLine(d.Node, r.Name, d.Line)
		if pr := checkRule(d.File, line, i, r); pr != nil {
			return nil, pr
		}
	}
	for _, r := range withAutogen(&doc) {
		nr, err := newRule(p, r, ruleLine(d.Node, r.Name, d.Line))
		if err != nil {
			return nil, errAt(ruleLine(d.Node, r.Name, d.Line), "spec.rules", "rule %q: %v", r.Name, err)
		}
		p.rules = append(p.rules, nr)
		p.readsImages = p.readsImages || nr.readsImages
	}
	return p, nil
}

// failureAction says whether a failure action enforces: Kyverno's
// default, Audit, only warns.
func failureAction(s string) (enforce bool, err error) {
	switch strings.ToLower(s) {
	case "", "audit":
		return false, nil
	case "enforce":
		return true, nil
	}
	return false, fmt.Errorf("%q is not a failure action (Enforce or Audit)", s)
}

// checkRule refuses what a rule uses that cannot be judged here, naming
// the rule's line and the feature.
func checkRule(file string, line, i int, r *ruleSpec) *problem.Problem {
	path := fmt.Sprintf("spec.rules[%d]", i)
	refuse := func(field, format string, args ...any) *problem.Problem {
		return &problem.Problem{File: file, Line: line, Path: path + field, Message: fmt.Sprintf("rule %q: ", r.Name) + fmt.Sprintf(format, args...)}
	}
	switch {
	case r.Name == "":
		return refuse(".name", "every rule needs a name")
	case r.Mutate != nil:
		return refuse(".mutate", "mutate rules are not supported (qn-admission patches with Rego's patch rules)")
	case r.Generate != nil:
		return refuse(".generate", "generate rules are not supported (they create other objects; admission here only judges)")
	case r.VerifyImages != nil:
		return refuse(".verifyImages", "verifyImages rules are not supported (they need image registries)")
	case r.Validate == nil:
		return refuse("", "has no validate rule")
	case r.CELPreconditions != nil:
		return refuse(".celPreconditions", "celPreconditions are not supported; write preconditions")
	case r.ImageExtractors != nil:
		return refuse(".imageExtractors", "imageExtractors only change what Kyverno's verifyImages rules read; a validate rule's {{ images }} always reads the Pod's containers, initContainers and ephemeralContainers (of a Pod controller's template too): remove them")
	}
	v := r.Validate
	switch {
	case v.PodSecurity != nil:
		return refuse(".validate.podSecurity", "podSecurity checks are not supported; write the checks as patterns")
	case v.CEL != nil:
		return refuse(".validate.cel", "CEL validate rules are not supported in a ClusterPolicy; write a ValidatingPolicy or a ValidatingAdmissionPolicy")
	case v.Manifests != nil:
		return refuse(".validate.manifests", "manifest signature checks are not supported")
	case v.Assert != nil:
		return refuse(".validate.assert", "assert trees are not supported")
	case v.FailureActionOverrides != nil:
		return refuse(".validate.failureActionOverrides", "per-namespace failure action overrides are not supported")
	case v.Pattern == nil && v.AnyPattern == nil && v.Deny == nil && len(v.Foreach) == 0:
		return refuse(".validate", "declare pattern, anyPattern, deny or foreach")
	}
	if _, err := failureAction(v.FailureAction); err != nil {
		return refuse(".validate.failureAction", "%v", err)
	}
	if _, ok := v.AnyPattern.([]any); v.AnyPattern != nil && !ok {
		return refuse(".validate.anyPattern", "anyPattern is a list of patterns")
	}
	if raw, err := json.Marshal(r); err == nil {
		if fns := unsupportedFunctions(string(raw)); len(fns) > 0 {
			return refuse("", "Kyverno's JMESPath function %s is not supported here", strings.Join(fns, ", "))
		}
		if selfReference.Match(raw) {
			return refuse("", "{{@}} references are not supported; name the field the variable reads")
		}
	}
	if pr := checkContext(r.Context, refuse, ".context"); pr != nil {
		return pr
	}
	for j := range v.Foreach {
		if pr := checkForEach(&v.Foreach[j], refuse, fmt.Sprintf(".validate.foreach[%d]", j)); pr != nil {
			return pr
		}
	}
	filters := append(r.Match.filters(".match"), r.Exclude.filters(".exclude")...)
	for _, m := range filters {
		switch {
		case len(m.filter.Roles) > 0 || len(m.filter.ClusterRoles) > 0:
			return refuse(m.field+".roles", "matching on the requester's roles or clusterRoles needs the cluster's RBAC; match subjects (users, groups, service accounts) instead")
		case m.filter.Resources.NamespaceSelector != nil:
			return refuse(m.field+".resources.namespaceSelector", "namespaceSelector needs the namespace's labels, which an admission request does not carry; match namespaces by name")
		}
		for _, op := range m.filter.Resources.Operations {
			if !slices.Contains([]string{"CREATE", "UPDATE", "DELETE", "CONNECT"}, op) {
				return refuse(m.field+".resources.operations", "%q is not an operation (CREATE, UPDATE, DELETE, CONNECT)", op)
			}
		}
	}
	return nil
}

type refuser func(field, format string, args ...any) *problem.Problem

func checkContext(entries []contextEntry, refuse refuser, at string) *problem.Problem {
	for k, c := range entries {
		field := fmt.Sprintf("%s[%d]", at, k)
		switch {
		case c.APICall != nil:
			return refuse(field+".apiCall", "context entry %q reads the API server (apiCall), which a policy judged here cannot; give the values as a variable", c.Name)
		case c.ConfigMap != nil:
			return refuse(field+".configMap", "context entry %q reads a ConfigMap from the cluster; put the values in a variable", c.Name)
		case c.ImageRegistry != nil:
			return refuse(field+".imageRegistry", "context entry %q reads an image registry, which is not reachable from admission here", c.Name)
		case c.GlobalReference != nil:
			return refuse(field+".globalReference", "context entry %q reads Kyverno's global context, which does not exist here", c.Name)
		case c.Variable == nil:
			return refuse(field, "context entry %q declares no variable", c.Name)
		case c.Name == "":
			return refuse(field+".name", "a context entry needs a name")
		}
	}
	return nil
}

func checkForEach(f *foreach, refuse refuser, at string) *problem.Problem {
	if f.List == "" {
		return refuse(at+".list", "a foreach needs a list (a JMESPath over the request, e.g. request.object.spec.containers)")
	}
	if pr := checkContext(f.Context, refuse, at+".context"); pr != nil {
		return pr
	}
	if f.Pattern == nil && f.AnyPattern == nil && f.Deny == nil && len(f.Foreach) == 0 {
		return refuse(at, "a foreach declares pattern, anyPattern, deny or a nested foreach")
	}
	for k := range f.Foreach {
		if pr := checkForEach(&f.Foreach[k], refuse, fmt.Sprintf("%s.foreach[%d]", at, k)); pr != nil {
			return pr
		}
	}
	return nil
}

func lastPart(field string) string {
	if i := strings.LastIndex(field, "."); i >= 0 {
		return field[i+1:]
	}
	return field
}

func itoa(i int) string { return strconv.Itoa(i) }

// lineOfKey is the line of the first key named key under n, or def.
func lineOfKey(n *yaml.Node, key string, def int) int {
	if line := findLine(n, func(k, _ *yaml.Node) bool { return k.Value == key }); line > 0 {
		return line
	}
	return def
}

// ruleLine is the line of the rule named name (an autogen rule: of the
// rule it was generated from), or def.
func ruleLine(n *yaml.Node, name string, def int) int {
	base := strings.TrimPrefix(strings.TrimPrefix(name, "autogen-cronjob-"), "autogen-")
	if line := findLine(n, func(k, v *yaml.Node) bool { return k.Value == "name" && v.Kind == yaml.ScalarNode && v.Value == base }); line > 0 {
		return line
	}
	return def
}

// findLine is the line of the first key/value pair under n that match
// holds for, depth first, or 0.
func findLine(n *yaml.Node, match func(k, v *yaml.Node) bool) int {
	if n == nil {
		return 0
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if match(n.Content[i], n.Content[i+1]) {
				return n.Content[i].Line
			}
			if l := findLine(n.Content[i+1], match); l > 0 {
				return l
			}
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			if l := findLine(c, match); l > 0 {
				return l
			}
		}
	}
	return 0
}
