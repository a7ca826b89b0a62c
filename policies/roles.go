package policies

import (
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// RolesFile is the name of the role table inside a policy directory.
const RolesFile = "roles.yaml"

// Operations a role may be allowed to perform.
var knownOperations = map[string]bool{"CREATE": true, "UPDATE": true, "DELETE": true, "CONNECT": true}

// RoleTable is roles.yaml: the roles requests can run under.
type RoleTable struct {
	// DefaultRole serves requests without a qn-role annotation.
	DefaultRole string `json:"defaultRole"`
	// Roles by name.
	Roles map[string]Role `json:"roles"`
}

// Role is one entry of the role table.
type Role struct {
	// Operations the role may perform; any other is denied.
	Operations []string `json:"operations"`
	// Packages are the Rego packages evaluated for the role, e.g. qn.quantumnode.
	Packages []string `json:"packages"`
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

// ParseRoleTable decodes and validates roles.yaml. Unknown fields are errors,
// so a typo never silently drops a rule.
func ParseRoleTable(path string, data []byte) (*RoleTable, error) {
	var t RoleTable
	if err := yaml.UnmarshalStrict(data, &t); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(t.Roles) == 0 {
		return nil, fmt.Errorf("%s: roles: declare at least one role", path)
	}
	if _, ok := t.Roles[t.DefaultRole]; !ok {
		return nil, fmt.Errorf("%s: defaultRole: %q is not one of the declared roles (%s)", path, t.DefaultRole, strings.Join(t.Names(), ", "))
	}
	for _, name := range t.Names() {
		r := t.Roles[name]
		if len(r.Operations) == 0 {
			return nil, fmt.Errorf("%s: roles.%s.operations: list at least one of CREATE, UPDATE, DELETE, CONNECT", path, name)
		}
		for _, op := range r.Operations {
			if !knownOperations[op] {
				return nil, fmt.Errorf("%s: roles.%s.operations: %q is not an operation (use CREATE, UPDATE, DELETE or CONNECT)", path, name, op)
			}
		}
		if len(r.Packages) == 0 {
			return nil, fmt.Errorf("%s: roles.%s.packages: list at least one Rego package", path, name)
		}
	}
	return &t, nil
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
