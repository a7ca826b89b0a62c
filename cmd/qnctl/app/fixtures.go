package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/quantumnode/qn-admission/internal/problem"
	"go.yaml.in/yaml/v3"
)

// fixturesDir is where qnctl test looks for fixture cases inside a policy
// directory when --fixtures is not given.
const fixturesDir = "fixtures"

// fixtureFile is one YAML file of fixture cases:
//
//	defaults:            # optional; every case starts from these
//	  user: alice
//	cases:
//	- name: a valid QuantumNode is admitted
//	  object: {apiVersion: qn.dev/v1alpha1, kind: QuantumNode, ...}
//	  expect: {allowed: true, code: 200}
type fixtureFile struct {
	Defaults caseInput     `yaml:"defaults"`
	Cases    []fixtureCase `yaml:"cases"`
}

// caseInput is what a case evaluates: exactly one of object, review or
// file, and the context that completes or overrides it (the flags of
// qnctl eval).
type caseInput struct {
	Object      yaml.Node `yaml:"object"`
	Review      yaml.Node `yaml:"review"`
	File        string    `yaml:"file"`
	Old         yaml.Node `yaml:"old"`
	Operation   string    `yaml:"operation"`
	User        *string   `yaml:"user"`
	Groups      []string  `yaml:"groups"`
	Namespace   string    `yaml:"namespace"`
	Resource    string    `yaml:"resource"`
	Role        string    `yaml:"role"`
	Time        string    `yaml:"time"`
	WindowCount *int      `yaml:"windowCount"`
	DryRun      *bool     `yaml:"dryRun"`
	Webhook     string    `yaml:"webhook"`
}

// fixtureCase is one case: an input and the decision it must get.
type fixtureCase struct {
	Name      string `yaml:"name"`
	caseInput `yaml:",inline"`
	Expect    expectation `yaml:"expect"`
}

// expectation is the decision a case must get; unset fields are not
// checked. allowed, code, message and warnings are checked against the
// final answer (the validating webhook's, unless only the mutating webhook
// was asked or it refused the request); patch against the mutating
// webhook's.
type expectation struct {
	Allowed *bool   `yaml:"allowed"`
	Code    *int32  `yaml:"code"`
	Role    *string `yaml:"role"`
	// Message lists substrings the message must contain.
	Message substrings `yaml:"message"`
	// Warnings lists one substring per expected warning; the answer must
	// carry exactly as many warnings. [] means none.
	Warnings *[]string `yaml:"warnings"`
	// Patch is the mutating webhook's JSONPatch, compared as a set of
	// operations; [] means no patch.
	Patch yaml.Node `yaml:"patch"`
}

// substrings accepts a string or a list of strings.
type substrings []string

// UnmarshalYAML implements yaml.Unmarshaler.
func (s *substrings) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*s = substrings{n.Value}
		return nil
	}
	var list []string
	if err := n.Decode(&list); err != nil {
		return err
	}
	*s = list
	return nil
}

func (e expectation) empty() bool {
	return e.Allowed == nil && e.Code == nil && e.Role == nil && len(e.Message) == 0 && e.Warnings == nil && !set(e.Patch)
}

// loadedCase is a fixture case ready to run.
type loadedCase struct {
	Name string
	// Location is file:line of the case.
	Location string
	Spec     *requestSpec
	Webhook  string
	Now      time.Time
	Windows  int
	Expect   expectation
	// Patch is Expect.Patch as JSON operations.
	Patch []any
}

// fixtureFiles lists the YAML files of a fixture directory (recursively) or
// the one file given.
func fixtureFiles(root string) ([]string, error) {
	st, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("fixtures %s: %w", root, unwrapPathError(err))
	}
	if !st.IsDir() {
		return []string{root}, nil
	}
	var files []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// loadFixtures reads every case of the fixture files. All problems are
// reported, each with its file and line.
func loadFixtures(files []string, now time.Time) ([]*loadedCase, error) {
	var cases []*loadedCase
	var errs []error
	for _, f := range files {
		cs, err := loadFixtureFile(f, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cases = append(cases, cs...)
	}
	return cases, errors.Join(errs...)
}

func loadFixtureFile(file string, now time.Time) ([]*loadedCase, error) {
	src, err := readFileBounded(file)
	if err != nil {
		return nil, fmt.Errorf("fixtures: %w", err)
	}
	name := relPath(file)
	var ff fixtureFile
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&ff); err != nil {
		return nil, yamlError(name, err)
	}
	// Line numbers of the cases, for messages.
	var root yaml.Node
	_ = yaml.Unmarshal(src, &root)
	lines := caseLines(&root)
	if len(ff.Cases) == 0 {
		return nil, &problem.Problem{File: name, Line: 1, Message: "no cases; list them under cases:"}
	}
	var out []*loadedCase
	var errs []error
	for i, c := range ff.Cases {
		line := 0
		if i < len(lines) {
			line = lines[i]
		}
		lc, err := c.load(name, filepath.Dir(file), line, ff.Defaults, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, lc)
	}
	return out, errors.Join(errs...)
}

// yamlError is a YAML error of a fixture file at its line, naming
// fixture fields as the file spells them.
func yamlError(file string, err error) error {
	p := problem.FromYAML(file, err)
	p.Message = strings.ReplaceAll(p.Message, "in type app.", "in ")
	return p
}

func caseLines(root *yaml.Node) []int {
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	doc := root.Content[0]
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value == "cases" && doc.Content[i+1].Kind == yaml.SequenceNode {
			var lines []int
			for _, c := range doc.Content[i+1].Content {
				lines = append(lines, c.Line)
			}
			return lines
		}
	}
	return nil
}

// merged is in with unset fields taken from defaults.
func (in caseInput) merged(d caseInput) caseInput {
	if !set(in.Object) && !set(in.Review) && in.File == "" {
		in.Object, in.Review, in.File = d.Object, d.Review, d.File
	}
	if !set(in.Old) {
		in.Old = d.Old
	}
	pick := func(s *string, def string) {
		if *s == "" {
			*s = def
		}
	}
	pick(&in.Operation, d.Operation)
	pick(&in.Namespace, d.Namespace)
	pick(&in.Resource, d.Resource)
	pick(&in.Role, d.Role)
	pick(&in.Time, d.Time)
	pick(&in.Webhook, d.Webhook)
	if in.User == nil {
		in.User = d.User
	}
	if in.Groups == nil {
		in.Groups = d.Groups
	}
	if in.WindowCount == nil {
		in.WindowCount = d.WindowCount
	}
	if in.DryRun == nil {
		in.DryRun = d.DryRun
	}
	return in
}

func (c fixtureCase) load(file, dir string, line int, defaults caseInput, now time.Time) (*loadedCase, error) {
	at := func(format string, args ...any) error {
		return &problem.Problem{File: file, Line: line, Message: fmt.Sprintf(format, args...)}
	}
	in := c.caseInput.merged(defaults)
	lc := &loadedCase{Name: c.Name, Location: fmt.Sprintf("%s:%d", file, line), Webhook: in.Webhook, Now: now, Expect: c.Expect}
	if lc.Name == "" {
		lc.Name = lc.Location
	}
	given := 0
	for _, set := range []bool{set(in.Object), set(in.Review), in.File != ""} {
		if set {
			given++
		}
	}
	if given != 1 {
		return nil, at("case %q needs exactly one of object, review or file", lc.Name)
	}
	if c.Expect.empty() {
		return nil, at("case %q has no expect; say at least allowed or code", lc.Name)
	}
	var input document
	var err error
	switch {
	case in.File != "":
		p := in.File
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if input, err = readDocument(p, nil); err != nil {
			return nil, at("case %q: %v", lc.Name, err)
		}
	case set(in.Object):
		if input, err = nodeDocument(fmt.Sprintf("%s (case %q object)", file, lc.Name), &in.Object); err != nil {
			return nil, err
		}
	default:
		if input, err = nodeDocument(fmt.Sprintf("%s (case %q review)", file, lc.Name), &in.Review); err != nil {
			return nil, err
		}
	}
	spec := &requestSpec{Input: input, Operation: in.Operation, User: in.User, Groups: in.Groups,
		Namespace: in.Namespace, Resource: in.Resource, Role: in.Role, DryRun: in.DryRun}
	if set(in.Old) {
		old, err := nodeDocument(fmt.Sprintf("%s (case %q old)", file, lc.Name), &in.Old)
		if err != nil {
			return nil, err
		}
		spec.Old = &old
	}
	if in.Operation != "" {
		if _, err := parseOperation(in.Operation); err != nil {
			return nil, at("case %q: %v", lc.Name, err)
		}
	}
	lc.Spec = spec
	if lc.Webhook == "" {
		lc.Webhook = webhookBoth
	}
	if !contains(webhookModes, lc.Webhook) {
		return nil, at("case %q: webhook %q is not one of %s", lc.Name, lc.Webhook, strings.Join(webhookModes, ", "))
	}
	if in.Time != "" {
		if lc.Now, err = time.Parse(time.RFC3339Nano, in.Time); err != nil {
			return nil, at("case %q: time %q is not an RFC 3339 time (e.g. 2026-03-01T10:00:00Z)", lc.Name, in.Time)
		}
	}
	if in.WindowCount != nil {
		if *in.WindowCount < 0 {
			return nil, at("case %q: windowCount %d is negative", lc.Name, *in.WindowCount)
		}
		lc.Windows = *in.WindowCount
	}
	if set(c.Expect.Patch) {
		if lc.Webhook == webhookValidate {
			return nil, at("case %q: expect.patch needs the mutating webhook (webhook: both or mutate)", lc.Name)
		}
		var v any
		if err := c.Expect.Patch.Decode(&v); err != nil {
			return nil, at("case %q: expect.patch: %v", lc.Name, err)
		}
		ops, err := normalize(v)
		if err != nil {
			return nil, at("case %q: expect.patch: %v", lc.Name, err)
		}
		list, ok := ops.([]any)
		if !ok {
			return nil, &problem.Problem{File: file, Line: c.Expect.Patch.Line, Message: fmt.Sprintf("case %q: expect.patch must be a list of JSONPatch operations ([] for none)", lc.Name)}
		}
		lc.Patch = list
	}
	return lc, nil
}

// nodeDocument turns an inline YAML value into a JSON document.
func nodeDocument(name string, n *yaml.Node) (document, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return document{}, &problem.Problem{File: name, Line: n.Line, Message: err.Error()}
	}
	if _, ok := v.(map[string]any); !ok {
		return document{}, &problem.Problem{File: name, Line: n.Line, Message: "must be a mapping (an object or an AdmissionReview)"}
	}
	js, err := json.Marshal(v)
	if err != nil {
		return document{}, &problem.Problem{File: name, Line: n.Line, Message: err.Error()}
	}
	return document{Name: name, JSON: js}, nil
}

// normalize gives a YAML value the shape encoding/json decodes it to, so
// expected and actual values compare equal.
func normalize(v any) (any, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(js, &out)
	return out, err
}

// set reports whether a YAML value was given.
func set(n yaml.Node) bool { return n.Kind != 0 }
