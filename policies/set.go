package policies

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	"github.com/quantumnode/qn-admission/internal/problem"
	"github.com/quantumnode/qn-admission/policies/dialect"
	"github.com/quantumnode/qn-admission/policies/pattern"
	"github.com/quantumnode/qn-admission/rego"
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
	// MaxFileBytes and MaxSetBytes bound what a policy directory's
	// reading takes: one file, and every file read for one set. A
	// directory over either is refused with an error naming the file.
	// 0: DefaultMaxPolicyFileBytes, DefaultMaxPolicySetBytes.
	MaxFileBytes, MaxSetBytes int64
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
	// denyFirst holds, for each role with a window whose deny rules do not
	// read input.context.window, its validation query in two stages
	// (Plan.DenyFirst).
	denyFirst map[string]*rego.Stages
	// windowWarners are the packages whose warn rules may read
	// input.context.window: what they say is about the change being
	// counted, so a change the policies refuse gets none of it
	// (withoutWindowWarnings). Set when a role has a window.
	windowWarners map[string]bool
	// patterns are each role's pattern policies, judged on the validating
	// path beside the validate query; absent for a role without any.
	patterns map[string][]*pattern.Policy
	// dialects are each role's policies in other dialects (roles.yaml's
	// policies), judged beside the patterns.
	dialects    map[string][]dialect.Policy
	allDialects []dialect.Policy
	// fields is what of the input the set's policies may read.
	fields *inputFields
	// objectReads is what of the objects its decisions may read.
	objectReads *ObjectReads
}

// Load reads a policy directory (roles.yaml, *.rego, data.json|yaml),
// compiles it as one set, prepares one query per role and runs the Rego unit
// tests. It goes as far as it can in one pass, and its error is Problems:
// every problem of the role table, the data and the Rego files, each with
// its file, line and a hint; nothing is half-loaded.
func Load(ctx context.Context, fsys fs.FS, opts LoadOptions) (*Set, error) {
	var problems Problems
	rolesSrc, roles := readRoleTable(fsys, &problems)
	patterns, patternFiles := rolePatterns(fsys, roles, &problems)
	dialectDocs, dialectFiles := readDialectDocuments(fsys, &problems)
	dialects, allDialects := routeDialects(dialectDocs, roles, &problems)
	data, dataSrc := readData(fsys, &problems)
	// Role parameters are data too: a role's policies read data.roles.<role>.
	params := map[string]any{}
	if roles != nil {
		for name, r := range roles.Roles {
			p := r.Parameters
			if p == nil {
				p = map[string]any{}
			}
			params[name] = p
		}
	}
	data[RoleParametersKey] = params
	modules, err := rego.ReadModules(fsys)
	if err != nil {
		problems = append(problems, &Problem{File: fileOf(err), Message: err.Error(), Hint: "make every .rego file a readable regular file within the size limits"})
		return nil, problems
	}
	if len(modules) == 0 && !patternsOnly(roles) {
		problems = append(problems, &Problem{File: ".", Message: "no .rego files", Hint: "add the Rego packages roles.yaml lists"})
	}
	compiled, err := rego.Compile(modules, data, rego.CompileOptions{AllowNetwork: opts.AllowNetwork})
	if err != nil {
		problems = append(problems, regoProblems(err)...)
	}
	if compiled == nil || roles == nil {
		return nil, problems.Err()
	}
	if problems = append(problems, undeclaredPackages(roles, compiled)...); len(problems) > 0 {
		return nil, problems
	}
	set := &Set{Revision: contentRevision(rolesSrc, dataSrc, modules, append(patternFiles, dialectFiles...)), Roles: roles, Compiled: compiled,
		patterns: patterns, dialects: dialects, allDialects: allDialects,
		fields: newInputFields(compiled), objectReads: objectReadsOf(compiled)}
	problems = set.prepare(ctx, opts.EvalTimeout)
	if !opts.SkipTests && len(problems) == 0 {
		results, err := compiled.RunTests(ctx)
		if err != nil {
			problems = append(problems, &Problem{File: ".", Message: err.Error(), Hint: "qn-webhook refuses a set whose Rego tests cannot run"})
		}
		problems = append(problems, TestProblems(results)...)
	}
	if len(problems) > 0 {
		return nil, problems
	}
	return set, nil
}

// undeclaredPackages are the packages roles list that no module declares.
func undeclaredPackages(roles *RoleTable, compiled *rego.Compiled) Problems {
	var problems Problems
	for _, name := range roles.Names() {
		for _, pkg := range roles.Roles[name].Packages {
			if !compiled.HasPackage(pkg) {
				problems = append(problems, &Problem{File: RolesFile, Line: roles.Line("roles." + name + ".packages"), Path: "roles." + name + ".packages",
					Message: fmt.Sprintf("package %q is not declared by any .rego file (known packages: %s)", pkg, strings.Join(compiled.Packages(), ", ")),
					Hint:    fmt.Sprintf("fix the name or add a module with `package %s`", pkg)})
			}
		}
	}
	return problems
}

// prepare builds each role's validation and mutation queries.
func (s *Set) prepare(ctx context.Context, timeout time.Duration) Problems {
	var problems Problems
	s.validate = make(map[string]*rego.Query, len(s.Roles.Roles))
	s.mutate = make(map[string]*rego.Query, len(s.Roles.Roles))
	s.denyFirst = map[string]*rego.Stages{}
	var readers map[string]map[string]bool // windowReaders, computed once
	for _, name := range s.Roles.Names() {
		packages := s.Roles.Roles[name].Packages
		if len(packages) == 0 {
			continue // a role judged by pattern policies only
		}
		v, err := s.Compiled.Prepare(ctx, packages, rego.ValidationRules, timeout)
		if err == nil {
			s.mutate[name], err = s.Compiled.Prepare(ctx, mutatingPackages(s.Roles.Roles[name]), rego.MutationRules, timeout)
		}
		if err == nil && s.Roles.Roles[name].Window != nil {
			if readers == nil {
				readers = windowReaders(s.Compiled)
				s.windowWarners = readers["warn"]
			}
			if !slices.ContainsFunc(packages, func(p string) bool { return readers["deny"][p] }) {
				s.denyFirst[name], err = s.Compiled.PrepareStages(ctx, packages, rego.ValidationRules,
					func(pkg, rule string) bool { return readers[rule][pkg] }, timeout)
			}
		}
		if err != nil {
			problems = append(problems, &Problem{File: RolesFile, Line: s.Roles.Line("roles." + name + ".packages"), Path: "roles." + name + ".packages", Message: err.Error()})
		}
		s.validate[name] = v
	}
	return problems
}

// windowPath is input.context.window, below input.
var windowPath = []string{"context", "window"}

// windowReaders names, for deny and for warn, the packages with such a
// rule that may read input.context.window, itself or through the rules and
// functions it may evaluate (a read the analysis cannot follow counts).
// A windowed role none of whose deny rules may read it is judged deny
// first (Plan.DenyFirst), its warn rules that may read it in the second
// stage.
func windowReaders(c *rego.Compiled) map[string]map[string]bool {
	out := map[string]map[string]bool{"deny": {}, "warn": {}}
	for _, r := range c.RuleInputReads("deny", "warn") {
		if r.Reads(windowPath) {
			out[r.Name][r.Package] = true
		}
	}
	return out
}

// mutatingPackages are the role's packages whose patches apply: a package
// in dryrun (its own, or the role's) proposes no patch, as a dryrun role
// proposes none.
func mutatingPackages(r Role) []string {
	out := make([]string, 0, len(r.Packages))
	for _, pkg := range r.Packages {
		if r.EnforcementOf(pkg, false) != EnforceDryRun {
			out = append(out, pkg)
		}
	}
	return out
}

// readRoleTable reads and validates roles.yaml, adding its problems.
func readRoleTable(fsys fs.FS, problems *Problems) ([]byte, *RoleTable) {
	src, err := fs.ReadFile(fsys, RolesFile)
	if err != nil {
		msg := fmt.Sprintf("read role table: %v", err)
		if errors.Is(err, fs.ErrNotExist) {
			msg = "missing: a policy directory needs a role table (read role table: file does not exist)"
		}
		*problems = append(*problems, &Problem{File: RolesFile, Message: msg,
			Hint: "add roles.yaml with defaultRole and at least one role (see rego/bundle/roles.yaml)"})
		return nil, nil
	}
	roles, err := ParseRoleTable(RolesFile, src)
	if err != nil {
		*problems = append(*problems, problem.Of(err, RolesFile)...)
		return src, nil
	}
	return src, roles
}

// readData reads data.json and data.yaml into one document, adding their
// problems. The keys are located with a YAML parse (JSON is YAML); the
// values decode through JSON, as the policies see them.
func readData(fsys fs.FS, problems *Problems) (map[string]any, []byte) {
	data := map[string]any{}
	var all []byte
	for _, name := range DataFiles {
		src, err := fs.ReadFile(fsys, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // data is optional
		}
		if err != nil {
			*problems = append(*problems, &Problem{File: name, Message: err.Error(), Hint: "data must be a readable regular file within the size limits"})
			continue
		}
		all = append(all, src...)
		var root yamlv3.Node
		if err := yamlv3.Unmarshal(src, &root); err != nil {
			p := problem.FromYAML(name, err)
			p.Hint = "data must be one JSON or YAML object"
			*problems = append(*problems, p)
			continue
		}
		var doc map[string]any
		if err := yaml.Unmarshal(src, &doc); err != nil {
			*problems = append(*problems, &Problem{File: name, Message: err.Error(), Hint: "data must be one JSON or YAML object"})
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(doc)) {
			v := doc[k]
			line := 0
			if len(root.Content) > 0 {
				line = lineOf(root.Content[0], k)
			}
			if k == RoleParametersKey {
				*problems = append(*problems, &Problem{File: name, Line: line,
					Message: fmt.Sprintf("top-level key %q is reserved for role parameters (roles.<role>.parameters in %s)", k, RolesFile),
					Hint:    "put role parameters under roles.<role>.parameters in roles.yaml, or rename the key"})
				continue
			}
			if _, dup := data[k]; dup {
				*problems = append(*problems, &Problem{File: name, Line: line,
					Message: fmt.Sprintf("key %q is also defined by another data file", k), Hint: "define each top-level key in one data file"})
				continue
			}
			data[k] = v
		}
	}
	return data, all
}

// fileOf is the file a read error names, "." when it names none.
func fileOf(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) && fs.ValidPath(pe.Path) {
		return pe.Path
	}
	return "."
}

// contentRevision names a policy directory by a hash of what it contains, so
// two replicas with the same files report the same revision.
func contentRevision(roles, data []byte, modules []rego.Module, patterns []pattern.File) string {
	h := sha256.New()
	h.Write(roles)
	h.Write(data)
	sorted := append([]rego.Module(nil), modules...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for _, m := range sorted {
		fmt.Fprintf(h, "\x00%s\x00%s", m.Path, m.Source)
	}
	// Pattern files come sorted by path; a directory without any hashes as
	// it did before pattern policies existed.
	for _, f := range patterns {
		fmt.Fprintf(h, "\x00%s\x00%s", f.Path, f.Source)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))[:12]
}
