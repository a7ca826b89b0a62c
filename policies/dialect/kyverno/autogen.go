package kyverno

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
)

// autogenAnnotation names the Pod controllers a policy's Pod rules are
// generated for ("none" for none), as Kyverno reads it.
const autogenAnnotation = "pod-policies.kyverno.io/autogen-controllers"

// podControllers are Kyverno's defaults, CronJob apart: its Pod template
// sits one level deeper.
var podControllers = []string{"DaemonSet", "Deployment", "Job", "StatefulSet", "ReplicaSet", "ReplicationController"}

// withAutogen is the policy's rules followed by the rules Kyverno
// generates from them for Pod controllers: autogen-<rule> judging the Pod
// template of the controllers, autogen-cronjob-<rule> that of CronJobs.
// Kyverno generates them only when every rule's match and exclude name
// Pods (and Pod controllers) alone, by kind, without names, selectors or
// annotations that describe the Pod rather than its controller.
func withAutogen(doc *policyDoc) []ruleSpec {
	rules := slices.Clone(doc.Spec.Rules)
	controllers := podControllers
	cronJob := true
	if a, ok := doc.Metadata.Annotations[autogenAnnotation]; ok {
		controllers, cronJob = nil, false
		for _, c := range strings.Split(a, ",") {
			switch c = strings.TrimSpace(c); {
			case c == "CronJob":
				cronJob = true
			case slices.Contains(podControllers, c):
				controllers = append(controllers, c)
			}
		}
	}
	if !canAutogen(doc.Spec.Rules) {
		return rules
	}
	for _, r := range doc.Spec.Rules {
		if !matchesPods(r) {
			continue
		}
		if len(controllers) > 0 {
			if g, ok := generate(r, "autogen-"+r.Name, controllers, "spec.template"); ok {
				rules = append(rules, g)
			}
		}
		if cronJob {
			if g, ok := generate(r, "autogen-cronjob-"+r.Name, []string{"CronJob"}, "spec.jobTemplate.spec.template"); ok {
				rules = append(rules, g)
			}
		}
	}
	return rules
}

func canAutogen(rules []ruleSpec) bool {
	for _, r := range rules {
		for _, f := range append(r.Match.filters("match"), r.Exclude.filters("exclude")...) {
			d := f.filter.Resources
			if d.Name != "" || len(d.Names) > 0 || d.Selector != nil || d.Annotations != nil {
				return false
			}
			for _, k := range d.Kinds {
				if k != "Pod" && !slices.Contains(podControllers, k) && k != "CronJob" {
					return false
				}
			}
		}
	}
	return true
}

// matchesPods says the rule matches Pods (and its exclude, if it names
// kinds, names Pods too).
func matchesPods(r ruleSpec) bool {
	has := func(m *matchResources) (named, pods bool) {
		for _, f := range m.filters("") {
			for _, k := range f.filter.Resources.Kinds {
				named = true
				pods = pods || k == "Pod"
			}
		}
		return named, pods
	}
	if _, pods := has(&r.Match); !pods {
		return false
	}
	if r.Exclude != nil {
		if named, pods := has(r.Exclude); named && !pods {
			return false
		}
	}
	return true
}

// podPaths are the variables that read the Pod, shifted to its template.
var podPaths = regexp.MustCompile(`request\.(object|oldObject)\.(spec|metadata)\b`)

// generate is the rule r for controllers whose Pod template lies at
// template: kinds replaced, patterns wrapped, variables shifted.
func generate(r ruleSpec, name string, controllers []string, template string) (ruleSpec, bool) {
	raw, err := json.Marshal(r)
	if err != nil {
		return r, false
	}
	shifted := podPaths.ReplaceAll(raw, []byte("request.$1."+template+".$2"))
	var g ruleSpec
	if err := json.Unmarshal(shifted, &g); err != nil {
		return r, false
	}
	g.Name = name
	setKinds(&g.Match, controllers)
	if g.Exclude != nil {
		setKinds(g.Exclude, controllers)
	}
	wrap := func(p any) any {
		if p == nil {
			return nil
		}
		out := p
		parts := strings.Split(template, ".")
		for i := len(parts) - 1; i >= 0; i-- {
			out = map[string]any{parts[i]: out}
		}
		return out
	}
	v := g.Validate
	v.Pattern = wrap(v.Pattern)
	if list, ok := v.AnyPattern.([]any); ok {
		for i := range list {
			list[i] = wrap(list[i])
		}
	}
	return g, true
}

// setKinds replaces the kinds of every filter that names kinds.
func setKinds(m *matchResources, kinds []string) {
	set := func(f *resourceFilter) {
		if len(f.Resources.Kinds) > 0 {
			f.Resources.Kinds = slices.Clone(kinds)
		}
	}
	set(&m.resourceFilter)
	for i := range m.Any {
		set(&m.Any[i])
	}
	for i := range m.All {
		set(&m.All[i])
	}
}
