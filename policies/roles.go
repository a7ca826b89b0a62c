package policies

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
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

var knownOperations = []string{"CREATE", "UPDATE", "DELETE", "CONNECT"}

// RoleTable is roles.yaml: the roles requests can run under.
type RoleTable struct {
	// DefaultRole serves requests without a qn-role annotation.
	DefaultRole string `yaml:"defaultRole"`
	// Exemptions are admitted without policies or windows.
	Exemptions Exemptions `yaml:"exemptions"`
	// Roles by name.
	Roles map[string]Role `yaml:"roles"`
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
	// Enforcement of the role's denials; default deny.
	Enforcement Enforcement `yaml:"enforcement"`
	// OnError applies when the policies fail; default deny.
	OnError OnError `yaml:"onError"`
	// Parameters are what the role's policies read as data.roles.<role>.
	Parameters map[string]any `yaml:"parameters"`
}

// Window is a sliding rate window: at most Limit changes per Period per Key.
type Window struct {
	Limit     int           `yaml:"limit"`
	PeriodRaw string        `yaml:"period"`
	Key       WindowKey     `yaml:"key"`
	Period    time.Duration `yaml:"-"`
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

// fieldError is a problem in roles.yaml at a line, for a field path.
type fieldError struct {
	file, path, problem string
	line                int
}

func (e *fieldError) Error() string {
	return fmt.Sprintf("%s:%d: %s: %s", e.file, e.line, e.path, e.problem)
}

// allowedKeys is the shape of roles.yaml, for unknown-field errors that say
// where the typo is and what was meant. "*" is any key (a role name);
// parameters are free-form.
var allowedKeys = map[string][]string{
	"":                   {"defaultRole", "exemptions", "roles"},
	"exemptions":         {"users", "groups", "namespaces"},
	"roles.*":            {"operations", "requesters", "delete", "moveTo", "window", "packages", "enforcement", "onError", "parameters"},
	"roles.*.window":     {"limit", "period", "key"},
	"roles.*.requesters": {"users", "groups", "serviceAccounts"},
	"roles.*.delete":     {"users", "groups", "serviceAccounts"},
}

// ParseRoleTable decodes and validates roles.yaml. Every problem is an error
// naming the file, the line and the field, with what would be valid.
func ParseRoleTable(file string, src []byte) (*RoleTable, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(src, &root); err != nil {
		return nil, fmt.Errorf("%s: %s", file, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(root.Content) == 0 {
		return nil, &fieldError{file: file, line: 1, path: "roles", problem: "the file is empty; declare defaultRole and at least one role"}
	}
	doc := root.Content[0]
	if err := checkKeys(file, doc, ""); err != nil {
		return nil, err
	}
	var t RoleTable
	dec := yaml.NewDecoder(bytes.NewReader(src))
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("%s: %s", file, strings.TrimPrefix(strings.ReplaceAll(err.Error(), "\n ", ""), "yaml: unmarshal errors:"))
	}
	v := validator{file: file, doc: doc}
	return &t, v.validate(&t)
}

func checkKeys(file string, n *yaml.Node, path string) error {
	if n.Kind != yaml.MappingNode {
		return nil
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
		if checked && !contains(allowed, key.Value) {
			return &fieldError{file: file, line: key.Line, path: child, problem: fmt.Sprintf("unknown field (known here: %s)", strings.Join(allowed, ", "))}
		}
		if pattern == "roles.*" && key.Value == "parameters" {
			continue // free-form
		}
		if err := checkKeys(file, val, child); err != nil {
			return err
		}
	}
	return nil
}

type validator struct {
	file string
	doc  *yaml.Node
}

// at builds an error at the line of path (or the nearest parent present).
func (v validator) at(path string, format string, args ...any) error {
	return &fieldError{file: v.file, line: lineOf(v.doc, path), path: path, problem: fmt.Sprintf(format, args...)}
}

func (v validator) validate(t *RoleTable) error {
	if len(t.Roles) == 0 {
		return v.at("roles", "declare at least one role")
	}
	if t.DefaultRole == "" {
		return v.at("defaultRole", "name the role for requests without a qn-role annotation (one of %s)", strings.Join(t.Names(), ", "))
	}
	if _, ok := t.Roles[t.DefaultRole]; !ok {
		return v.at("defaultRole", "%q is not one of the declared roles (%s)", t.DefaultRole, strings.Join(t.Names(), ", "))
	}
	for _, name := range t.Names() {
		r := t.Roles[name]
		p := "roles." + name
		if len(r.Operations) == 0 {
			return v.at(p+".operations", "list at least one of %s", strings.Join(knownOperations, ", "))
		}
		for _, op := range r.Operations {
			if !contains(knownOperations, op) {
				return v.at(p+".operations", "%q is not an operation (use %s)", op, strings.Join(knownOperations, ", "))
			}
		}
		for _, sub := range []struct {
			field string
			list  *Subjects
		}{{"requesters", r.Requesters}, {"delete", r.Delete}} {
			if err := v.subjects(p+"."+sub.field, sub.list); err != nil {
				return err
			}
		}
		for _, to := range r.MoveTo {
			if _, ok := t.Roles[to]; !ok {
				return v.at(p+".moveTo", "%q is not one of the declared roles (%s)", to, strings.Join(t.Names(), ", "))
			}
			if to == name {
				return v.at(p+".moveTo", "a role cannot move to itself; list other roles")
			}
		}
		if len(r.Packages) == 0 {
			return v.at(p+".packages", "list at least one Rego package, e.g. qn.quantumnode")
		}
		switch r.Enforcement {
		case "":
			r.Enforcement = EnforceDeny
		case EnforceDeny, EnforceWarn, EnforceDryRun:
		default:
			return v.at(p+".enforcement", "%q is not an enforcement (use deny, warn or dryrun)", r.Enforcement)
		}
		switch r.OnError {
		case "":
			r.OnError = OnErrorDeny
		case OnErrorDeny, OnErrorAllow:
		default:
			return v.at(p+".onError", "%q is not an onError (use deny or allow)", r.OnError)
		}
		if w := r.Window; w != nil {
			if w.Limit <= 0 {
				return v.at(p+".window.limit", "%d admits nothing; use a positive number of changes per period (remove window for no limit)", w.Limit)
			}
			d, err := time.ParseDuration(w.PeriodRaw)
			if err != nil || d <= 0 {
				return v.at(p+".window.period", "%q is not a positive duration (write e.g. 60s or 1m)", w.PeriodRaw)
			}
			w.Period = d
			switch w.Key {
			case "":
				w.Key = KeyUser
			case KeyUser, KeyNamespace, KeyRole:
			default:
				return v.at(p+".window.key", "%q is not a window key (use user, namespace or role)", w.Key)
			}
		}
		t.Roles[name] = r
	}
	return nil
}

// subjects checks a requesters or delete list: every entry names someone,
// and each kind of name is in its own list, so a typo never admits or
// refuses the wrong requester silently.
func (v validator) subjects(path string, s *Subjects) error {
	if s == nil {
		return nil
	}
	if len(s.Users)+len(s.Groups)+len(s.ServiceAccounts) == 0 {
		return v.at(path, "lists nobody; name users, groups or serviceAccounts (remove %s to leave it unrestricted)", path[strings.LastIndex(path, ".")+1:])
	}
	for _, list := range []struct {
		field string
		names []string
	}{{"users", s.Users}, {"groups", s.Groups}, {"serviceAccounts", s.ServiceAccounts}} {
		for _, n := range list.names {
			if strings.TrimSpace(n) == "" || strings.ContainsAny(n, " \t\n") {
				return v.at(path+"."+list.field, "%q is not a name (no spaces, not empty)", n)
			}
			switch list.field {
			case "groups":
				if strings.HasPrefix(n, serviceAccountPrefix) {
					return v.at(path+"."+list.field, "%q is a service account's user name, not a group; list it under serviceAccounts as namespace:name", n)
				}
			case "serviceAccounts":
				ns, sa, ok := strings.Cut(n, ":")
				if !ok || ns == "" || sa == "" || strings.Contains(sa, ":") || strings.Contains(ns, "*") {
					return v.at(path+"."+list.field, "%q is not namespace:name (the name may be *, e.g. qn-system:deployer or ci:*)", n)
				}
			}
		}
	}
	return nil
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

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// packageLine is the line of a role's packages list, for load errors that
// come from compiling them.
func (t *RoleTable) packageLine(file string, src []byte, role string) string {
	var root yaml.Node
	if yaml.Unmarshal(src, &root) != nil || len(root.Content) == 0 {
		return file
	}
	return fmt.Sprintf("%s:%d", file, lineOf(root.Content[0], "roles."+role+".packages"))
}
