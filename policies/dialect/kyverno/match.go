package kyverno

import (
	"slices"
	"strings"

	"github.com/kyverno/kyverno/ext/wildcard"
	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// target is what match and exclude look at: the object (the old one on
// DELETE), its kind and the request's.
type target struct {
	obj         *unstructured.Unstructured
	gvk         schema.GroupVersionKind
	subresource string
	operation   string
	userInfo    authenticationv1.UserInfo
	background  bool
}

// matches applies the rule's match and exclude to t, as Kyverno does: one
// of match.any, all of match.all, or the inline filter; then exclude.
func (r *rule) matches(t *target) bool {
	m := r.spec.Match
	switch {
	case len(m.Any) > 0:
		if !slices.ContainsFunc(m.Any, func(f resourceFilter) bool { return filterMatches(f, t, false) }) {
			return false
		}
	case len(m.All) > 0:
		for _, f := range m.All {
			if !filterMatches(f, t, false) {
				return false
			}
		}
	default:
		if !filterMatches(m.resourceFilter, t, false) {
			return false
		}
	}
	e := r.spec.Exclude
	switch {
	case e == nil:
		return true
	case len(e.Any) > 0:
		return !slices.ContainsFunc(e.Any, func(f resourceFilter) bool { return filterMatches(f, t, true) })
	case len(e.All) > 0:
		for _, f := range e.All {
			if !filterMatches(f, t, true) {
				return true
			}
		}
		return false
	}
	return !filterMatches(e.resourceFilter, t, true)
}

// filterMatches says every condition the filter sets holds for t. An
// exclude filter that sets nothing excludes nothing.
func filterMatches(f resourceFilter, t *target, exclude bool) bool {
	if exclude && f.empty() {
		return false
	}
	d := f.Resources
	if len(d.Kinds) > 0 && !slices.ContainsFunc(d.Kinds, func(k string) bool { return kindMatches(k, t.gvk, t.subresource) }) {
		return false
	}
	name := t.obj.GetName()
	if name == "" {
		name = t.obj.GetGenerateName()
	}
	if d.Name != "" && !wildcard.Match(d.Name, name) {
		return false
	}
	if len(d.Names) > 0 && !slices.ContainsFunc(d.Names, func(n string) bool { return wildcard.Match(n, name) }) {
		return false
	}
	if len(d.Namespaces) > 0 {
		ns := t.obj.GetNamespace()
		if t.gvk.Kind == "Namespace" {
			ns = name
		}
		if !slices.ContainsFunc(d.Namespaces, func(n string) bool { return wildcard.Match(n, ns) }) {
			return false
		}
	}
	if len(d.Annotations) > 0 {
		have := t.obj.GetAnnotations()
		for k, v := range d.Annotations {
			found := false
			for hk, hv := range have {
				if wildcard.Match(k, hk) && wildcard.Match(v, hv) {
					found = true
					break
				}
			}
			if !found {
				return false
			}
		}
	}
	if d.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(d.Selector)
		if err != nil || !sel.Matches(labels.Set(t.obj.GetLabels())) {
			return false
		}
	}
	if len(d.Operations) > 0 && !slices.Contains(d.Operations, t.operation) {
		return false
	}
	if len(f.Subjects) > 0 && (t.background || !subjectsMatch(f.Subjects, t.userInfo)) {
		return false
	}
	return true
}

// kindMatches reads a kind as Kyverno writes it: Kind, version/Kind or
// group/version/Kind, each part a wildcard, Kind/subresource for a
// subresource.
func kindMatches(k string, gvk schema.GroupVersionKind, subresource string) bool {
	if k == "*" {
		return true
	}
	parts := strings.Split(k, "/")
	group, version := "*", "*"
	kind := parts[len(parts)-1]
	sub := ""
	switch len(parts) {
	case 2:
		// Pod/exec or v1/Pod: a lowercase last part is a subresource.
		if strings.ToLower(parts[1]) == parts[1] {
			kind, sub = parts[0], parts[1]
		} else {
			version = parts[0]
		}
	case 3:
		group, version = parts[0], parts[1]
	case 4:
		group, version, kind, sub = parts[0], parts[1], parts[2], parts[3]
	}
	if sub != subresource {
		return false
	}
	return wildcard.Match(group, gvk.Group) && wildcard.Match(version, gvk.Version) && wildcard.Match(kind, gvk.Kind)
}

// subjectsMatch says the requester is one of the subjects.
func subjectsMatch(subjects []rbacv1.Subject, u authenticationv1.UserInfo) bool {
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.ServiceAccountKind:
			if u.Username == "system:serviceaccount:"+s.Namespace+":"+s.Name {
				return true
			}
		case rbacv1.UserKind:
			if wildcard.Match(s.Name, u.Username) {
				return true
			}
		case rbacv1.GroupKind:
			if slices.ContainsFunc(u.Groups, func(g string) bool { return wildcard.Match(s.Name, g) }) {
				return true
			}
		}
	}
	return false
}
