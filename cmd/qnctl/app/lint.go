package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/spf13/cobra"

	"github.com/quantumnode/qn-admission/internal/problem"
	"github.com/quantumnode/qn-admission/internal/words"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/pattern"
	"github.com/quantumnode/qn-admission/rego"
)

// Severities of lint problems.
const (
	severityError   = "error"
	severityWarning = "warning"
)

// lintProblem is one lint finding: a problem of the loader's (file, line,
// column, field path, message, hint) or one of lint's own, and how severe
// it is.
type lintProblem struct {
	problem.Problem
	Severity string `json:"severity"`
}

func (p lintProblem) location() string {
	s := p.File
	if p.Line > 0 {
		s += ":" + strconv.Itoa(p.Line)
		if p.Column > 0 {
			s += ":" + strconv.Itoa(p.Column)
		}
	}
	return s
}

// text is the finding after its location: severity, field path, message.
func (p lintProblem) text() string {
	if p.Path != "" {
		return p.Severity + ": " + p.Path + ": " + p.Message
	}
	return p.Severity + ": " + p.Message
}

func lintError(p *problem.Problem) lintProblem {
	return lintProblem{Problem: *p, Severity: severityError}
}

func lintWarning(file string, line int, message, hint string) lintProblem {
	return lintProblem{Problem: problem.Problem{File: file, Line: line, Message: message, Hint: hint}, Severity: severityWarning}
}

type lintOptions struct {
	Output   string
	Fixtures string
	// Strict fails on warnings too.
	Strict bool
	// Schema replaces or adds to the input schema policies are
	// type-checked against; SchemaCheck false skips the check.
	Schema      string
	SchemaCheck bool
	// PrintSchema prints the input schema instead of linting.
	PrintSchema bool
}

func newLintCommand(opts *commonOptions, s Streams) *cobra.Command {
	o := &lintOptions{Output: outputText, SchemaCheck: true}
	cmd := &cobra.Command{
		Use:   "lint [DIR]",
		Short: "Check a policy directory the way qn-webhook does before a hot reload",
		Long: `lint checks the policy directory DIR (the bundled policies when omitted):
roles.yaml, data.json|yaml, every Rego file, the role table's packages, the
query prepared for each role, and the Rego unit tests — the checks qn-webhook
runs before it swaps in a reloaded directory — and reports every problem it
can find with file, line and a hint to fix it. Fixture files (DIR/fixtures or
--fixtures) are checked too.

Warnings name what loads but cannot work as meant: a package with deny,
warn or patch rules that no role lists (its rules never run), a pattern
policy no role lists (unless a comment line of its file says
"# qnctl lint-ignore: unlisted", as the bundled example's does: a file
kept to copy from), a package a role lists that has no such rule, a rule
calling http.send (with --allow-network-builtins: a network round trip
inside every admission request), and a ref the input cannot have.

Every policy is type-checked, as opa check --schema does, against the
schema of its input: the AdmissionReview request, with request.object and
oldObject the QuantumNode of the CRD, and input.context. A misspelt path
such as input.request.object.spec.servcies is reported at its file, line
and column with what the schema has there. --schema FILE replaces that
schema; --schema DIR adds the schemas a rule's METADATA annotation may name
(schema.<file>), its input.json replacing the input's; --print-schema
shows it; --schema-check=false skips the check.

Exit codes: 0 no errors (warnings may be printed; --strict fails on them
too), 1 problems found, 2 DIR cannot be read.`,
		Example: `  # Before you push a policy change
  qnctl lint ./policies

  # Machine-readable problems for an editor or CI annotation
  qnctl lint ./policies -o json

  # The input schema, for opa check --schema or an editor
  qnctl lint --print-schema > input.json`,
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
	cmd.Flags().BoolVar(&o.Strict, "strict", false, "Exit 1 on warnings too (for CI).")
	cmd.Flags().StringVar(&o.Schema, "schema", "", "JSON schema of the input to type-check policies against (a file), or a directory of schemas METADATA annotations name whose input.json, if any, is the input's (default: generated from the QuantumNode CRD and the AdmissionReview).")
	cmd.Flags().BoolVar(&o.SchemaCheck, "schema-check", o.SchemaCheck, "Type-check policies against the input schema (--schema-check=false skips it).")
	cmd.Flags().BoolVar(&o.PrintSchema, "print-schema", false, "Print the input schema as JSON and exit.")
	_ = cmd.MarkFlagDirname("fixtures")
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletion(outputText, outputJSON))
	return cmd
}

// lintReport is the outcome of a lint run.
type lintReport struct {
	Policies string        `json:"policies"`
	Problems []lintProblem `json:"problems"`
	// Checked says what was checked when the directory loaded.
	Checked string `json:"checked,omitempty"`
}

func (r *lintReport) add(p lintProblem) { r.Problems = append(r.Problems, p) }

func (r *lintReport) errors() int {
	n := 0
	for _, p := range r.Problems {
		if p.Severity == severityError {
			n++
		}
	}
	return n
}

func runLint(ctx context.Context, opts *commonOptions, o *lintOptions, dir string, w io.Writer) error {
	if o.Output != outputText && o.Output != outputJSON {
		return usagef("--output %q is not one of text, json", o.Output)
	}
	var schema *inputSchema
	if o.SchemaCheck || o.PrintSchema {
		var err error
		if schema, err = loadInputSchema(o.Schema); err != nil {
			return err
		}
	}
	if o.PrintSchema {
		js, err := json.MarshalIndent(schema.set.Get(ast.SchemaRootRef), "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", js)
		return err
	}
	// The Rego tests run apart so that lint can count them.
	source, err := openPolicies(dir, opts, true)
	if err != nil {
		return err
	}
	r := &lintReport{Policies: source.Name(), Problems: []lintProblem{}}
	lintDirectory(ctx, r, source, schema, opts)
	fixtures := o.Fixtures
	if fixtures == "" && dir != "" {
		if files, err := fixtureFiles(filepath.Join(dir, fixturesDir)); err == nil {
			if len(files) > 0 {
				fixtures = filepath.Join(dir, fixturesDir)
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
	} else if err := writeLintText(w, r, o.Strict); err != nil {
		return err
	}
	if r.errors() > 0 || (o.Strict && len(r.Problems) > 0) {
		return failed()
	}
	return nil
}

// lintDirectory loads the directory as qn-webhook does and reports every
// problem the load found, then what lint adds: warnings the server does not
// refuse a set for (those of the type check against schema too, unless it
// is nil), and each failing Rego test.
func lintDirectory(ctx context.Context, r *lintReport, source policies.Source, schema *inputSchema, opts *commonOptions) {
	fsys := source.FS()
	for _, misnamed := range [][2]string{{"roles.yml", policies.RolesFile}, {"data.yml", "data.yaml"}} {
		if _, err := fs.Stat(fsys, misnamed[0]); err == nil {
			r.add(lintWarning(misnamed[0], 0, "this file is not read", fmt.Sprintf("rename it to %s", misnamed[1])))
		}
	}
	set, err := source.Load(ctx)
	if err != nil {
		for _, p := range problem.Of(err, ".") {
			r.add(lintError(p))
		}
		return
	}
	lintInertPackages(r, set)
	lintUnlistedPackages(r, set)
	patterns, listedPatterns, examplePatterns := lintUnlistedPatterns(r, fsys, set)
	lintUnlistedDialects(r, set)
	lintNetworkCalls(r, set)
	typeChecked := ""
	if schema != nil {
		modules, err := rego.ReadModules(fsys)
		if err != nil {
			r.add(lintError(&problem.Problem{File: ".", Message: err.Error()}))
			return
		}
		lintInputSchema(r, modules, schema, opts)
		typeChecked = "; input type-checked against " + schema.name
	}
	results, err := set.Compiled.RunTests(ctx)
	if err != nil {
		r.add(lintError(&problem.Problem{File: ".", Message: err.Error(), Hint: "qn-webhook refuses a set whose Rego tests cannot run"}))
		return
	}
	for _, p := range policies.TestProblems(results) {
		r.add(lintError(p))
	}
	onPurpose := ""
	if examplePatterns > 0 {
		onPurpose = fmt.Sprintf(", %d unlisted on purpose", examplePatterns)
	}
	r.Checked = fmt.Sprintf("%s, %s, %s, %s (%d listed by a role%s)%s",
		words.Count(len(set.Roles.Roles), "role"), words.Count(len(set.Compiled.Modules()), "Rego file"), words.Count(len(results), "Rego test"),
		words.Count(patterns, "pattern policy", "pattern policies"), listedPatterns, onPurpose, typeChecked)
}

// decisionRules are the rules whose results make a decision.
var decisionRules = map[string]bool{"deny": true, "warn": true, "patch": true}

// lintUnlistedPackages warns of packages with deny, warn or patch rules
// that no role lists: they load, their tests pass, and they never run.
func lintUnlistedPackages(r *lintReport, set *policies.Set) {
	listed := map[string]bool{}
	for _, role := range set.Roles.Roles {
		for _, pkg := range role.Packages {
			listed[pkg] = true
		}
	}
	warned := map[string]bool{}
	for _, mod := range set.Compiled.Modules() {
		pkg := rego.PackageName(mod)
		if listed[pkg] || warned[pkg] || unlistedOnPurpose(moduleComments(mod)) {
			continue
		}
		for _, rule := range mod.Rules {
			ref := rule.Head.Ref()
			if len(ref) == 0 || !decisionRules[ref[0].Value.String()] {
				continue
			}
			warned[pkg] = true
			loc := rule.Location
			r.add(lintWarning(loc.File, loc.Row,
				fmt.Sprintf("package %q has a %s rule but no role in %s lists it, so it never runs", pkg, ref[0].Value.String(), policies.RolesFile),
				fmt.Sprintf("add %s to the packages of the roles it should judge (or packageEnforcement: {%s: warn} to try it first), or delete it", pkg, pkg)))
			break
		}
	}
}

// unlistedDirective is the comment line with which a policy file says no
// role lists it on purpose (an example to copy from): lint does not warn
// that it never runs. Delete the line and the warning is back.
const unlistedDirective = "qnctl lint-ignore: unlisted"

// unlistedOnPurpose says whether one of a file's comment lines (without
// their '#') is the unlisted directive.
func unlistedOnPurpose(comments []string) bool {
	for _, c := range comments {
		if strings.HasPrefix(strings.TrimSpace(c), unlistedDirective) {
			return true
		}
	}
	return false
}

// moduleComments are a Rego module's comments, without their '#'.
func moduleComments(mod *ast.Module) []string {
	out := make([]string, 0, len(mod.Comments))
	for _, c := range mod.Comments {
		out = append(out, string(c.Text))
	}
	return out
}

// yamlComments are the comment lines of a YAML file, without their '#'.
func yamlComments(src []byte) []string {
	var out []string
	for _, l := range strings.Split(string(src), "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "#") {
			out = append(out, t[1:])
		}
	}
	return out
}

// lintUnlistedPatterns warns of pattern policies no role lists (but those
// unlisted on purpose), and counts them all, those listed and those
// unlisted on purpose.
func lintUnlistedPatterns(r *lintReport, fsys fs.FS, set *policies.Set) (all, listed, onPurpose int) {
	byName, err := pattern.Load(fsys)
	if err != nil {
		return 0, 0, 0 // the load reported it
	}
	used := map[string]bool{}
	for _, role := range set.Roles.Roles {
		for _, name := range role.Patterns {
			used[name] = true
		}
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if used[name] {
			listed++
			continue
		}
		if src, err := fs.ReadFile(fsys, byName[name].File); err == nil && unlistedOnPurpose(yamlComments(src)) {
			onPurpose++
			continue
		}
		r.add(lintWarning(byName[name].File, 1,
			fmt.Sprintf("pattern policy %q is listed by no role in %s, so it never runs", name, policies.RolesFile),
			fmt.Sprintf("add %s to the patterns of the roles it should judge, or delete the file", name)))
	}
	return len(byName), listed, onPurpose
}

// lintUnlistedDialects warns of Kyverno and Kubernetes policy files no
// role lists: loaded and checked, they never judge anything.
func lintUnlistedDialects(r *lintReport, set *policies.Set) {
	used := map[string]bool{}
	for _, role := range set.Roles.Roles {
		for _, name := range role.Policies {
			used[name] = true
		}
	}
	for _, p := range set.DialectPolicies() {
		if !used[p.Name()] {
			r.add(lintWarning(p.File(), p.Line(),
				fmt.Sprintf("%s %q is listed by no role in %s, so it never runs", p.Kind(), p.Name(), policies.RolesFile),
				fmt.Sprintf("add %s to the policies of the roles it should judge, or delete the document", p.Name())))
		}
	}
}

// lintNetworkCalls warns of http.send in a decision rule: allowed with
// --allow-network-builtins, it puts a network round trip (and its
// failures) inside every admission request the rule judges.
func lintNetworkCalls(r *lintReport, set *policies.Set) {
	for _, mod := range set.Compiled.Modules() {
		for _, rule := range mod.Rules {
			ref := rule.Head.Ref()
			if len(ref) == 0 {
				continue
			}
			var loc *ast.Location
			ast.NewGenericVisitor(func(x any) bool {
				switch v := x.(type) {
				case *ast.Expr:
					if v.IsCall() && v.Operator().String() == ast.HTTPSend.Name {
						loc = v.Location
					}
				case *ast.Term:
					if call, ok := v.Value.(ast.Call); ok && len(call) > 0 && call[0].String() == ast.HTTPSend.Name {
						loc = v.Location
					}
				}
				return loc != nil
			}).Walk(rule)
			if loc == nil {
				continue
			}
			r.add(lintWarning(loc.File, loc.Row,
				fmt.Sprintf("rule %s of package %q calls http.send: a network round trip inside every admission request it judges, bounded only by --policy-eval-timeout, and a failure answered with the role's onError", ref[0].Value.String(), rego.PackageName(mod)),
				"read the data from data.json (pushed with the policies) or a cache the rule does not wait on; if it must call out, set a short timeout and cache in the request (http.send's timeout and cache options)"))
		}
	}
}

// lintInertPackages warns of packages a role lists that have no deny, warn
// or patch rule: they load, but never affect a decision.
func lintInertPackages(r *lintReport, set *policies.Set) {
	rules := map[string]map[string]bool{}
	for _, mod := range set.Compiled.Modules() {
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
	for _, name := range set.Roles.Names() {
		line := set.Roles.Line("roles." + name + ".packages")
		for _, pkg := range set.Roles.Roles[name].Packages {
			if !rules[pkg]["deny"] && !rules[pkg]["warn"] && !rules[pkg]["patch"] {
				w := lintWarning(policies.RolesFile, line,
					fmt.Sprintf("package %q has no deny, warn or patch rule, so it never affects a decision", pkg),
					"add `deny contains msg if { ... }` (or warn/patch) to it, or drop it from the list")
				w.Path = "roles." + name + ".packages"
				r.add(w)
			}
		}
	}
}

// lintFixtures reports every problem of the fixture files.
func lintFixtures(r *lintReport, root string) {
	files, err := fixtureFiles(root)
	if err != nil {
		r.add(lintError(&problem.Problem{File: root, Message: err.Error()}))
		return
	}
	_, err = loadFixtures(files, time.Now())
	if err == nil {
		return
	}
	const hint = "see README, Writing and testing policies, for the fixture format"
	for _, e := range flatten(err) {
		p := problem.Problem{File: root, Message: e.Error()}
		var at *problem.Problem
		if errors.As(e, &at) {
			p = *at
		}
		p.Hint = hint
		r.add(lintError(&p))
	}
}

func writeLintText(w io.Writer, r *lintReport, strict bool) error {
	tw := &textWriter{w: w}
	for _, p := range r.Problems {
		tw.line(p.location() + ": " + p.text())
		if p.Hint != "" {
			tw.line("    hint: " + p.Hint)
		}
	}
	errs := r.errors()
	warnings := len(r.Problems) - errs
	switch {
	case errs > 0:
		tw.line(fmt.Sprintf("%s: %s, %s", r.Policies, words.Count(errs, "error"), words.Count(warnings, "warning")))
	case warnings > 0 && strict:
		tw.line(fmt.Sprintf("%s: FAILED with --strict: %s (%s)", r.Policies, words.Count(warnings, "warning"), r.Checked))
	case warnings > 0:
		tw.line(fmt.Sprintf("%s: ok with %s (%s)", r.Policies, words.Count(warnings, "warning"), r.Checked))
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
