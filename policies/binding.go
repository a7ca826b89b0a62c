package policies

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// serviceAccountPrefix starts the user name of every service account.
const serviceAccountPrefix = "system:serviceaccount:"

// controlPlaneDeleters are the control plane's own identities that delete
// objects for the cluster: the namespace controller empties a namespace
// being deleted, the garbage collector follows owner references, and
// kube-controller-manager acts as itself when it runs without
// per-controller credentials. They are always admitted for DELETE, by
// design and not by a line in roles.yaml that an operator could forget: a
// namespace must always finish deleting. Names like these are reserved: only
// the cluster's own credentials carry them.
var controlPlaneDeleters = []string{
	serviceAccountPrefix + "kube-system:namespace-controller",
	serviceAccountPrefix + "kube-system:generic-garbage-collector",
	"system:kube-controller-manager",
}

// ControlPlaneDeleters are the user names always admitted for DELETE, for
// what enforces the role table elsewhere (the API server's
// ValidatingAdmissionPolicy, policies/vap).
func ControlPlaneDeleters() []string { return slices.Clone(controlPlaneDeleters) }

// binding is the outcome of the role table for one request: the role that
// judges it, or why the request is admitted unjudged, or why the role table
// refuses it before any policy runs.
//
// The role of a stored object is a security boundary. CREATE runs under the
// role the new object names. UPDATE and DELETE are judged first by the role
// of the stored object (oldObject): removing or changing qn-role cannot
// escape it. An UPDATE that changes the role is a move, which the stored
// role must allow (moveTo); the request then runs under the new role, whose
// requesters, policies and window apply.
type binding struct {
	// exempt names why the request is admitted unjudged.
	exempt string
	// role and spec are the role the request runs under (spec nil when the
	// role is unknown); fromAnnotation says qn-role named it.
	role           string
	spec           *Role
	fromAnnotation bool
	// stored is the role of the stored object (UPDATE, DELETE), after the
	// default; "" for CREATE and CONNECT.
	stored string
	// refusal, when set, decides the request. enforceable says the role's
	// enforcement applies to it (a role in warn mode only warns); an
	// unknown role or a malformed request is refused whatever the mode.
	refusal     *Decision
	enforceable bool
	// warnings reach the requester with the decision.
	warnings []string
}

// bind applies the role table to a request.
func (t *RoleTable) bind(in *Input) binding {
	f := in.Facts
	if why, ok := t.Exemptions.match(f); ok {
		return binding{exempt: why}
	}
	if f.Operation == "DELETE" && matchesAny(controlPlaneDeleters, f.User) {
		return binding{exempt: "control plane: " + f.User + " deletes for the cluster"}
	}
	// Malformed requests are refused on both webhooks alike (400): the
	// API server always sends these objects, only a forger omits them.
	if (f.Operation == "CREATE" || f.Operation == "UPDATE") && !in.hasObject() {
		d := BadRequest(fmt.Sprintf("request.object is missing: a %s must carry the object it writes", f.Operation))
		return binding{refusal: &d}
	}
	if (f.Operation == "UPDATE" || f.Operation == "DELETE") && !in.hasOldObject() {
		d := BadRequest(fmt.Sprintf("request.oldObject is missing: a %s must carry the stored object, whose qn-role annotation decides the role that judges it", f.Operation))
		return binding{refusal: &d}
	}
	switch f.Operation {
	case "UPDATE":
		return t.bindUpdate(in)
	case "DELETE":
		return t.bindDelete(in)
	default:
		return t.bindNew(f, f.Role, f.Role != "")
	}
}

// bindNew binds a request that places an object under a role: a CREATE, or
// the entry half of a move. The requester must be one the role admits.
func (t *RoleTable) bindNew(f Facts, annotated string, fromAnnotation bool) binding {
	name := t.roleName(annotated)
	b := binding{role: name, fromAnnotation: fromAnnotation}
	role, ok := t.Roles[name]
	if !ok {
		d := Deny(http.StatusForbidden, metav1.StatusReasonForbidden, fmt.Sprintf(
			"annotation %s=%q names no known role; known roles: %s", RoleAnnotation, name, strings.Join(t.Names(), ", ")))
		b.refusal = &d
		return b
	}
	b.spec = &role
	if !role.Allows(f.Operation) {
		return b.refuse(fmt.Sprintf("role %q may not %s %s; it may %s", name, strings.ToLower(f.Operation), f.Kind.Kind, strings.Join(role.Operations, ", ")))
	}
	if role.Requesters != nil && !role.Requesters.match(f) {
		verb := "create"
		if f.Operation == "UPDATE" {
			verb = "move"
		}
		return b.refuse(fmt.Sprintf("%s may not %s %ss under role %q: roles.%s.requesters admits only %s",
			requester(f), verb, f.Kind.Kind, name, name, role.Requesters))
	}
	return b
}

// bindUpdate judges an UPDATE by the stored object's role; a changed role
// is a move the stored role must allow, into a role that admits the
// requester.
func (t *RoleTable) bindUpdate(in *Input) binding {
	f := in.Facts
	storedAnnotated := in.oldAnnotation(RoleAnnotation)
	stored := t.roleName(storedAnnotated)
	storedRole, storedKnown := t.Roles[stored]
	if storedKnown {
		b := binding{role: stored, spec: &storedRole, stored: stored, fromAnnotation: storedAnnotated != ""}
		if !storedRole.Allows("UPDATE") {
			return b.refuse(fmt.Sprintf("the stored %s is under role %q, which may not update it (it may %s); removing or changing the %s annotation does not change the role that judges an update",
				f.Kind.Kind, stored, strings.Join(storedRole.Operations, ", "), RoleAnnotation))
		}
		if t.roleName(f.Role) == stored {
			if storedRole.Requesters != nil && !storedRole.Requesters.match(f) {
				// Requesters restrict who places objects under a role, not
				// who updates them; say so where an operator looks.
				b.warnings = append(b.warnings, fmt.Sprintf("%s is not among roles.%s.requesters; updates are judged by the role's policies", requester(f), stored))
			}
			return b
		}
		if !contains(storedRole.MoveTo, t.roleName(f.Role)) {
			allowed := "lists none"
			if len(storedRole.MoveTo) > 0 {
				allowed = "allows only " + strings.Join(storedRole.MoveTo, ", ")
			}
			return b.refuse(fmt.Sprintf("the stored %s is under role %q, which does not let it move to role %q (roles.%s.moveTo %s); delete and recreate it under the new role, or ask an administrator",
				f.Kind.Kind, stored, t.roleName(f.Role), stored, allowed))
		}
	}
	// A move (or an object stored under a role the table no longer
	// declares): entering the new role, as a CREATE under it would.
	b := t.bindNew(f, f.Role, f.Role != "")
	b.stored = stored
	if !storedKnown {
		b.warnings = append(b.warnings, fmt.Sprintf("the stored %s names role %q, which the role table no longer declares; it is judged as entering role %q", f.Kind.Kind, stored, b.role))
	}
	return b
}

// bindDelete judges a DELETE by the stored object's role: DELETE among its
// operations, or the requester in its delete list.
func (t *RoleTable) bindDelete(in *Input) binding {
	f := in.Facts
	annotated := in.oldAnnotation(RoleAnnotation)
	name := t.roleName(annotated)
	b := binding{role: name, stored: name, fromAnnotation: annotated != ""}
	role, ok := t.Roles[name]
	if !ok {
		// Refusing here would make the object undeletable; the default
		// role's rules decide instead, and the requester is told.
		b.warnings = append(b.warnings, fmt.Sprintf("the stored %s names role %q, which the role table no longer declares; its deletion is judged by the default role %q", f.Kind.Kind, name, t.DefaultRole))
		name = t.DefaultRole
		role = t.Roles[name]
		b.role = name
	}
	b.spec = &role
	if role.Allows("DELETE") || (role.Delete != nil && role.Delete.match(f)) {
		return b
	}
	who := "nobody but the control plane"
	if role.Delete != nil {
		who = role.Delete.String()
	}
	return b.refuse(fmt.Sprintf("%s may not delete a %s of role %q: roles.%s.delete admits %s",
		requester(f), f.Kind.Kind, name, name, who))
}

// refuse records a refusal by the role table, subject to the role's
// enforcement.
func (b binding) refuse(message string) binding {
	d := Deny(http.StatusForbidden, metav1.StatusReasonForbidden, message)
	b.refusal, b.enforceable = &d, true
	return b
}

// roleName is the role an annotation value names, the default when empty.
func (t *RoleTable) roleName(annotated string) string {
	if annotated == "" {
		return t.DefaultRole
	}
	return annotated
}

// match reports whether the requester is one of s.
func (s *Subjects) match(f Facts) bool {
	if matchesAny(s.Users, f.User) {
		return true
	}
	for _, g := range f.Groups {
		if matchesAny(s.Groups, g) {
			return true
		}
	}
	if sa, ok := strings.CutPrefix(f.User, serviceAccountPrefix); ok {
		return matchesAny(s.ServiceAccounts, sa)
	}
	return false
}

// String lists s for a message: "groups system:masters; users alice".
func (s *Subjects) String() string {
	var parts []string
	for _, l := range []struct {
		what  string
		names []string
	}{{"users", s.Users}, {"groups", s.Groups}, {"service accounts", s.ServiceAccounts}} {
		if len(l.names) > 0 {
			parts = append(parts, l.what+" "+strings.Join(l.names, ", "))
		}
	}
	return strings.Join(parts, "; ")
}

// requester names who asks, for messages.
func requester(f Facts) string {
	if len(f.Groups) == 0 {
		return fmt.Sprintf("user %q", f.User)
	}
	return fmt.Sprintf("user %q (groups %s)", f.User, strings.Join(f.Groups, ", "))
}

// annotationOf reads metadata.annotations[key] of a decoded object; "" when
// absent or not a string (the webhook has already refused malformed
// metadata of the new object; the stored one came from the apiserver).
func annotationOf(obj map[string]any, key string) string {
	meta, _ := obj["metadata"].(map[string]any)
	annotations, _ := meta["annotations"].(map[string]any)
	v, _ := annotations[key].(string)
	return v
}

// match reports whether the request is exempt, and why.
func (x Exemptions) match(c Facts) (string, bool) {
	for _, u := range x.Users {
		if matchName(u, c.User) {
			return "user " + c.User, true
		}
	}
	for _, g := range x.Groups {
		for _, have := range c.Groups {
			if matchName(g, have) {
				return "group " + have, true
			}
		}
	}
	for _, ns := range x.Namespaces {
		if c.Namespace != "" && matchName(ns, c.Namespace) {
			return "namespace " + c.Namespace, true
		}
	}
	return "", false
}

func matchesAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if matchName(p, name) {
			return true
		}
	}
	return false
}

// matchName matches exactly, or by prefix when pattern ends in "*"
// (system:serviceaccount:kube-system:*).
func matchName(pattern, name string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, p)
	}
	return pattern == name
}
