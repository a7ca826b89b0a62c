package policies

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quantumnode/qn-admission/internal/problem"
	"github.com/quantumnode/qn-admission/policies/window"
)

// RolesFile is the name of the role table inside a policy directory.
const RolesFile = "roles.yaml"

// Enforcement says what a role's denials do.
type Enforcement string

const (
	// EnforceDeny refuses the request.
	EnforceDeny Enforcement = "deny"
	// EnforceWarn admits it and returns the denial as a warning: adopt a
	// policy safely before enforcing it.
	EnforceWarn Enforcement = "warn"
	// EnforceDryRun admits it silently and only logs the denial.
	EnforceDryRun Enforcement = "dryrun"
)

// OnError says what a role does when its policies fail or time out.
type OnError string

const (
	// OnErrorDeny refuses the request (fail closed), the default.
	OnErrorDeny OnError = "deny"
	// OnErrorAllow admits it with a warning (fail open).
	OnErrorAllow OnError = "allow"
)

// WindowKey says whose changes share one rate window.
type WindowKey string

const (
	// KeyUser gives each user its own window (the default).
	KeyUser WindowKey = "user"
	// KeyNamespace shares one window per namespace.
	KeyNamespace WindowKey = "namespace"
	// KeyRole shares one window across everyone in the role.
	KeyRole WindowKey = "role"
)

// Operations are the admission operations a role may list, as the
// apiserver names them.
var Operations = []string{"CREATE", "UPDATE", "DELETE", "CONNECT"}

// RoleTable is roles.yaml: the roles requests can run under.
type RoleTable struct {
	// DefaultRole serves requests without a qn-role annotation.
	DefaultRole string `yaml:"defaultRole"`
	// Exemptions are admitted without policies or windows.
	Exemptions Exemptions `yaml:"exemptions"`
	// Roles by name.
	Roles map[string]Role `yaml:"roles"`
	// Inventory lists the kinds qn-webhook keeps an inventory of, which
	// policies read as data.inventory (inventory.go).
	Inventory []InventoryKind `yaml:"inventory"`

	// doc is the parsed file, for Line.
	doc *yaml.Node
}

// Exemptions name requesters and namespaces that are never judged, e.g. a
// break-glass group. Keep them few: an exempt request is not checked at all.
type Exemptions struct {
	Users      []string `yaml:"users"`
	Groups     []string `yaml:"groups"`
	Namespaces []string `yaml:"namespaces"`
}

// Subjects name requesters: users (exact, or a prefix ending in *), groups
// (the same), and service accounts as namespace:name (name may be *).
type Subjects struct {
	Users           []string `yaml:"users"`
	Groups          []string `yaml:"groups"`
	ServiceAccounts []string `yaml:"serviceAccounts"`
}

// Role is one entry of the role table. A role is a security boundary: the
// role of a stored object judges its UPDATE and DELETE, so removing or
// changing qn-role never escapes it (see binding.go).
type Role struct {
	// Operations the role may perform; any other is denied. DELETE here
	// lets anyone who may write under the role delete its objects.
	Operations []string `yaml:"operations"`
	// Requesters, when set, are the only ones who may create objects under
	// the role or move objects into it; nil admits anyone.
	Requesters *Subjects `yaml:"requesters"`
	// Delete names who may delete objects of the role when DELETE is not
	// among Operations (e.g. cluster admins). The control plane's own
	// deleters (namespace controller, garbage collector) are always admitted.
	Delete *Subjects `yaml:"delete"`
	// MoveTo lists the roles a stored object of this role may move to by
	// changing or removing qn-role; empty means it may not move.
	MoveTo []string `yaml:"moveTo"`
	// Window limits how many changes the role's requesters make; nil means
	// no limit.
	Window *Window `yaml:"window"`
	// Packages are the Rego packages evaluated for the role.
	Packages []string `yaml:"packages"`
	// Patterns are the pattern policies (<name>.pattern.yaml, Kyverno
	// validate patterns) judged beside the packages on the validating path.
	Patterns []string `yaml:"patterns"`
	// Policies are policies as users keep them in other dialects, by
	// metadata.name: Kyverno ClusterPolicies and Policies, Kubernetes
	// ValidatingAdmissionPolicies, Kyverno ValidatingPolicies (any *.yaml
	// file of the directory). They are judged beside the packages and the
	// patterns on the validating path.
	Policies []string `yaml:"policies"`
	// Enforcement of the role's denials; default deny.
	Enforcement Enforcement `yaml:"enforcement"`
	// PackageEnforcement and PatternEnforcement override Enforcement for
	// the denials of one listed package or pattern policy, so a new rule
	// can run as warn or dryrun inside an enforcing role (or be enforced
	// inside a role that only warns). The role table's own refusals and
	// the rate window keep the role's enforcement.
	PackageEnforcement map[string]Enforcement `yaml:"packageEnforcement"`
	PatternEnforcement map[string]Enforcement `yaml:"patternEnforcement"`
	// OnError applies when the policies fail; default deny.
	OnError OnError `yaml:"onError"`
	// Parameters are what the role's policies read as data.roles.<role>.
	Parameters map[string]any `yaml:"parameters"`
}

// Window is a sliding rate window: at most Limit changes per Period per Key.
type Window struct {
	Limit     int       `yaml:"limit"`
	PeriodRaw string    `yaml:"period"`
	Key       WindowKey `yaml:"key"`
	// OnStoreError says what happens while a shared window store (Redis)
	// cannot answer: failOpen (the default) admits and counts on this
	// replica alone, failClosed refuses with 503.
	OnStoreError window.OnStoreError `yaml:"onStoreError"`
	// Kinds are the kinds of object whose changes the window counts:
	// "Kind" for the core group, "group/Kind" otherwise, "*" for every
	// kind. Default: QuantumNodes only, so a role that also judges Pods or
	// Deployments (webhook.additionalResources) never rate-limits the
	// controllers that create them unless it says so.
	Kinds  []string      `yaml:"kinds"`
	Period time.Duration `yaml:"-"`
	// counted is Kinds parsed; nil counts every kind.
	counted map[windowKind]bool
}

// windowKind is a kind a window counts, by group and kind.
type windowKind struct{ group, kind string }

// DefaultWindowKinds are the kinds a window counts when it names none.
var DefaultWindowKinds = []string{"qn.dev/QuantumNode"}

// Counts reports whether the window counts a change of an object of kind
// k.
func (w *Window) Counts(k GroupVersionKind) bool {
	return w.counted == nil || w.counted[windowKind{group: k.Group, kind: k.Kind}]
}

// parseWindowKinds parses Kinds, the default when empty; nil means every
// kind. The error names the entry that is not a kind.
func parseWindowKinds(kinds []string) (map[windowKind]bool, error) {
	if len(kinds) == 0 {
		kinds = DefaultWindowKinds
	}
	out := map[windowKind]bool{}
	for i, k := range kinds {
		if k == "*" {
			if len(kinds) > 1 {
				return nil, fmt.Errorf("kinds[%d]: \"*\" counts every kind; list it alone", i)
			}
			return nil, nil
		}
		group, kind, grouped := strings.Cut(k, "/")
		if !grouped {
			group, kind = "", k
		}
		if kind == "" || strings.ContainsAny(kind, "/.*") || kind[0] < 'A' || kind[0] > 'Z' || grouped && (group == "" || strings.Contains(group, "/")) {
			return nil, fmt.Errorf("kinds[%d]: %q is not a kind; write Kind for the core group (Pod), group/Kind otherwise (apps/Deployment, qn.dev/QuantumNode), or \"*\"", i, k)
		}
		out[windowKind{group: group, kind: kind}] = true
	}
	return out, nil
}

// Allows reports whether op is one of the role's operations.
func (r Role) Allows(op string) bool {
	for _, o := range r.Operations {
		if o == op {
			return true
		}
	}
	return false
}

// Names lists the roles, sorted.
func (t *RoleTable) Names() []string {
	names := make([]string, 0, len(t.Roles))
	for n := range t.Roles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// allowedKeys is the shape of roles.yaml, for unknown-field errors that say
// where the typo is and what was meant. "*" is any key (a role name);
// parameters are free-form.
var allowedKeys = map[string][]string{
	"":                   {"defaultRole", "exemptions", "roles", "inventory"},
	"exemptions":         {"users", "groups", "namespaces"},
	"roles.*":            {"operations", "requesters", "delete", "moveTo", "window", "packages", "patterns", "policies", "enforcement", "packageEnforcement", "patternEnforcement", "onError", "parameters"},
	"roles.*.window":     {"limit", "period", "key", "onStoreError", "kinds"},
	"roles.*.requesters": {"users", "groups", "serviceAccounts"},
	"roles.*.delete":     {"users", "groups", "serviceAccounts"},
}

// ParseRoleTable decodes and validates roles.yaml. The error is Problems:
// every problem of the file, each naming the line and the field, with what
// would be valid.
func ParseRoleTable(file string, src []byte) (*RoleTable, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(src, &root); err != nil {
		p := problem.FromYAML(file, err)
		p.Hint = "roles.yaml must be one YAML mapping: defaultRole, exemptions, roles"
		return nil, Problems{p}
	}
	if len(root.Content) == 0 {
		return nil, Problems{{File: file, Line: 1, Path: "roles", Message: "the file is empty; declare defaultRole and at least one role"}}
	}
	v := &validator{file: file, doc: root.Content[0]}
	v.checkKeys(v.doc, "")
	var t RoleTable
	if err := v.doc.Decode(&t); err != nil {
		// Field types are wrong: report them, not what follows from them.
		var typeErr *yaml.TypeError
		if !errors.As(err, &typeErr) {
			return nil, append(v.problems, problem.FromYAML(file, err))
		}
		for _, msg := range typeErr.Errors {
			v.problems = append(v.problems, problem.FromYAML(file, errors.New(msg)))
		}
		return nil, v.problems
	}
	v.validate(&t)
	if len(v.problems) > 0 {
		return nil, v.problems
	}
	t.doc = v.doc
	return &t, nil
}

// validator collects the problems of one role table.
type validator struct {
	file     string
	doc      *yaml.Node
	problems Problems
}

// at records a problem at the line of path (or of its nearest parent
// present).
func (v *validator) at(path string, format string, args ...any) {
	v.problems = append(v.problems, &Problem{File: v.file, Line: lineOf(v.doc, path), Path: path, Message: fmt.Sprintf(format, args...)})
}

// checkKeys records every key the role table does not know.
func (v *validator) checkKeys(n *yaml.Node, path string) {
	if n.Kind != yaml.MappingNode {
		return
	}
	pattern := path
	if strings.HasPrefix(path, "roles.") {
		parts := strings.SplitN(path, ".", 3)
		parts[1] = "*"
		pattern = strings.Join(parts, ".")
	}
	allowed, checked := allowedKeys[pattern]
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		child := key.Value
		if path != "" {
			child = path + "." + key.Value
		}
		if checked && !slices.Contains(allowed, key.Value) {
			v.problems = append(v.problems, &Problem{File: v.file, Line: key.Line, Path: child,
				Message: fmt.Sprintf("unknown field (known here: %s)", strings.Join(allowed, ", "))})
			continue
		}
		if pattern == "roles.*" && key.Value == "parameters" {
			continue // free-form
		}
		v.checkKeys(val, child)
	}
}

func (v *validator) validate(t *RoleTable) {
	switch {
	case len(t.Roles) == 0:
		v.at("roles", "declare at least one role")
	case t.DefaultRole == "":
		v.at("defaultRole", "name the role for requests without a qn-role annotation (one of %s)", strings.Join(t.Names(), ", "))
	default:
		if _, ok := t.Roles[t.DefaultRole]; !ok {
			v.at("defaultRole", "%q is not one of the declared roles (%s)", t.DefaultRole, strings.Join(t.Names(), ", "))
		}
	}
	for _, name := range t.Names() {
		r := t.Roles[name]
		v.role(t, name, &r)
		t.Roles[name] = r
	}
	v.inventory(t)
}

// role checks one role and fills in its defaults.
func (v *validator) role(t *RoleTable, name string, r *Role) {
	p := "roles." + name
	if len(r.Operations) == 0 {
		v.at(p+".operations", "list at least one of %s", strings.Join(Operations, ", "))
	}
	for _, op := range r.Operations {
		if !slices.Contains(Operations, op) {
			v.at(p+".operations", "%q is not an operation (use %s)", op, strings.Join(Operations, ", "))
		}
	}
	v.subjects(p+".requesters", r.Requesters)
	v.subjects(p+".delete", r.Delete)
	for _, to := range r.MoveTo {
		if _, ok := t.Roles[to]; !ok {
			v.at(p+".moveTo", "%q is not one of the declared roles (%s)", to, strings.Join(t.Names(), ", "))
		}
		if to == name {
			v.at(p+".moveTo", "a role cannot move to itself; list other roles")
		}
	}
	if len(r.Packages) == 0 && len(r.Patterns) == 0 && len(r.Policies) == 0 {
		v.at(p+".packages", "list at least one Rego package (e.g. qn.quantumnode), pattern policy (patterns: [name]) or policy (policies: [name])")
	}
	switch r.Enforcement {
	case "":
		r.Enforcement = EnforceDeny
	case EnforceDeny, EnforceWarn, EnforceDryRun:
	default:
		v.at(p+".enforcement", "%q is not an enforcement (use deny, warn or dryrun)", r.Enforcement)
	}
	v.overrides(p+".packageEnforcement", r.PackageEnforcement, r.Packages, "packages")
	v.overrides(p+".patternEnforcement", r.PatternEnforcement, r.Patterns, "patterns")
	switch r.OnError {
	case "":
		r.OnError = OnErrorDeny
	case OnErrorDeny, OnErrorAllow:
	default:
		v.at(p+".onError", "%q is not an onError (use deny or allow)", r.OnError)
	}
	if w := r.Window; w != nil {
		if w.Limit <= 0 {
			v.at(p+".window.limit", "%d admits nothing; use a positive number of changes per period (remove window for no limit)", w.Limit)
		}
		d, err := time.ParseDuration(w.PeriodRaw)
		if err != nil || d <= 0 {
			v.at(p+".window.period", "%q is not a positive duration (write e.g. 60s or 1m)", w.PeriodRaw)
		}
		w.Period = d
		switch w.Key {
		case "":
			w.Key = KeyUser
		case KeyUser, KeyNamespace, KeyRole:
		default:
			v.at(p+".window.key", "%q is not a window key (use user, namespace or role)", w.Key)
		}
		counted, err := parseWindowKinds(w.Kinds)
		if err != nil {
			v.at(p+".window.kinds", "%v", err)
		}
		w.counted = counted
		switch w.OnStoreError {
		case "":
			w.OnStoreError = window.FailOpen
		case window.FailOpen, window.FailClosed:
		default:
			v.at(p+".window.onStoreError", "%q is not an onStoreError (use failOpen or failClosed)", w.OnStoreError)
		}
	}
}

// overrides checks a per-package or per-pattern enforcement map: every key
// is one the role lists (an override of a rule that never runs under the
// role would silently do nothing), every value an enforcement.
func (v *validator) overrides(path string, m map[string]Enforcement, listed []string, field string) {
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(listed, name) {
			v.at(path+"."+name, "%q is not among the role's %s (%s); an override of what the role does not run changes nothing", name, field, strings.Join(listed, ", "))
		}
		switch m[name] {
		case EnforceDeny, EnforceWarn, EnforceDryRun:
		default:
			v.at(path+"."+name, "%q is not an enforcement (use deny, warn or dryrun)", m[name])
		}
	}
}

// EnforcementOf is the enforcement of the denials of one of the role's
// packages (or, with pattern, pattern policies): its override, else the
// role's.
func (r *Role) EnforcementOf(source string, pattern bool) Enforcement {
	m := r.PackageEnforcement
	if pattern {
		m = r.PatternEnforcement
	}
	if e, ok := m[source]; ok {
		return e
	}
	return r.Enforcement
}

// hasOverrides says some package or pattern of the role has its own
// enforcement.
func (r *Role) hasOverrides() bool {
	return len(r.PackageEnforcement)+len(r.PatternEnforcement) > 0
}

// subjects checks a requesters or delete list: every entry names someone,
// and each kind of name is in its own list, so a typo never admits or
// refuses the wrong requester silently.
func (v *validator) subjects(path string, s *Subjects) {
	if s == nil {
		return
	}
	if len(s.Users)+len(s.Groups)+len(s.ServiceAccounts) == 0 {
		v.at(path, "lists nobody; name users, groups or serviceAccounts (remove %s to leave it unrestricted)", path[strings.LastIndex(path, ".")+1:])
		return
	}
	for _, list := range []struct {
		field string
		names []string
	}{{"users", s.Users}, {"groups", s.Groups}, {"serviceAccounts", s.ServiceAccounts}} {
		for _, n := range list.names {
			if strings.TrimSpace(n) == "" || strings.ContainsAny(n, " \t\n") {
				v.at(path+"."+list.field, "%q is not a name (no spaces, not empty)", n)
				continue
			}
			switch list.field {
			case "groups":
				if strings.HasPrefix(n, serviceAccountPrefix) {
					v.at(path+"."+list.field, "%q is a service account's user name, not a group; list it under serviceAccounts as namespace:name", n)
				}
			case "serviceAccounts":
				ns, sa, ok := strings.Cut(n, ":")
				if !ok || ns == "" || sa == "" || strings.Contains(sa, ":") || strings.Contains(ns, "*") {
					v.at(path+"."+list.field, "%q is not namespace:name (the name may be *, e.g. qn-system:deployer or ci:*)", n)
				}
			}
		}
	}
}

// Line is the line of a dotted path ("roles.realtime.packages") in the
// role table's file, or of its nearest ancestor present; 0 for a table
// that was not parsed from a file.
func (t *RoleTable) Line(path string) int {
	if t == nil || t.doc == nil {
		return 0
	}
	return lineOf(t.doc, path)
}

// lineOf finds the line of a dotted path in the document, or of its
// nearest ancestor that exists.
func lineOf(doc *yaml.Node, path string) int {
	line := doc.Line
	n := doc
	for _, part := range strings.Split(path, ".") {
		if n.Kind != yaml.MappingNode {
			return line
		}
		found := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == part {
				line, n, found = n.Content[i].Line, n.Content[i+1], true
				break
			}
		}
		if !found {
			return line
		}
	}
	return line
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }
