package policies

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/quantumnode/qn-admission/rego"
	"sigs.k8s.io/yaml"
)

// RoleParametersKey is where role parameters appear in data.
const RoleParametersKey = "roles"

// DataFiles hold the document policies read as data (role parameters such as
// allowed zones). JSON is YAML, so one decoder serves both.
var DataFiles = []string{"data.json", "data.yaml"}

// LoadOptions tune how a policy directory becomes a Set.
type LoadOptions struct {
	// EvalTimeout bounds each policy evaluation.
	EvalTimeout time.Duration
	// AllowNetwork keeps Rego's network built-ins (http.send, ...).
	AllowNetwork bool
	// SkipTests loads a set without running its Rego unit tests.
	SkipTests bool
}

// Set is one loaded, compiled and self-tested revision of a policy
// directory. It is immutable: a reload builds a new Set and swaps it in.
type Set struct {
	Revision string
	Roles    *RoleTable
	Compiled *rego.Compiled
	// Each role has one query per path: validation needs deny and warn,
	// mutation only patch, so neither evaluates the other's rules.
	validate map[string]*rego.Query
	mutate   map[string]*rego.Query
}

// Load reads a policy directory (roles.yaml, *.rego, data.json|yaml),
// compiles it as one set, prepares one query per role and runs the Rego unit
// tests. Any failure is an error naming the file and what broke; nothing is
// half-loaded.
func Load(ctx context.Context, fsys fs.FS, opts LoadOptions) (*Set, error) {
	rolesSrc, err := fs.ReadFile(fsys, RolesFile)
	if err != nil {
		return nil, fmt.Errorf("read role table: %w", err)
	}
	roles, err := ParseRoleTable(RolesFile, rolesSrc)
	if err != nil {
		return nil, err
	}
	data, dataSrc, err := readData(fsys)
	if err != nil {
		return nil, err
	}
	// Role parameters are data too: a role's policies read data.roles.<role>.
	if _, clash := data[RoleParametersKey]; clash {
		return nil, fmt.Errorf("data: top-level key %q is reserved for role parameters (roles.<role>.parameters in %s)", RoleParametersKey, RolesFile)
	}
	params := make(map[string]any, len(roles.Roles))
	for name, r := range roles.Roles {
		p := r.Parameters
		if p == nil {
			p = map[string]any{}
		}
		params[name] = p
	}
	data[RoleParametersKey] = params
	modules, err := rego.ReadModules(fsys)
	if err != nil {
		return nil, err
	}
	compiled, err := rego.Compile(modules, data, rego.CompileOptions{AllowNetwork: opts.AllowNetwork})
	if err != nil {
		return nil, err
	}
	set := &Set{
		Revision: contentRevision(rolesSrc, dataSrc, modules),
		Roles:    roles,
		Compiled: compiled,
		validate: make(map[string]*rego.Query, len(roles.Roles)),
		mutate:   make(map[string]*rego.Query, len(roles.Roles)),
	}
	for _, name := range roles.Names() {
		packages := roles.Roles[name].Packages
		v, err := compiled.Prepare(ctx, packages, rego.ValidationRules, opts.EvalTimeout)
		if err != nil {
			return nil, fmt.Errorf("%s: roles.%s.packages: %w", roles.packageLine(RolesFile, rolesSrc, name), name, err)
		}
		m, err := compiled.Prepare(ctx, packages, rego.MutationRules, opts.EvalTimeout)
		if err != nil {
			return nil, fmt.Errorf("%s: roles.%s.packages: %w", roles.packageLine(RolesFile, rolesSrc, name), name, err)
		}
		set.validate[name], set.mutate[name] = v, m
	}
	if !opts.SkipTests {
		results, err := compiled.RunTests(ctx)
		if err != nil {
			return nil, err
		}
		if failed := rego.FailedTests(results); len(failed) > 0 {
			var b strings.Builder
			fmt.Fprintf(&b, "%d of %d Rego tests failed:", len(failed), len(results))
			for _, f := range failed {
				fmt.Fprintf(&b, " %s %s.%s: %s;", f.Location, f.Package, f.Name, f.Failure)
			}
			return nil, fmt.Errorf("%s", strings.TrimSuffix(b.String(), ";"))
		}
	}
	return set, nil
}

func readData(fsys fs.FS) (map[string]any, []byte, error) {
	data := map[string]any{}
	var all []byte
	for _, name := range DataFiles {
		src, err := fs.ReadFile(fsys, name)
		if err != nil {
			continue // data is optional
		}
		var doc map[string]any
		if err := yaml.Unmarshal(src, &doc); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		for k, v := range doc {
			if _, dup := data[k]; dup {
				return nil, nil, fmt.Errorf("%s: key %q is also defined by another data file", name, k)
			}
			data[k] = v
		}
		all = append(all, src...)
	}
	return data, all, nil
}

// contentRevision names a policy directory by a hash of what it contains, so
// two replicas with the same files report the same revision.
func contentRevision(roles, data []byte, modules []rego.Module) string {
	h := sha256.New()
	h.Write(roles)
	h.Write(data)
	sorted := append([]rego.Module(nil), modules...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for _, m := range sorted {
		fmt.Fprintf(h, "\x00%s\x00%s", m.Path, m.Source)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))[:12]
}
