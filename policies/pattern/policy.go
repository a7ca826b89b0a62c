// Package pattern lets a role's rules be written as Kyverno validate
// patterns instead of Rego. A pattern policy is a YAML file in the policy
// directory (<name>.pattern.yaml) that reads like a Kyverno `validate` rule:
// a message and a `pattern` or `anyPattern` over the request's object, with
// Kyverno's operators and anchors. The matching itself is Kyverno's own
// (github.com/kyverno/kyverno/pkg/engine/validate.MatchPattern); this
// package parses and checks the files with line numbers, decides when a
// policy applies (operations, and optional patterns over request.userInfo
// and request.oldObject), and turns a failed match into a deny or warn
// message that names the policy and the path Kyverno reports.
package pattern

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/quantumnode/qn-admission/internal/policyfiles"
	"github.com/quantumnode/qn-admission/internal/problem"
	"go.yaml.in/yaml/v3"
)

// FileSuffix marks a pattern policy in a policy directory; the file name
// without it is the policy's name, which roles.yaml lists under patterns.
const FileSuffix = ".pattern.yaml"

// Kind is the value a pattern policy file declares as its kind.
const Kind = "PatternPolicy"

// Operations a pattern policy may apply to. CONNECT carries no object.
var knownOperations = []string{"CREATE", "UPDATE", "DELETE"}

// defaultOperations are Kyverno's: a validate rule judges the object being
// written; DELETE applies only when a policy lists it.
var defaultOperations = []string{"CREATE", "UPDATE"}

// Policy is one parsed and checked pattern policy. It is immutable and
// safe for concurrent use.
type Policy struct {
	// Name is the file name without FileSuffix.
	Name string
	// File is the path of the file inside the policy directory.
	File string
	// Message explains a denial to a person, as a Rego deny message does.
	Message string
	// Audit makes a failure a warning instead of a denial (Kyverno's
	// failureAction: Audit).
	Audit bool
	// Operations are the operations the policy judges.
	Operations []string
	// Patterns are the alternatives the object must match: one for
	// `pattern`, several for `anyPattern` (any one suffices).
	Patterns []*Tree
	// AnyPattern is true when Patterns came from anyPattern.
	AnyPattern bool
	// Match and Exclude narrow which requests the policy judges.
	Match, Exclude *Selector
}

// Selector narrows the requests a policy judges. Every field that is set
// must hold for the selector to hold.
type Selector struct {
	// Line is where the selector is declared.
	Line int
	// Operations the request's operation must be one of (exclude only;
	// match uses the policy's operations).
	Operations []string
	// UserInfo is a pattern over request.userInfo (username, uid, groups,
	// extra).
	UserInfo *Tree
	// OldObject is a pattern over request.oldObject; a request without an
	// oldObject (CREATE) does not match it.
	OldObject *Tree
}

// Tree is one pattern as Kyverno's matcher reads it, plus the YAML it came
// from, so a path Kyverno reports can be traced back to a line.
type Tree struct {
	// Label says where the pattern is declared: "pattern", "anyPattern[1]",
	// "match.userInfo", ...
	Label string
	// Line is the line of the pattern's first key.
	Line  int
	value any
	node  *yaml.Node
	// rewritten is true when Kyverno's matcher writes into the pattern
	// (wildcard keys under metadata.labels or metadata.annotations): such a
	// tree is copied before every match so concurrent requests never share
	// what it writes.
	rewritten bool
}

// Value returns the pattern as Kyverno's matcher reads it. Callers must not
// modify it.
func (t *Tree) Value() any { return t.value }

// File is one pattern policy file's bytes, as read from a policy directory.
type File struct {
	Path   string
	Source []byte
}

// ReadFiles returns every pattern policy file in fsys, sorted by path.
func ReadFiles(fsys fs.FS) ([]File, error) {
	var files []File
	err := policyfiles.Walk(fsys, func(p string) bool { return strings.HasSuffix(path.Base(p), FileSuffix) }, func(p string, src []byte) error {
		files = append(files, File{Path: p, Source: src})
		return nil
	})
	if err != nil {
		err = fmt.Errorf("read pattern policy: %w", err)
	}
	if err != nil {
		return nil, err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

// ParseFiles parses and checks every file; policy names must be unique.
// The policies that parsed are returned with one *problem.Problem for each file
// that did not, so a caller can report every broken file at once.
func ParseFiles(files []File) (map[string]*Policy, []*problem.Problem) {
	byName := make(map[string]*Policy, len(files))
	var problems []*problem.Problem
	for _, f := range files {
		p, err := Parse(f.Path, f.Source)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if prev, dup := byName[p.Name]; dup {
			problems = append(problems, &problem.Problem{File: f.Path, Line: 1, Message: fmt.Sprintf(
				"pattern policy %q is also defined by %s; names come from file names and must be unique", p.Name, prev.File)})
			continue
		}
		byName[p.Name] = p
	}
	return byName, problems
}

// Load reads and checks every pattern policy in fsys; the error joins the
// problems of every broken file.
func Load(fsys fs.FS) (map[string]*Policy, error) {
	files, err := ReadFiles(fsys)
	if err != nil {
		return nil, err
	}
	byName, problems := ParseFiles(files)
	if len(problems) > 0 {
		errs := make([]error, len(problems))
		for i, p := range problems {
			errs[i] = p
		}
		return nil, errors.Join(errs...)
	}
	return byName, nil
}

// allowedKeys is the shape of a pattern policy, outside the patterns
// themselves, for unknown-field errors that say where the typo is.
var allowedKeys = map[string][]string{
	"":         {"kind", "description", "match", "exclude", "validate"},
	"match":    {"operations", "userInfo", "oldObject"},
	"exclude":  {"operations", "userInfo", "oldObject"},
	"validate": {"message", "failureAction", "pattern", "anyPattern"},
}

// Parse decodes and checks one pattern policy file. Every problem is a
// *problem.Problem naming the file, the line and the field.
func Parse(file string, src []byte) (*Policy, *problem.Problem) {
	name := strings.TrimSuffix(path.Base(file), FileSuffix)
	p := &parser{file: file}
	var root yaml.Node
	if err := yaml.Unmarshal(src, &root); err != nil {
		return nil, yamlError(file, err)
	}
	if len(root.Content) == 0 {
		return nil, p.errorf(1, "", "the file is empty; declare kind: %s and a validate rule", Kind)
	}
	doc := root.Content[0]
	if doc.Kind != yaml.MappingNode {
		return nil, p.errorf(doc.Line, "", "a pattern policy is a mapping with kind: %s and validate", Kind)
	}
	if av := child(doc, "apiVersion"); av != nil {
		kind := "document"
		if k := child(doc, "kind"); k != nil {
			kind = k.Value
		}
		return nil, p.errorf(av.Line, "apiVersion", "this is a %s %s, not a PatternPolicy: save it as %s.yaml (without %s) and list its metadata.name under a role's policies in roles.yaml",
			av.Value, kind, name, FileSuffix)
	}
	if err := p.checkKeys(doc, ""); err != nil {
		return nil, err
	}
	if !validName(name) {
		return nil, p.errorf(1, "", "%q is not a usable policy name; name the file <name>%s with lowercase letters, digits, '-' and '.'", name, FileSuffix)
	}
	pol := &Policy{Name: name, File: file, Operations: defaultOperations}

	kind := child(doc, "kind")
	if kind == nil {
		return nil, p.errorf(doc.Line, "kind", "missing; declare kind: %s", Kind)
	}
	if kind.Value != Kind {
		return nil, p.errorf(kind.Line, "kind", "%q is not %s", kind.Value, Kind)
	}
	if d := child(doc, "description"); d != nil && d.Kind != yaml.ScalarNode {
		return nil, p.errorf(d.Line, "description", "write a string")
	}

	v := child(doc, "validate")
	if v == nil {
		return nil, p.errorf(doc.Line, "validate", "missing; declare validate with a message and a pattern or anyPattern")
	}
	if v.Kind != yaml.MappingNode {
		return nil, p.errorf(v.Line, "validate", "must be a mapping with message and pattern or anyPattern")
	}
	msg := child(v, "message")
	if msg == nil || msg.Kind != yaml.ScalarNode || strings.TrimSpace(msg.Value) == "" {
		return nil, p.errorf(lineOr(msg, v), "validate.message", "write the sentence a person reads when the pattern fails")
	}
	if strings.Contains(msg.Value, "{{") {
		return nil, p.errorf(msg.Line, "validate.message", "JMESPath variables ({{ ... }}) are not supported; write a plain sentence")
	}
	pol.Message = strings.TrimSpace(msg.Value)
	if fa := child(v, "failureAction"); fa != nil {
		switch fa.Value {
		case "Enforce":
		case "Audit":
			pol.Audit = true
		default:
			return nil, p.errorf(fa.Line, "validate.failureAction", "%q is not a failure action (use Enforce to deny or Audit to warn)", fa.Value)
		}
	}

	single, any := child(v, "pattern"), child(v, "anyPattern")
	switch {
	case single != nil && any != nil:
		return nil, p.errorf(any.Line, "validate.anyPattern", "declare pattern or anyPattern, not both")
	case single != nil:
		t, err := p.tree(single, "validate.pattern", "pattern")
		if err != nil {
			return nil, err
		}
		pol.Patterns = []*Tree{t}
	case any != nil:
		if any.Kind != yaml.SequenceNode || len(any.Content) == 0 {
			return nil, p.errorf(any.Line, "validate.anyPattern", "must be a list of one or more patterns")
		}
		for i, n := range any.Content {
			t, err := p.tree(n, fmt.Sprintf("validate.anyPattern[%d]", i), fmt.Sprintf("anyPattern[%d]", i))
			if err != nil {
				return nil, err
			}
			pol.Patterns = append(pol.Patterns, t)
		}
		pol.AnyPattern = true
	default:
		return nil, p.errorf(v.Line, "validate", "declare pattern (one pattern the object must match) or anyPattern (a list, any one suffices)")
	}

	var err *problem.Problem
	if pol.Match, err = p.selector(child(doc, "match"), "match"); err != nil {
		return nil, err
	}
	if pol.Match != nil && pol.Match.Operations != nil {
		pol.Operations = pol.Match.Operations
		pol.Match.Operations = nil
	}
	if pol.Exclude, err = p.selector(child(doc, "exclude"), "exclude"); err != nil {
		return nil, err
	}
	return pol, nil
}

// yamlError is the YAML parser's error at its line, with a hint for the
// commonest slip in patterns.
func yamlError(file string, err error) *problem.Problem {
	p := problem.FromYAML(file, err)
	if strings.Contains(p.Message, "did not find expected alphabetic or numeric character") {
		p.Message += ` (an unquoted * or & starts a YAML alias or anchor: quote wildcards and operators, e.g. "*", "!high", ">1")`
	}
	return p
}

type parser struct {
	file string
}

func (p *parser) errorf(line int, field, format string, args ...any) *problem.Problem {
	return &problem.Problem{File: p.file, Line: line, Path: field, Message: fmt.Sprintf(format, args...)}
}

// checkKeys reports the first unknown field outside the patterns.
func (p *parser) checkKeys(n *yaml.Node, at string) *problem.Problem {
	allowed := allowedKeys[at]
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		field := key.Value
		if at != "" {
			field = at + "." + key.Value
		}
		if !contains(allowed, key.Value) {
			return p.errorf(key.Line, field, "unknown field (known here: %s)", strings.Join(allowed, ", "))
		}
		// Only the policy's own fields are checked; patterns are free-form.
		if _, nested := allowedKeys[key.Value]; nested && at == "" && val.Kind == yaml.MappingNode {
			if err := p.checkKeys(val, key.Value); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *parser) selector(n *yaml.Node, field string) (*Selector, *problem.Problem) {
	if n == nil {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode || len(n.Content) == 0 {
		return nil, p.errorf(n.Line, field, "must be a mapping with operations, userInfo or oldObject")
	}
	s := &Selector{Line: n.Line}
	if ops := child(n, "operations"); ops != nil {
		if ops.Kind != yaml.SequenceNode || len(ops.Content) == 0 {
			return nil, p.errorf(ops.Line, field+".operations", "list at least one of %s", strings.Join(knownOperations, ", "))
		}
		for _, o := range ops.Content {
			if !contains(knownOperations, o.Value) {
				return nil, p.errorf(o.Line, field+".operations", "%q is not an operation a pattern can judge (use %s)", o.Value, strings.Join(knownOperations, ", "))
			}
			s.Operations = append(s.Operations, o.Value)
		}
	}
	var err *problem.Problem
	if u := child(n, "userInfo"); u != nil {
		if s.UserInfo, err = p.tree(u, field+".userInfo", field+".userInfo"); err != nil {
			return nil, err
		}
		if err := p.checkUserInfoKeys(u, field+".userInfo"); err != nil {
			return nil, err
		}
	}
	if o := child(n, "oldObject"); o != nil {
		if s.OldObject, err = p.tree(o, field+".oldObject", field+".oldObject"); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// userInfoKeys are the fields of request.userInfo (authentication/v1).
var userInfoKeys = []string{"username", "uid", "groups", "extra"}

func (p *parser) checkUserInfoKeys(n *yaml.Node, field string) *problem.Problem {
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		if a := parseAnchor(key); a != nil {
			key = a.Key()
		}
		if !contains(userInfoKeys, key) {
			return p.errorf(n.Content[i].Line, field+"."+n.Content[i].Value, "request.userInfo has no field %q (it has %s)", key, strings.Join(userInfoKeys, ", "))
		}
	}
	return nil
}

// tree converts a pattern's YAML into the values Kyverno's matcher reads
// and checks it: anchors, operators, and the Kyverno features a pattern
// here cannot use.
func (p *parser) tree(n *yaml.Node, field, label string) (*Tree, *problem.Problem) {
	if n.Kind != yaml.MappingNode || len(n.Content) == 0 {
		return nil, p.errorf(n.Line, field, "a pattern is a mapping that mirrors the document it matches (e.g. metadata: {labels: {...}})")
	}
	v, err := p.value(n, field, inPattern)
	if err != nil {
		return nil, err
	}
	// Kyverno's own check of validate patterns (supported anchors, an
	// existence anchor holds a non-empty list), after ours so that ours
	// can name the line.
	if where, err := validatePattern(v); err != nil {
		return nil, p.errorf(n.Line, field, "at %s: %v", where, err)
	}
	return &Tree{Label: label, Line: n.Content[0].Line, value: v, node: n, rewritten: rewritesMetadata(v)}, nil
}

// where says what a pattern node sits under, for the checks that depend on
// it.
type where int

const (
	inPattern  where = iota
	inMetadata       // the value of a metadata key
	inLabels         // the value of metadata.labels or metadata.annotations
)

// value builds Kyverno's view of a YAML node (maps of string keys, lists,
// strings, int64, float64, bool, nil) and checks each part.
func (p *parser) value(n *yaml.Node, field string, at where) (any, *problem.Problem) {
	switch n.Kind {
	case yaml.AliasNode:
		return nil, p.errorf(n.Line, field, "YAML aliases (*name) are not allowed in patterns; quote a wildcard: \"*\"")
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nil, p.errorf(k.Line, field, "a key must be a plain string")
			}
			f := field + "." + k.Value
			if k.Value == "<<" {
				return nil, p.errorf(k.Line, f, "YAML merge keys are not allowed in patterns")
			}
			if _, dup := m[k.Value]; dup {
				return nil, p.errorf(k.Line, f, "key %q appears twice in the same mapping", k.Value)
			}
			if err := checkKey(k.Value, val); err != nil {
				return nil, p.errorf(k.Line, f, "%s", err)
			}
			next := inPattern
			switch key := stripAnchor(k.Value); {
			case at == inLabels:
				// Kyverno expands wildcard keys here by rebuilding this map
				// from its string values: any other value is dropped and its
				// line silently never fails.
				if val.Kind != yaml.ScalarNode || val.ShortTag() != "!!str" {
					return nil, p.errorf(val.Line, f, "a label or annotation pattern must be a string (quote numbers and booleans): Kyverno's matcher drops any other value here, so this line would never fail (write X(%s): \"*\" to forbid the key, \"?*\" to require a value)", key)
				}
			case key == "metadata":
				next = inMetadata
			case at == inMetadata && (key == "labels" || key == "annotations"):
				next = inLabels
			}
			cv, err := p.value(val, f, next)
			if err != nil {
				return nil, err
			}
			m[k.Value] = cv
		}
		return m, nil
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			return nil, p.errorf(n.Line, field, "an empty list matches nothing in Kyverno (\"pattern Array empty\"); give at least one element")
		}
		l := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			cv, err := p.value(c, fmt.Sprintf("%s[%d]", field, i), inPattern)
			if err != nil {
				return nil, err
			}
			l = append(l, cv)
		}
		return l, nil
	case yaml.ScalarNode:
		v, err := scalar(n)
		if err != nil {
			return nil, p.errorf(n.Line, field, "%v", err)
		}
		if s, ok := v.(string); ok {
			if err := checkValue(s); err != nil {
				return nil, p.errorf(n.Line, field, "%s", err)
			}
		}
		return v, nil
	}
	return nil, p.errorf(n.Line, field, "unsupported YAML node")
}

// child returns the value of key in a mapping node, or nil.
func child(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func lineOr(n, parent *yaml.Node) int {
	if n != nil {
		return n.Line
	}
	return parent.Line
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func validName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// RequesterReads says which parts of the request that only an admission
// request has (request.userInfo) the policy's match or exclude selectors
// read, and the line of the first one: such a policy cannot be judged
// against a stored object, which has no requester (Kyverno requires
// background: false of such rules for the same reason).
func (p *Policy) RequesterReads() (line int, reads []string) {
	for _, s := range []*Selector{p.Match, p.Exclude} {
		if s != nil && s.UserInfo != nil {
			if line == 0 {
				line = s.UserInfo.Line
			}
			reads = []string{"request.userInfo"}
		}
	}
	return line, reads
}

// StoredOperation is the operation under which a stored object is judged
// in the background: UPDATE (the object written again as it is) when the
// policy judges updates, else CREATE; "" when the policy judges neither
// (a DELETE-only policy says nothing about an object that stays).
func (p *Policy) StoredOperation() string {
	for _, op := range []string{"UPDATE", "CREATE"} {
		if slices.Contains(p.Operations, op) {
			return op
		}
	}
	return ""
}
