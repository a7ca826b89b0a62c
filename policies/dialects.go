package policies

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/quantumnode/qn-admission/internal/policyfiles"
	"github.com/quantumnode/qn-admission/policies/dialect"
	"github.com/quantumnode/qn-admission/policies/pattern"
	"github.com/quantumnode/qn-admission/rego"
)

// isDialectFile says a file may hold dialect documents: YAML other than
// the role table, the data and pattern policies.
func isDialectFile(name string) bool {
	base := path.Base(name)
	if !strings.HasSuffix(base, ".yaml") && !strings.HasSuffix(base, ".yml") {
		return false
	}
	return base != RolesFile && !slices.Contains(DataFiles, base) && !strings.HasSuffix(base, pattern.FileSuffix)
}

// readDialectDocuments returns every YAML document of the directory that
// declares an apiVersion and a kind, and the files it read (for the
// revision). Documents of other APIs (a test's resources, a Kyverno test
// file) are read and left alone; documents of a policy API are checked by
// routeDialects.
func readDialectDocuments(fsys fs.FS, problems *Problems) ([]dialect.Document, []pattern.File) {
	var docs []dialect.Document
	var files []pattern.File
	keep := func(p string) bool { return isDialectFile(p) && !isFixtureDir(p) }
	err := policyfiles.Walk(fsys, keep, func(p string, src []byte) error {
		found, err := dialect.Documents(p, src)
		if err != nil && mentionsPolicyAPI(src) {
			*problems = append(*problems, yamlProblem(p, err))
		}
		docs = append(docs, found...)
		if len(found) > 0 {
			files = append(files, pattern.File{Path: p, Source: src})
		}
		return nil
	})
	if err != nil {
		*problems = append(*problems, &Problem{File: fileOf(err), Message: err.Error(), Hint: "make every policy file a readable regular file within the size limits"})
	}
	return docs, files
}

// isFixtureDir says a file lies under a fixtures directory: qnctl's
// fixture cases hold objects, never policies.
func isFixtureDir(p string) bool {
	return slices.Contains(strings.Split(path.Dir(p), "/"), "fixtures")
}

// mentionsPolicyAPI says a file that does not parse may be a policy: a
// broken YAML file of another kind is not ours to refuse.
func mentionsPolicyAPI(src []byte) bool {
	for _, g := range dialect.PolicyGroups {
		if strings.Contains(string(src), g+"/") {
			return true
		}
	}
	return false
}

func yamlProblem(file string, err error) *Problem {
	return &Problem{File: file, Message: "not valid YAML: " + err.Error(), Hint: "fix the YAML; the file declares a policy API"}
}

// routeDialects hands each reader the documents of its kinds, refuses the
// documents of a policy API no reader takes, and resolves each role's
// policies list by name.
func routeDialects(docs []dialect.Document, roles *RoleTable, problems *Problems) (map[string][]dialect.Policy, []dialect.Policy) {
	byReader := make([][]dialect.Document, len(dialectReaders))
	var supported []string
	for _, r := range dialectReaders {
		supported = append(supported, r.Kinds()...)
	}
	sort.Strings(supported)
	var others []dialect.Document
	for _, d := range docs {
		key := dialect.Key(d.APIVersion, d.Kind)
		i := slices.IndexFunc(dialectReaders, func(r dialect.Reader) bool { return slices.Contains(r.Kinds(), key) })
		switch {
		case i >= 0:
			byReader[i] = append(byReader[i], d)
		case !isPolicyDocument(d):
			others = append(others, d)
		default:
			hint := "qn-admission reads " + strings.Join(supported, ", ")
			if len(supported) == 0 {
				hint = "this build of qn-admission reads no policy dialects besides Rego and pattern files"
			}
			*problems = append(*problems, &Problem{File: d.File, Line: d.Line, Path: "kind",
				Message: fmt.Sprintf("%s %s is a policy this server cannot judge", d.APIVersion, d.Kind), Hint: hint})
		}
	}
	// declared are the names of every policy document, broken or not: a
	// role listing a broken one gets its file's problem, not a second one.
	declared := map[string]bool{}
	for _, d := range docs {
		if isPolicyDocument(d) {
			declared[metadataName(d)] = true
		}
	}
	byName := map[string]dialect.Policy{}
	for i, r := range dialectReaders {
		if len(byReader[i]) == 0 {
			continue
		}
		var pols []dialect.Policy
		var broken []*Problem
		if pr, ok := r.(dialect.ParamsReader); ok {
			pols, broken = pr.ReadWithParams(byReader[i], others)
		} else {
			pols, broken = r.Read(byReader[i])
		}
		*problems = append(*problems, broken...)
		for _, p := range pols {
			if prev, dup := byName[p.Name()]; dup {
				*problems = append(*problems, &Problem{File: p.File(), Line: p.Line(), Path: "metadata.name",
					Message: fmt.Sprintf("policy %q is also declared at %s:%d (%s); roles.yaml names policies by metadata.name, so names must be unique", p.Name(), prev.File(), prev.Line(), prev.Kind())})
				continue
			}
			byName[p.Name()] = p
		}
	}
	known := slices.Sorted(mapsKeys(byName))
	all := make([]dialect.Policy, len(known))
	for i, n := range known {
		all[i] = byName[n]
	}
	if roles == nil {
		return nil, all
	}
	out := map[string][]dialect.Policy{}
	for _, name := range roles.Names() {
		field := "roles." + name + ".policies"
		listed := roles.Roles[name].Policies
		for i, pname := range listed {
			p, ok := byName[pname]
			switch {
			case slices.Contains(listed[:i], pname):
				*problems = append(*problems, &Problem{File: RolesFile, Line: roles.Line(field), Path: field, Message: fmt.Sprintf("%q is listed twice", pname), Hint: "list each policy once"})
			case ok:
				out[name] = append(out[name], p)
			case declared[pname]:
				// Its document is broken and already reported.
			default:
				msg := fmt.Sprintf("%q is not a policy of the directory (there are none)", pname)
				if len(known) > 0 {
					msg = fmt.Sprintf("%q is not a policy of the directory (known: %s)", pname, strings.Join(known, ", "))
				}
				*problems = append(*problems, &Problem{File: RolesFile, Line: roles.Line(field), Path: field, Message: msg,
					Hint: "name a ClusterPolicy, Policy, ValidatingAdmissionPolicy or ValidatingPolicy of a *.yaml file by its metadata.name"})
			}
		}
	}
	return out, all
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// dialectRequest is the request as dialect policies judge it.
func dialectRequest(in *Input) dialect.Request {
	r := dialect.Request{Operation: in.Facts.Operation, Object: in.Object, OldObject: in.OldObject,
		Name: in.Facts.Name, Namespace: in.Facts.Namespace}
	if in.Request != nil {
		r.UserInfo = in.Request.UserInfo
		r.Kind = in.Request.Kind
		r.Resource = in.Request.Resource
		r.SubResource = in.Request.SubResource
		r.DryRun = in.Request.DryRun != nil && *in.Request.DryRun
	}
	return r
}

// judgeDialects adds the findings of a role's dialect policies to res, as
// judgePatterns does for pattern policies.
func judgeDialects(ctx context.Context, pols []dialect.Policy, in *Input, res *rego.Result) {
	if len(pols) == 0 {
		return
	}
	req := dialectRequest(in)
	for _, p := range pols {
		for _, f := range p.Evaluate(ctx, &req) {
			msg := findingMessage(p, f)
			if f.Warn {
				res.Warn = append(res.Warn, msg)
				res.WarnBy = append(res.WarnBy, rego.Entry{Source: p.Name(), Message: msg, Pattern: true})
			} else {
				res.Deny = append(res.Deny, msg)
				res.DenyBy = append(res.DenyBy, rego.Entry{Source: p.Name(), Message: msg, Pattern: true})
			}
		}
	}
}

// findingMessage is a finding's sentence with the policy and rule that
// said it, in the style of a pattern policy's message.
func findingMessage(p dialect.Policy, f dialect.Finding) string {
	who := p.Kind() + " " + p.Name()
	if f.Rule != "" {
		who += " rule " + f.Rule
	}
	if f.Error {
		return fmt.Sprintf("%s could not be judged: %s", who, f.Message)
	}
	return fmt.Sprintf("%s (%s)", f.Message, who)
}

// auditDialects judges a stored object against a role's dialect policies
// as auditPatterns does: one result per rule, named policy/rule; a rule
// reading the requester is skipped with the reason.
func auditDialects(ctx context.Context, pols []dialect.Policy, in *Input) []RuleResult {
	var out []RuleResult
	for _, p := range pols {
		req := dialectRequest(in)
		req.Background = true
		findings := p.Evaluate(ctx, &req)
		for _, r := range p.Rules() {
			rr := RuleResult{Package: p.Name(), Rule: r.Name, Verdict: VerdictPass}
			if len(r.RequesterReads) > 0 {
				rr.Skipped = []SkippedRule{{Location: fmt.Sprintf("%s:%d", p.File(), r.Line), Reads: r.RequesterReads}}
				rr.Verdict, rr.Messages = VerdictSkip, []string{skipMessage(rr.Skipped)}
				out = append(out, rr)
				continue
			}
			for _, f := range findings {
				if f.Rule != r.Name {
					continue
				}
				msg := findingMessage(p, f)
				switch {
				case f.Error:
					rr.Verdict = VerdictError
				case f.Warn && rr.Verdict == VerdictPass:
					rr.Verdict = VerdictWarn
				case !f.Warn:
					rr.Verdict = VerdictFail
				}
				rr.Messages = append(rr.Messages, msg)
			}
			out = append(out, rr)
		}
	}
	return out
}

// dialectSkips lists the rules of the set's dialect policies the audit
// skips, keyed policy.rule, for AuditSkips.
func dialectSkips(s *Set, out map[string][]SkippedRule) {
	for _, pols := range s.dialects {
		for _, p := range pols {
			for _, r := range p.Rules() {
				if len(r.RequesterReads) > 0 {
					out[p.Name()+"."+r.Name] = []SkippedRule{{Location: fmt.Sprintf("%s:%d", p.File(), r.Line), Reads: r.RequesterReads}}
				}
			}
		}
	}
}

// DialectPolicies are every policy of the set's directory in another
// dialect, listed by a role or not, sorted by name: what qnctl lint checks.
func (s *Set) DialectPolicies() []dialect.Policy { return s.allDialects }

// isPolicyDocument says a document belongs to a policy API: every kind of
// the Kyverno and Gatekeeper groups, and the admission policies (not the
// webhook configurations) of admissionregistration.k8s.io.
func isPolicyDocument(d dialect.Document) bool {
	if !slices.Contains(dialect.PolicyGroups, d.Group()) {
		return false
	}
	return d.Group() != "admissionregistration.k8s.io" || strings.Contains(d.Kind, "Policy")
}

// metadataName is a document's metadata.name, "" when it has none.
func metadataName(d dialect.Document) string {
	for i := 0; i+1 < len(d.Node.Content); i += 2 {
		if d.Node.Content[i].Value == "metadata" {
			m := d.Node.Content[i+1]
			for j := 0; j+1 < len(m.Content); j += 2 {
				if m.Content[j].Value == "name" {
					return m.Content[j+1].Value
				}
			}
		}
	}
	return ""
}
