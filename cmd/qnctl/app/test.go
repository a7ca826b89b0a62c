package app

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/quantumnode/qn-admission/internal/words"
	"github.com/quantumnode/qn-admission/policies"
)

// testOptions are the flags of qnctl test.
type testOptions struct {
	Fixtures string
	Output   string
	Run      string
	Verbose  bool
	// AllowEmpty exits 0 when no Rego test and no fixture case ran.
	AllowEmpty bool
	// KyvernoFile is the name of Kyverno's test files under DIR.
	KyvernoFile string
}

func newTestCommand(opts *commonOptions, s Streams) *cobra.Command {
	o := &testOptions{Output: outputText, KyvernoFile: kyvernoTestFile}
	cmd := &cobra.Command{
		Use:   "test [DIR]",
		Short: "Run a policy directory's Rego unit tests and fixture cases",
		Long: `test loads the policy directory DIR as qn-webhook does (the bundled
policies when DIR is omitted), runs its Rego unit tests (test_* rules, the
semantics of opa test) and its fixture cases, and prints a line per test and
case and a summary.

A fixture case gives a review or an object plus context (user, groups,
operation, role, old object, time, window count) and the decision it must get
(allowed, code, message substrings, warnings, patch); it is judged by the
webhook's own answer path, as qnctl eval does. Fixture files are the *.yaml
files under DIR/fixtures, or --fixtures (a directory or a file).

Kyverno test folders under DIR run too, unchanged: every kyverno-test.yaml
(cli.kyverno.io/v1alpha1 Test, or the older format without apiVersion) is
run as kyverno test runs it. Its ClusterPolicies and Policies are read by
the reader qn-webhook uses, each resource is judged as a CREATE (or the
row's operation) by each policy, and each results row (policy, rule,
resources, result: pass, fail, skip, warn or error) is compared with the
verdict; a row that disagrees fails and says its policy, rule, resource,
the result expected and got, and the rule's message. ValidatingPolicies
and ValidatingAdmissionPolicies give one result per resource, as Kyverno's
CLI reports them (the row's rule aside). Values files give
request.operation, request.object.* and request.oldObject.* values; what
needs a cluster or is not a validate rule (mutate and generate rows,
payloads, exceptions, API call mocks, rule values, namespaceSelector) is
refused, naming the file. A DIR without roles.yaml that holds Kyverno
tests runs only those. docs/policies.md ("Kyverno test folders") says
more.

Exit codes: 0 every test and case passed, 1 one failed, 2 the policy directory,
a fixture file or a Kyverno test does not load, or nothing ran: no Rego test,
no fixture case and no Kyverno row, or --run matched none (unless
--allow-empty: a green run of nothing proves nothing).`,
		Example: `  # The bundled policies and their fixture cases
  qnctl test rego/bundle --fixtures test/fixtures/bundled

  # Your policy directory, fixtures in ./policies/fixtures, a JUnit report for CI
  qnctl test ./policies -o junit > report.xml

  # Only the cases and tests whose name matches
  qnctl test ./policies --run 'realtime'

  # Kyverno test folders (each with a kyverno-test.yaml), as kyverno test runs them
  qnctl test ./kyverno-tests`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := ""
			if len(args) == 1 {
				dir = args[0]
			}
			return runTest(cmd.Context(), opts, o, dir, s.Out)
		},
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return nil, cobra.ShellCompDirectiveFilterDirs
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Fixtures, "fixtures", "", "Fixture cases: a directory of *.yaml files or one file (default DIR/fixtures when present).")
	f.StringVarP(&o.Output, "output", "o", o.Output, "Output: text, json or junit.")
	f.StringVar(&o.Run, "run", "", "Run only the Rego tests and cases whose name matches this regular expression.")
	f.BoolVarP(&o.Verbose, "verbose", "v", false, "Also print the answer of every fixture case.")
	f.BoolVar(&o.AllowEmpty, "allow-empty", false, "Exit 0 when no Rego test and no fixture case ran (none exist, or --run matched none).")
	f.StringVar(&o.KyvernoFile, "kyverno-file-name", o.KyvernoFile, "The file name of Kyverno tests under DIR (kyverno test --file-name).")
	_ = cmd.MarkFlagDirname("fixtures")
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletion(outputText, outputJSON, outputJUnit))
	return cmd
}

// testResult is one Rego test or fixture case.
type testResult struct {
	// Kind is "rego", "fixture" or "kyverno" (a row of a Kyverno test).
	Kind string `json:"kind"`
	// Suite is the Rego package or the fixture file.
	Suite    string `json:"suite"`
	Name     string `json:"name"`
	Location string `json:"location"`
	Passed   bool   `json:"passed"`
	Skipped  bool   `json:"skipped,omitempty"`
	// Failures say what differed or went wrong.
	Failures []string      `json:"failures,omitempty"`
	Duration time.Duration `json:"durationNs"`
	// Answer is the decision a fixture case got, in one line.
	Answer string `json:"answer,omitempty"`
}

// testReport is the whole run.
type testReport struct {
	Policies policiesJSON `json:"policies"`
	Fixtures string       `json:"fixtures,omitempty"`
	// Kyverno are the Kyverno test files run.
	Kyverno []string     `json:"kyvernoTests,omitempty"`
	Results []testResult `json:"results"`
	Summary testSummary  `json:"summary"`
}

type testSummary struct {
	RegoTests     int           `json:"regoTests"`
	FixtureCases  int           `json:"fixtureCases"`
	KyvernoRows   int           `json:"kyvernoRows,omitempty"`
	Passed        int           `json:"passed"`
	Failed        int           `json:"failed"`
	Skipped       int           `json:"skipped"`
	Duration      time.Duration `json:"durationNs"`
	DurationHuman string        `json:"duration"`
}

func runTest(ctx context.Context, opts *commonOptions, o *testOptions, dir string, w io.Writer) error {
	start := time.Now()
	switch o.Output {
	case outputText, outputJSON, outputJUnit:
	default:
		return usagef("--output %q is not one of text, json, junit", o.Output)
	}
	var filter *regexp.Regexp
	if o.Run != "" {
		var err error
		if filter, err = regexp.Compile(o.Run); err != nil {
			return usagef("--run %q is not a regular expression: %v", o.Run, err)
		}
	}
	// Kyverno tests under DIR run beside the policy directory's tests, or
	// alone when DIR is no policy directory.
	var kyv *kyvernoTests
	if dir != "" && hasKyvernoTests(dir, o.KyvernoFile) {
		var err error
		if kyv, err = runKyvernoTests(ctx, dir, o.KyvernoFile, filter); err != nil {
			return err
		}
		if o.Fixtures == "" && !isPolicyDirectory(dir) {
			return finishTest(o, &testReport{}, kyv, start, w, dir)
		}
	}
	fixtures := o.Fixtures
	if fixtures == "" && dir != "" {
		if st, err := os.Stat(filepath.Join(dir, fixturesDir)); err == nil && st.IsDir() {
			fixtures = filepath.Join(dir, fixturesDir)
		}
	}
	// Fixture files are read before the policies, so a typo in either is
	// reported without waiting on the other.
	var cases []*loadedCase
	if fixtures != "" {
		files, err := fixtureFiles(fixtures)
		if err != nil {
			return err
		}
		if len(files) == 0 {
			return fmt.Errorf("fixtures %s: no *.yaml files", fixtures)
		}
		if cases, err = loadFixtures(files, time.Now().UTC()); err != nil {
			return err
		}
	}
	p, err := loadPolicies(ctx, dir, opts, true)
	if err != nil {
		if hint := fixturesFolderHint(dir); hint != "" {
			return fmt.Errorf("%w\n%s", err, hint)
		}
		return err
	}
	var bad []string
	for _, c := range cases {
		if err := checkRole(p, c.Spec.Role); err != nil {
			bad = append(bad, fmt.Sprintf("%s: case %q: %v", c.Location, c.Name, err))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "\n"))
	}

	report := &testReport{Policies: policiesJSON{Source: p.Source, Revision: p.Set.Revision}, Fixtures: fixtures}
	regoResults, err := p.Set.Compiled.RunTests(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Source, err)
	}
	for _, r := range regoResults {
		pkg := strings.TrimPrefix(r.Package, "data.")
		name := pkg + "." + r.Name
		if filter != nil && !filter.MatchString(name) {
			continue
		}
		tr := testResult{Kind: "rego", Suite: pkg, Name: r.Name, Location: r.Location, Passed: r.Passed, Skipped: r.Skipped, Duration: r.Duration}
		if r.Failure != "" {
			tr.Failures = []string{r.Failure}
		}
		report.Results = append(report.Results, tr)
		report.Summary.RegoTests++
	}
	for _, c := range cases {
		if filter != nil && !filter.MatchString(c.Name) {
			continue
		}
		report.Results = append(report.Results, runCase(ctx, p, c))
		report.Summary.FixtureCases++
	}
	return finishTest(o, report, kyv, start, w, dir, nothingTested(p, fixtures, o.Run, len(regoResults), len(cases)))
}

// finishTest adds the Kyverno rows to the report, writes it and returns
// the exit: 2 when a Kyverno test does not load or nothing ran, 1 when a
// test failed. nothing says why no Rego test or fixture case ran.
func finishTest(o *testOptions, report *testReport, kyv *kyvernoTests, start time.Time, w io.Writer, dir string, nothing ...string) error {
	if kyv != nil {
		report.Kyverno = kyv.Files
		report.Results = append(report.Results, kyv.Results...)
		report.Summary.KyvernoRows = len(kyv.Results)
	}
	for _, r := range report.Results {
		switch {
		case r.Skipped:
			report.Summary.Skipped++
		case r.Passed:
			report.Summary.Passed++
		default:
			report.Summary.Failed++
		}
	}
	report.Summary.Duration = time.Since(start)
	report.Summary.DurationHuman = report.Summary.Duration.Round(time.Millisecond).String()
	if report.Results == nil {
		report.Results = []testResult{}
	}
	switch o.Output {
	case outputJSON:
		js, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", js)
		if err != nil {
			return err
		}
	case outputJUnit:
		if err := writeJUnit(w, report); err != nil {
			return err
		}
	default:
		if err := writeTestText(w, report, o.Verbose); err != nil {
			return err
		}
	}
	if kyv != nil && len(kyv.Errors) > 0 {
		return &exitError{code: exitBadInput, err: fmt.Errorf("%s not load:\n%s", words.Count(len(kyv.Errors), "Kyverno test does", "Kyverno tests do"), strings.Join(kyv.Errors, "\n"))}
	}
	if report.Summary.Failed > 0 {
		return failed()
	}
	if len(report.Results) == 0 && !o.AllowEmpty {
		why := strings.Join(nothing, "")
		if kyv != nil {
			why = fmt.Sprintf("the Kyverno tests under %s have no results rows", dir)
			if o.Run != "" {
				why = fmt.Sprintf("--run %q matched none of the Kyverno tests' rows under %s", o.Run, dir)
			}
		}
		return &exitError{code: exitBadInput, err: fmt.Errorf("nothing was tested: %s; --allow-empty accepts that", why)}
	}
	return nil
}

// nothingTested says why a run ran no test and no case.
func nothingTested(p *policySet, fixtures, run string, regoTests, cases int) string {
	if run != "" && regoTests+cases > 0 {
		return fmt.Sprintf("--run %q matched none of %d Rego tests and %d fixture cases", run, regoTests, cases)
	}
	where := "no fixture cases (no " + fixturesDir + " folder in the policy directory, and no --fixtures)"
	if fixtures != "" {
		where = "no fixture cases in " + fixtures
	}
	return fmt.Sprintf("policies %s hold no Rego test (a test_* rule) and there are %s", p.Source, where)
}

// fixturesFolderHint says so when dir, which failed to load as a policy
// directory, is a folder of fixture cases: a common slip for
// "qnctl test DIR --fixtures FOLDER".
func fixturesFolderHint(dir string) string {
	if dir == "" {
		return ""
	}
	files, err := fixtureFiles(dir)
	if err != nil || len(files) == 0 {
		return ""
	}
	if _, err := loadFixtures(files, time.Now().UTC()); err != nil {
		return ""
	}
	return fmt.Sprintf("%s holds fixture cases (%d YAML files): it is a fixtures folder, not a policy directory; run qnctl test POLICY-DIR --fixtures %s", dir, len(files), dir)
}

// runCase judges one fixture case as qnctl eval would and compares.
func runCase(ctx context.Context, p *policySet, c *loadedCase) testResult {
	start := time.Now()
	suite, _, _ := strings.Cut(c.Location, ":")
	tr := testResult{Kind: "fixture", Suite: suite, Name: c.Name, Location: c.Location}
	defer func() { tr.Duration = time.Since(start) }()
	review, err := c.Spec.reviewBytes()
	if err == nil {
		var out *outcome
		out, err = evaluate(ctx, p.Set, evalRequest{Review: review, Webhook: c.Webhook, Now: c.Now, WindowCount: c.Windows, Inventory: p.Inventory})
		if err == nil {
			tr.Failures = c.check(out)
			tr.Answer = oneLine(out)
		}
	}
	if err != nil {
		tr.Failures = []string{"input: " + err.Error()}
	}
	tr.Passed = len(tr.Failures) == 0
	tr.Duration = time.Since(start)
	return tr
}

// oneLine summarises an outcome for -v and reports.
func oneLine(out *outcome) string {
	d := out.final().Decision
	s := verdict(d)
	if d.Role != "" {
		s += " role " + d.Role
	}
	if d.Message != "" {
		s += ": " + d.Message
	}
	if len(d.Warnings) > 0 {
		s += fmt.Sprintf(" [warnings: %s]", strings.Join(d.Warnings, "; "))
	}
	if out.Mutate != nil && len(out.Mutate.Decision.Patch) > 0 {
		s += " [patch: " + string(out.Mutate.Decision.Patch) + "]"
	}
	return s
}

// check compares an outcome with the case's expectation; each difference
// is one sentence.
func (c *loadedCase) check(out *outcome) []string {
	var fails []string
	e := c.Expect
	d := out.final().Decision
	if e.Allowed != nil && *e.Allowed != d.Allowed {
		fails = append(fails, fmt.Sprintf("allowed: want %t, got %t (%s)", *e.Allowed, d.Allowed, describeDecision(d)))
	}
	if e.Code != nil && *e.Code != d.Code {
		fails = append(fails, fmt.Sprintf("code: want %d, got %d (%s)", *e.Code, d.Code, describeDecision(d)))
	}
	if e.Role != nil && *e.Role != d.Role {
		fails = append(fails, fmt.Sprintf("role: want %q, got %q", *e.Role, d.Role))
	}
	for _, sub := range e.Message {
		if !strings.Contains(d.Message, sub) {
			fails = append(fails, fmt.Sprintf("message: want it to contain %q, got %q", sub, d.Message))
		}
	}
	if e.Warnings != nil {
		fails = append(fails, checkWarnings(*e.Warnings, d.Warnings)...)
	}
	if c.Patch != nil {
		var got []any
		if out.Mutate != nil && len(out.Mutate.Decision.Patch) > 0 {
			_ = json.Unmarshal(out.Mutate.Decision.Patch, &got)
		}
		if !sameOps(c.Patch, got) {
			fails = append(fails, fmt.Sprintf("patch: want %s, got %s", canonical(c.Patch), canonical(orEmpty(got))))
		}
	}
	return fails
}

// describeDecision is a decision in a few words, for failure messages.
func describeDecision(d policies.Decision) string {
	if d.Message != "" {
		return verdict(d) + ": " + d.Message
	}
	return verdict(d)
}

func orEmpty(list []any) []any {
	if list == nil {
		return []any{}
	}
	return list
}

// checkWarnings wants exactly len(want) warnings, each containing its
// substring.
func checkWarnings(want, got []string) []string {
	var fails []string
	used := make([]bool, len(got))
	for _, sub := range want {
		found := false
		for i, g := range got {
			if !used[i] && strings.Contains(g, sub) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			fails = append(fails, fmt.Sprintf("warnings: want one containing %q, got %s", sub, quoteList(got)))
		}
	}
	if len(got) != len(want) && len(fails) == 0 {
		fails = append(fails, fmt.Sprintf("warnings: want %d, got %d: %s", len(want), len(got), quoteList(got)))
	}
	return fails
}

func quoteList(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// sameOps compares two JSONPatch documents as sets of operations.
func sameOps(want, got []any) bool {
	if len(want) != len(got) {
		return false
	}
	a, b := make([]string, len(want)), make([]string, len(got))
	for i := range want {
		a[i], b[i] = canonical(want[i]), canonical(got[i])
	}
	sort.Strings(a)
	sort.Strings(b)
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func writeTestText(w io.Writer, r *testReport, verbose bool) error {
	tw := &textWriter{w: w}
	head := "policies " + r.Policies.Source + " (revision " + r.Policies.Revision + ")"
	if r.Fixtures != "" {
		head += ", fixtures " + r.Fixtures
	}
	kyvernoOnly := r.Policies.Source == "" && len(r.Kyverno) > 0
	switch {
	case kyvernoOnly:
		head = "Kyverno tests: " + words.Count(len(r.Kyverno), "file")
	case len(r.Kyverno) > 0:
		head += ", Kyverno tests: " + words.Count(len(r.Kyverno), "file")
	}
	tw.line(head)
	for _, res := range r.Results {
		status := "PASS"
		switch {
		case res.Skipped:
			status = "SKIP"
		case !res.Passed:
			status = "FAIL"
		}
		name := res.Name
		if res.Kind == "rego" {
			name = res.Suite + "." + res.Name
		}
		tw.line(fmt.Sprintf("%s  %-7s %s  %s", status, res.Kind, name, "("+res.Location+")"))
		for _, f := range res.Failures {
			tw.line("        " + f)
		}
		if verbose && res.Answer != "" {
			tw.line("        answer: " + res.Answer)
		}
	}
	s := r.Summary
	verdict := "PASS"
	switch {
	case s.Failed > 0:
		verdict = "FAIL"
	case len(r.Results) == 0:
		verdict = "NOTHING RAN"
	}
	counts := fmt.Sprintf("%d Rego tests, %d fixture cases", s.RegoTests, s.FixtureCases)
	switch {
	case kyvernoOnly:
		counts = words.Count(s.KyvernoRows, "Kyverno row")
	case len(r.Kyverno) > 0:
		counts += ", " + words.Count(s.KyvernoRows, "Kyverno row")
	}
	line := fmt.Sprintf("%s: %s: %d passed, %d failed", verdict, counts, s.Passed, s.Failed)
	if s.Skipped > 0 {
		line += fmt.Sprintf(", %d skipped", s.Skipped)
	}
	tw.line(line + " (" + s.DurationHuman + ")")
	return tw.err
}

// JUnit XML, the subset CI systems read.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	File      string        `xml:"file,attr,omitempty"`
	Line      string        `xml:"line,attr,omitempty"`
	Time      string        `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Skipped   *struct{}     `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

func junitSeconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

func writeJUnit(w io.Writer, r *testReport) error {
	root := junitSuites{Name: "qnctl test " + r.Policies.Source, Time: junitSeconds(r.Summary.Duration)}
	index := map[string]int{}
	for _, res := range r.Results {
		suite := res.Kind + ": " + res.Suite
		i, ok := index[suite]
		if !ok {
			i = len(root.Suites)
			index[suite] = i
			root.Suites = append(root.Suites, junitSuite{Name: suite})
		}
		s := &root.Suites[i]
		file, line, _ := strings.Cut(res.Location, ":")
		jc := junitCase{Name: res.Name, Classname: res.Suite, File: file, Line: line, Time: junitSeconds(res.Duration), SystemOut: res.Answer}
		s.Tests++
		root.Tests++
		switch {
		case res.Skipped:
			jc.Skipped = &struct{}{}
			s.Skipped++
			root.Skipped++
		case !res.Passed:
			jc.Failure = &junitFailure{Message: res.Failures[0], Text: strings.Join(res.Failures, "\n")}
			s.Failures++
			root.Failures++
		}
		s.Cases = append(s.Cases, jc)
	}
	var total time.Duration
	for i := range root.Suites {
		total = 0
		for _, res := range r.Results {
			if res.Kind+": "+res.Suite == root.Suites[i].Name {
				total += res.Duration
			}
		}
		root.Suites[i].Time = junitSeconds(total)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(root); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
