package qnctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
)

// Severities of lint problems.
const (
	severityError   = "error"
	severityWarning = "warning"
)

// problem is one lint finding, at a file and line, with a fix hint.
type problem struct {
	File     string `json:"file"`
	Line     int    `json:"line,omitempty"`
	Column   int    `json:"column,omitempty"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
	Hint     string `json:"hint,omitempty"`
}

func (p problem) location() string {
	s := p.File
	if p.Line > 0 {
		s += ":" + strconv.Itoa(p.Line)
		if p.Column > 0 {
			s += ":" + strconv.Itoa(p.Column)
		}
	}
	return s
}

type lintOptions struct {
	Output   string
	Fixtures string
}

func newLintCommand(opts *Options, s Streams) *cobra.Command {
	o := &lintOptions{Output: outputText}
	cmd := &cobra.Command{
		Use:   "lint [DIR]",
		Short: "Check a policy directory the way qn-webhook does before a hot reload",
		Long: `lint checks the policy directory DIR (the bundled policies when omitted):
roles.yaml, data.json|yaml, every Rego file, the role table's packages, the
query prepared for each role, and the Rego unit tests — the checks qn-webhook
runs before it swaps in a reloaded directory — and reports every problem it
can find with file, line and a hint to fix it. Fixture files (DIR/fixtures or
--fixtures) are checked too.

Exit codes: 0 no errors (warnings may be printed), 1 problems found, 2 DIR
cannot be read.`,
		Example: `  # Before you push a policy change
  qnctl lint ./policies

  # Machine-readable problems for an editor or CI annotation
  qnctl lint ./policies -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := ""
			if len(args) == 1 {
				dir = args[0]
			}
			return runLint(cmd.Context(), opts, o, dir, s.Out)
		},
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return nil, cobra.ShellCompDirectiveFilterDirs
		},
	}
	cmd.Flags().StringVarP(&o.Output, "output", "o", o.Output, "Output: text or json.")
	cmd.Flags().StringVar(&o.Fixtures, "fixtures", "", "Fixture cases to check as well (default DIR/fixtures when present).")
	_ = cmd.MarkFlagDirname("fixtures")
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletion(outputText, outputJSON))
	return cmd
}

// lintReport is the outcome of a lint run.
type lintReport struct {
	Policies string    `json:"policies"`
	Problems []problem `json:"problems"`
	// Checked says what was checked when the directory loaded.
	Checked string `json:"checked,omitempty"`
}

func (r *lintReport) add(p problem) { r.Problems = append(r.Problems, p) }

func (r *lintReport) errors() int {
	n := 0
	for _, p := range r.Problems {
		if p.Severity == severityError {
			n++
		}
	}
	return n
}

func runLint(ctx context.Context, opts *Options, o *lintOptions, dir string, w io.Writer) error {
	if o.Output != outputText && o.Output != outputJSON {
		return usagef("--output %q is not one of text, json", o.Output)
	}
	fsys, source, err := policyFS(dir)
	if err != nil {
		return err
	}
	r := &lintReport{Policies: source, Problems: []problem{}}
	lintDirectory(ctx, opts, r, fsys, dir)
	fixtures := o.Fixtures
	if fixtures == "" && dir != "" {
		if files, err := fixtureFiles(filepath.Join(dir, FixturesDir)); err == nil {
			if len(files) > 0 {
				fixtures = filepath.Join(dir, FixturesDir)
			}
		}
	}
	if fixtures != "" {
		lintFixtures(r, fixtures)
	}
	sort.SliceStable(r.Problems, func(i, j int) bool {
		a, b := r.Problems[i], r.Problems[j]
		if a.File != b.File {
			return a.File < b.File
		}
		return a.Line < b.Line
	})
	if o.Output == outputJSON {
		js, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "%s\n", js); err != nil {
			return err
		}
	} else if err := writeLintText(w, r); err != nil {
		return err
	}
	if r.errors() > 0 {
		return failed()
	}
	return nil
}

// lintDirectory runs the checks in the order the server loads a set, and
// goes as far as it can so that one run shows every problem.
func lintDirectory(ctx context.Context, opts *Options, r *lintReport, fsys fs.FS, dir string) {
	for _, misnamed := range [][2]string{{"roles.yml", policies.RolesFile}, {"data.yml", "data.yaml"}} {
		if _, err := fs.Stat(fsys, misnamed[0]); err == nil {
			r.add(problem{File: misnamed[0], Severity: severityWarning, Message: "this file is not read",
				Hint: fmt.Sprintf("rename it to %s", misnamed[1])})
		}
	}
	var table *policies.RoleTable
	rolesSrc, err := fs.ReadFile(fsys, policies.RolesFile)
	if err != nil {
		r.add(problem{File: policies.RolesFile, Severity: severityError, Message: "missing: a policy directory needs a role table",
			Hint: "add roles.yaml with defaultRole and at least one role (see rego/bundle/roles.yaml)"})
	} else if table, err = policies.ParseRoleTable(policies.RolesFile, rolesSrc); err != nil {
		p := problemFromMessage(err.Error(), policies.RolesFile)
		p.Hint = "the message says what is valid here; roles.yaml's fields: defaultRole, exemptions, roles.<name>.{operations, window, packages, enforcement, onError, parameters}"
		r.add(p)
		table = nil
	}
	data, dataOK := lintData(r, fsys)

	modules, err := rego.ReadModules(fsys)
	if err != nil {
		r.add(problem{File: ".", Severity: severityError, Message: err.Error(), Hint: "make every .rego file readable"})
		return
	}
	if len(modules) == 0 {
		r.add(problem{File: ".", Severity: severityError, Message: "no .rego files", Hint: "add the Rego packages roles.yaml lists"})
	}
	parsed := true
	for _, m := range modules {
		if _, err := ast.ParseModuleWithOpts(m.Path, m.Source, ast.ParserOptions{RegoVersion: ast.RegoV1}); err != nil {
			parsed = false
			addRegoErrors(r, m.Path, err)
		}
	}
	if !parsed || !dataOK {
		return
	}
	compiled, err := rego.Compile(modules, data, rego.CompileOptions{AllowNetwork: opts.AllowNetworkBuiltins})
	if err != nil {
		addRegoErrors(r, ".", err)
		return
	}
	if table == nil {
		return
	}
	packagesOK := lintRolePackages(r, table, compiled, rolesSrc)
	if !packagesOK || r.errors() > 0 {
		return
	}
	// The server's own load, as a hot reload runs it; the Rego tests run
	// separately so each failing test is its own problem.
	var set *policies.Set
	if dir == "" {
		set, err = policies.Load(ctx, fsys, opts.loadOptions(true))
	} else {
		set, err = policies.LoadDir(ctx, dir, opts.loadOptions(true))
	}
	if err != nil {
		p := problemFromMessage(strings.TrimPrefix(err.Error(), "policy directory "+dir+": "), ".")
		p.Hint = "qn-webhook would keep serving its last good set; fix this first"
		r.add(p)
		return
	}
	results, err := set.Compiled.RunTests(ctx)
	if err != nil {
		r.add(problem{File: ".", Severity: severityError, Message: err.Error(), Hint: "qn-webhook refuses a set whose Rego tests cannot run"})
		return
	}
	for _, f := range rego.FailedTests(results) {
		p := problemFromMessage(f.Location+": "+strings.TrimPrefix(f.Package, "data.")+"."+f.Name+": "+f.Failure, ".")
		p.Hint = "qn-webhook refuses a set whose Rego tests fail; fix the policy or the test (qnctl test shows every result)"
		r.add(p)
	}
	r.Checked = fmt.Sprintf("%d roles, %d Rego files, %d Rego tests", len(table.Roles), len(modules), len(results))
}

// lintData checks data.json and data.yaml as the server reads them.
func lintData(r *lintReport, fsys fs.FS) (map[string]any, bool) {
	data := map[string]any{}
	ok := true
	for _, name := range policies.DataFiles {
		src, err := fs.ReadFile(fsys, name)
		if err != nil {
			continue
		}
		var doc map[string]any
		if err := yaml.Unmarshal(src, &doc); err != nil {
			p := problemFromMessage(name+": "+err.Error(), name)
			p.Hint = "data must be one JSON or YAML object"
			r.add(p)
			ok = false
			continue
		}
		for k, v := range doc {
			if k == policies.RoleParametersKey {
				r.add(problem{File: name, Line: lineOfKey(src, k), Severity: severityError,
					Message: fmt.Sprintf("top-level key %q is reserved for role parameters", k),
					Hint:    "put role parameters under roles.<role>.parameters in roles.yaml, or rename the key"})
				ok = false
				continue
			}
			if _, dup := data[k]; dup {
				r.add(problem{File: name, Line: lineOfKey(src, k), Severity: severityError,
					Message: fmt.Sprintf("key %q is also defined by another data file", k), Hint: "define each top-level key in one data file"})
				ok = false
				continue
			}
			data[k] = v
		}
	}
	data[policies.RoleParametersKey] = map[string]any{}
	return data, ok
}

// lineOfKey finds the line of a top-level key in a YAML or JSON document.
func lineOfKey(src []byte, key string) int {
	q := regexp.QuoteMeta(key)
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^\s*"?` + q + `"?\s*:`),
		regexp.MustCompile(`"` + q + `"\s*:`),
	} {
		if loc := re.FindIndex(src); loc != nil {
			return 1 + strings.Count(string(src[:loc[0]]), "\n")
		}
	}
	return 0
}

// lintRolePackages checks that every package a role lists exists and
// contributes something.
func lintRolePackages(r *lintReport, t *policies.RoleTable, c *rego.Compiled, rolesSrc []byte) bool {
	ok := true
	rules := map[string]map[string]bool{}
	for _, mod := range c.Modules() {
		pkg := rego.PackageName(mod)
		if rules[pkg] == nil {
			rules[pkg] = map[string]bool{}
		}
		for _, rule := range mod.Rules {
			if ref := rule.Head.Ref(); len(ref) > 0 {
				rules[pkg][ref[0].Value.String()] = true
			}
		}
	}
	for _, name := range t.Names() {
		line := policies.RoleTableLine(rolesSrc, "roles."+name+".packages")
		for _, pkg := range t.Roles[name].Packages {
			if !c.HasPackage(pkg) {
				ok = false
				r.add(problem{File: policies.RolesFile, Line: line, Severity: severityError,
					Message: fmt.Sprintf("roles.%s.packages: package %q is not declared by any .rego file", name, pkg),
					Hint:    fmt.Sprintf("fix the name or add a module with `package %s`; known packages: %s", pkg, strings.Join(c.Packages(), ", "))})
				continue
			}
			if !rules[pkg]["deny"] && !rules[pkg]["warn"] && !rules[pkg]["patch"] {
				r.add(problem{File: policies.RolesFile, Line: line, Severity: severityWarning,
					Message: fmt.Sprintf("roles.%s.packages: package %q has no deny, warn or patch rule, so it never affects a decision", name, pkg),
					Hint:    "add `deny contains msg if { ... }` (or warn/patch) to it, or drop it from the list"})
			}
		}
	}
	return ok
}

// addRegoErrors turns OPA parse and compile errors into problems, one per
// error, with a hint by error code.
func addRegoErrors(r *lintReport, file string, err error) {
	var errs ast.Errors
	if !errors.As(err, &errs) {
		p := problemFromMessage(err.Error(), file)
		r.add(p)
		return
	}
	for _, e := range errs {
		p := problem{File: file, Severity: severityError, Message: e.Message, Hint: regoHint(e)}
		if e.Code != "" {
			p.Message = e.Code + ": " + e.Message
		}
		if e.Location != nil {
			p.File, p.Line, p.Column = e.Location.File, e.Location.Row, e.Location.Col
		}
		r.add(p)
	}
}

var networkBuiltins = []string{"http.send", "net.lookup_ip_addr", "opa.runtime"}

func regoHint(e *ast.Error) string {
	msg := e.Message
	switch e.Code {
	case ast.ParseErr:
		if strings.Contains(msg, "`if` keyword is required") || strings.Contains(msg, "`contains` keyword is required") {
			return "policies are Rego v1: write `deny contains msg if { ... }` (`opa fmt --v0-v1` rewrites a v0 file)"
		}
		return "fix the syntax at this position; policies are Rego v1"
	case ast.UnsafeVarErr:
		return "bind the variable before using it (`some x in ...`, `x := ...`) or read it from input or data"
	case ast.RecursionErr:
		return "a rule must not depend on itself; break the cycle"
	case ast.TypeErr:
		if strings.Contains(msg, "undefined function") {
			for _, b := range networkBuiltins {
				if strings.Contains(msg, b) {
					return "network built-ins are off so a decision never waits on the network; pass --allow-network-builtins to qn-webhook and qnctl only if a policy must call " + b
				}
			}
			return "check the function's name and arity (built-ins: https://www.openpolicyagent.org/docs/policy-reference)"
		}
		if strings.Contains(msg, "undefined ref") {
			return "check the spelling of the rule, package or import this refers to"
		}
		return "the operand types do not fit this call or comparison"
	}
	return "`opa check` on the directory reports the same error"
}

var messageLocation = regexp.MustCompile(`^([^\s:]+\.(?:yaml|yml|json|rego)):(\d+)(?::(\d+))?:\s*(.*)$`)
var yamlLine = regexp.MustCompile(`^([^\s:]+\.(?:yaml|yml|json)):.*?line (\d+):\s*(.*)$`)

// problemFromMessage reads "file:line: message" (or "file: ... line N: ...")
// from an error message; file is used when the message names none.
func problemFromMessage(msg, file string) problem {
	p := problem{File: file, Severity: severityError, Message: msg}
	if m := messageLocation.FindStringSubmatch(msg); m != nil {
		p.File, p.Message = m[1], m[4]
		p.Line, _ = strconv.Atoi(m[2])
		p.Column, _ = strconv.Atoi(m[3])
		return p
	}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		p.File, p.Message = m[1], m[3]
		p.Line, _ = strconv.Atoi(m[2])
	}
	return p
}

// lintFixtures reports every problem of the fixture files.
func lintFixtures(r *lintReport, root string) {
	files, err := fixtureFiles(root)
	if err != nil {
		r.add(problem{File: root, Severity: severityError, Message: err.Error()})
		return
	}
	_, err = loadFixtures(files, time.Now())
	if err == nil {
		return
	}
	for _, e := range flatten(err) {
		var fe *fixtureError
		if errors.As(e, &fe) {
			r.add(problem{File: fe.file, Line: fe.line, Severity: severityError, Message: fe.msg, Hint: "see README, Writing and testing policies, for the fixture format"})
			continue
		}
		p := problemFromMessage(e.Error(), root)
		p.Hint = "see README, Writing and testing policies, for the fixture format"
		r.add(p)
	}
}

func writeLintText(w io.Writer, r *lintReport) error {
	tw := &textWriter{w: w}
	for _, p := range r.Problems {
		tw.line(fmt.Sprintf("%s: %s: %s", p.location(), p.Severity, p.Message))
		if p.Hint != "" {
			tw.line("    hint: " + p.Hint)
		}
	}
	errs := r.errors()
	warnings := len(r.Problems) - errs
	switch {
	case errs > 0:
		tw.line(fmt.Sprintf("%s: %d errors, %d warnings", r.Policies, errs, warnings))
	case warnings > 0:
		tw.line(fmt.Sprintf("%s: ok with %d warnings (%s)", r.Policies, warnings, r.Checked))
	default:
		tw.line(fmt.Sprintf("%s: ok (%s)", r.Policies, r.Checked))
	}
	return tw.err
}

// flatten lists the errors joined (errors.Join) in err, depth first.
func flatten(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, flatten(e)...)
	}
	return out
}
