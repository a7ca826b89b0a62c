package policies

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/quantumnode/qn-admission/policies/pattern"
	"github.com/quantumnode/qn-admission/rego"
)

// rolePatterns reads every pattern policy of the directory (checking each,
// used or not, as every Rego module is compiled) and resolves the patterns
// each role lists, adding a problem for each broken file and each name no
// file declares (at the line of the role's patterns list). roles may be nil
// (a broken role table): the files are still checked.
func rolePatterns(fsys fs.FS, roles *RoleTable, problems *Problems) (map[string][]*pattern.Policy, []pattern.File) {
	files, err := pattern.ReadFiles(fsys)
	if err != nil {
		*problems = append(*problems, &Problem{File: fileOf(err), Message: err.Error(), Hint: "make every " + pattern.FileSuffix + " file a readable regular file within the size limits"})
		return nil, nil
	}
	byName, broken := pattern.ParseFiles(files)
	for _, le := range broken {
		*problems = append(*problems, le)
	}
	if roles == nil {
		return nil, files
	}
	known := make([]string, 0, len(byName))
	for n := range byName {
		known = append(known, n)
	}
	sort.Strings(known)
	out := make(map[string][]*pattern.Policy)
	for _, name := range roles.Names() {
		field := "roles." + name + ".patterns"
		at := func(hint, format string, args ...any) {
			*problems = append(*problems, &Problem{File: RolesFile, Line: roles.Line(field), Path: field, Message: fmt.Sprintf(format, args...), Hint: hint})
		}
		listed := roles.Roles[name].Patterns
		for i, pname := range listed {
			p, ok := byName[pname]
			switch {
			case slices.Contains(listed[:i], pname):
				at("list each pattern policy once", "%q is listed twice", pname)
			case ok:
				out[name] = append(out[name], p)
			case slices.ContainsFunc(broken, func(le *Problem) bool { return patternName(le.File) == pname }):
				// Its file is broken and already reported.
			case len(known) == 0:
				at(fmt.Sprintf("add %s%s to the policy directory", pname, pattern.FileSuffix),
					"%q is not a pattern policy of the directory (there are none)", pname)
			default:
				at(fmt.Sprintf("fix the name or add %s%s", pname, pattern.FileSuffix),
					"%q is not a pattern policy of the directory (known: %s)", pname, strings.Join(known, ", "))
			}
		}
	}
	return out, files
}

// patternName is the policy name of a pattern file's path.
func patternName(file string) string {
	return strings.TrimSuffix(path.Base(file), pattern.FileSuffix)
}

// patternsOnly says every role of the table is judged by pattern and
// dialect policies alone, so a directory without Rego files is complete.
func patternsOnly(roles *RoleTable) bool {
	if roles == nil {
		return false
	}
	for _, r := range roles.Roles {
		if len(r.Packages) > 0 {
			return false
		}
	}
	return true
}

// patternRequest is the part of a request pattern policies judge.
func patternRequest(in *Input) pattern.Request {
	r := pattern.Request{Operation: in.Facts.Operation, Object: in.Object, OldObject: in.OldObject}
	if in.Request != nil {
		r.UserInfo = in.Request.UserInfo
	}
	return r
}

// judgePatterns adds the denials and warnings of a role's pattern policies
// to the result of its Rego query, so enforcement, windows and the decision
// log treat both alike. A role without patterns does no work here.
func judgePatterns(policies []*pattern.Policy, in *Input, res *rego.Result) {
	if len(policies) == 0 {
		return
	}
	req := patternRequest(in)
	for i, p := range policies {
		nd, nw := len(res.Deny), len(res.Warn)
		res.Deny, res.Warn = pattern.Evaluate(policies[i:i+1], &req, res.Deny, res.Warn)
		for _, m := range res.Deny[nd:] {
			res.DenyBy = append(res.DenyBy, rego.Entry{Source: p.Name, Message: m, Pattern: true})
		}
		for _, m := range res.Warn[nw:] {
			res.WarnBy = append(res.WarnBy, rego.Entry{Source: p.Name, Message: m, Pattern: true})
		}
	}
}

// explainPatterns is each of a role's pattern policies' verdict on in, for
// qnctl eval --explain.
func explainPatterns(policies []*pattern.Policy, in *Input) []pattern.Verdict {
	if len(policies) == 0 {
		return nil
	}
	req := patternRequest(in)
	out := make([]pattern.Verdict, len(policies))
	for i, p := range policies {
		out[i] = p.Judge(&req)
	}
	return out
}
