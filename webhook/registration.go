package webhook

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// AdditionalResource is one resource, beyond QuantumNodes and
// HorizontalQNScalers, that the API server sends to qn-webhook's
// validating webhook: the chart's webhook.additionalResources, passed to
// qn-webhook and qnctl eval as --additional-resources so both say truly
// what the webhook is asked. The API server matches it with matchPolicy
// Equivalent, so any version of the group's resource is sent (converted);
// the version is kept to name it.
type AdditionalResource struct {
	Group, Version, Resource string
	// Operations are CREATE, UPDATE or DELETE; CREATE and UPDATE when the
	// flag names none.
	Operations []string
}

// DefaultAdditionalOperations are the operations of an additional
// resource that names none, as the chart's default.
var DefaultAdditionalOperations = []string{"CREATE", "UPDATE"}

var (
	additionalName    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	additionalVersion = regexp.MustCompile(`^v[0-9]+((alpha|beta)[0-9]+)?$`)
	additionalGroup   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// ParseAdditionalResource reads RESOURCE.VERSION[.GROUP][:OPERATION,...],
// the form kubectl gives a resource (pods.v1, deployments.v1.apps), and
// the operations after a colon: "deployments.v1.apps:CREATE,UPDATE". No
// wildcard and no subresource: the chart refuses them, and so does this.
func ParseAdditionalResource(s string) (AdditionalResource, error) {
	spec, ops, hasOps := strings.Cut(s, ":")
	resource, rest, _ := strings.Cut(spec, ".")
	version, group, _ := strings.Cut(rest, ".")
	r := AdditionalResource{Group: group, Version: version, Resource: resource, Operations: slices.Clone(DefaultAdditionalOperations)}
	switch {
	case strings.ContainsAny(spec, "*/"):
		return r, fmt.Errorf("additional resource %q: name one resource (pods.v1), never a wildcard or a subresource", s)
	case !additionalName.MatchString(resource):
		return r, fmt.Errorf("additional resource %q: %q is not a resource name; write RESOURCE.VERSION[.GROUP], e.g. pods.v1 or deployments.v1.apps", s, resource)
	case !additionalVersion.MatchString(version):
		return r, fmt.Errorf("additional resource %q: %q is not an API version (v1, v1beta1); write RESOURCE.VERSION[.GROUP], e.g. pods.v1 or deployments.v1.apps", s, version)
	case group != "" && !additionalGroup.MatchString(group):
		return r, fmt.Errorf("additional resource %q: %q is not an API group", s, group)
	}
	if hasOps {
		r.Operations = nil
		for op := range strings.SplitSeq(ops, ",") {
			switch op {
			case "CREATE", "UPDATE", "DELETE":
				if !slices.Contains(r.Operations, op) {
					r.Operations = append(r.Operations, op)
				}
			default:
				return r, fmt.Errorf("additional resource %q: operation %q is not one of CREATE, UPDATE, DELETE", s, op)
			}
		}
	}
	return r, nil
}

// ParseAdditionalResources parses each of specs (ParseAdditionalResource).
func ParseAdditionalResources(specs []string) ([]AdditionalResource, error) {
	out := make([]AdditionalResource, 0, len(specs))
	for _, s := range specs {
		r, err := ParseAdditionalResource(s)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// String is the flag form, RESOURCE.VERSION[.GROUP]:OPERATION,...
func (r AdditionalResource) String() string {
	s := r.Resource + "." + r.Version
	if r.Group != "" {
		s += "." + r.Group
	}
	return s + ":" + strings.Join(r.Operations, ",")
}

// Covers says whether the API server sends this request to the webhook
// under r: the same group and resource (any version: matchPolicy
// Equivalent), not a subresource, one of r's operations.
func (r AdditionalResource) Covers(group, resource, subResource, operation string) bool {
	return subResource == "" && group == r.Group && resource == r.Resource && slices.Contains(r.Operations, operation)
}

// describe names r for a person: "CREATE and UPDATE of v1 pods".
func (r AdditionalResource) describe() string {
	gv := r.Version
	if r.Group != "" {
		gv = r.Group + "/" + r.Version
	}
	ops := strings.Join(r.Operations, ", ")
	if i := strings.LastIndex(ops, ", "); i >= 0 {
		ops = ops[:i] + " and " + ops[i+2:]
	}
	return ops + " of " + gv + " " + r.Resource
}

// RegisteredFor says which requests qn-webhook is registered for: the
// chart's own entries (QuantumNodes, HorizontalQNScalers' writes) and the
// additional resources. qnctl eval prints it beside what it did not check,
// and qn-webhook's /readyz?verbose shows it.
func RegisteredFor(additional []AdditionalResource) string {
	s := "qn-webhook is registered for qn.dev QuantumNodes, and for HorizontalQNScalers' CREATE and UPDATE by its validating webhook only"
	if len(additional) == 0 {
		return s
	}
	names := make([]string, 0, len(additional))
	for _, r := range additional {
		names = append(names, r.describe())
	}
	return s + "; and, by --additional-resources (webhook.additionalResources), for " + strings.Join(names, "; ") + " by its validating webhook only"
}
