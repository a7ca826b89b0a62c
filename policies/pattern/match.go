package pattern

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"github.com/kyverno/kyverno/pkg/engine/validate"
	authenticationv1 "k8s.io/api/authentication/v1"
)

// Request is what a pattern policy judges: the parts of one admission
// request, as the webhook decoded them.
type Request struct {
	// Operation is CREATE, UPDATE, DELETE or CONNECT.
	Operation string
	// Object and OldObject are request.object and request.oldObject
	// decoded (integers as int64); nil when absent.
	Object, OldObject map[string]any
	// UserInfo is request.userInfo.
	UserInfo authenticationv1.UserInfo
}

// Outcome is what one policy made of one request.
type Outcome int

const (
	// NotApplicable: the policy does not judge this operation, or its
	// match or exclude selectors leave the request out.
	NotApplicable Outcome = iota
	// Passed: the object matched the pattern (or one of anyPattern).
	Passed
	// Skipped: a conditional or global anchor did not hold, so the pattern
	// had nothing to check (Kyverno's "rule skipped").
	Skipped
	// Failed: the object did not match; the policy denies (or warns).
	Failed
)

func (o Outcome) String() string {
	switch o {
	case Passed:
		return "passed"
	case Skipped:
		return "skipped"
	case Failed:
		return "failed"
	}
	return "not applicable"
}

// Failure is where one pattern failed to match.
type Failure struct {
	// Pattern is the label of the pattern: "pattern" or "anyPattern[i]".
	Pattern string
	// Path is the path Kyverno's matcher reports (/metadata/labels/priority/);
	// empty when it reports none.
	Path string
	// Detail is the matcher's explanation.
	Detail string
	// Line is the line of the pattern element that judged Path.
	Line int
}

// Verdict is one policy's judgement of one request.
type Verdict struct {
	Policy  *Policy
	Outcome Outcome
	// Why explains a NotApplicable or Skipped outcome.
	Why string
	// Failures say where each pattern failed (Outcome Failed); for
	// anyPattern, one per alternative that failed.
	Failures []Failure
	// Message is the deny or warn entry of a Failed verdict.
	Message string
}

// Evaluate judges req against each policy in turn and appends the message
// of every failed one to deny, or to warn for an Audit policy. A request
// that passes them all allocates nothing here beyond Kyverno's matcher.
func Evaluate(policies []*Policy, req *Request, deny, warn []string) ([]string, []string) {
	var info map[string]any
	for _, p := range policies {
		v := p.judge(req, &info)
		if v.Outcome != Failed {
			continue
		}
		if p.Audit {
			warn = append(warn, v.Message)
		} else {
			deny = append(deny, v.Message)
		}
	}
	return deny, warn
}

// Judge says what the policy makes of req, with every detail a person
// needs to see why (for qnctl eval --explain).
func (p *Policy) Judge(req *Request) Verdict {
	var info map[string]any
	return p.judge(req, &info)
}

// discard is the logger handed to Kyverno's matcher: its logs are debug
// detail of what the verdict already says.
var discard = logr.Discard()

func (p *Policy) judge(req *Request, info *map[string]any) (v Verdict) {
	v.Policy = p
	// Kyverno's matcher is not ours: if it panics on some input, fail
	// closed with a message rather than take the request down with it.
	defer func() {
		if r := recover(); r != nil {
			v.Outcome = Failed
			v.Failures = []Failure{{Pattern: "pattern", Detail: fmt.Sprintf("the pattern matcher failed: %v", r)}}
			v.Message = p.message(v.Failures)
		}
	}()
	if !slices.Contains(p.Operations, req.Operation) {
		v.Why = fmt.Sprintf("judges %s, not %s", strings.Join(p.Operations, ", "), req.Operation)
		return v
	}
	target := req.Object
	if req.Operation == "DELETE" {
		// A DELETE carries only the object being deleted.
		target = req.OldObject
	}
	if target == nil {
		v.Why = "the request carries no object to match"
		return v
	}
	if p.Match != nil {
		if ok, why := p.Match.holds(req, info); !ok {
			v.Why = "match: " + why
			return v
		}
	}
	if p.Exclude != nil {
		if ok, _ := p.Exclude.holds(req, info); ok {
			v.Why = "exclude holds"
			return v
		}
	}

	skipped := 0
	for _, t := range p.Patterns {
		err := t.match(target)
		if err == nil {
			v.Outcome, v.Failures = Passed, nil
			return v
		}
		var pe *validate.PatternError
		if errors.As(err, &pe) && pe.Skip {
			skipped++
			if v.Why == "" {
				v.Why = t.Label + ": " + pe.Error()
			}
			continue
		}
		v.Failures = append(v.Failures, t.failure(err))
	}
	if len(v.Failures) == 0 && skipped > 0 {
		v.Outcome = Skipped
		return v
	}
	v.Outcome = Failed
	v.Why = ""
	v.Message = p.message(v.Failures)
	return v
}

// match runs Kyverno's matcher over doc.
func (t *Tree) match(doc any) error {
	pattern := t.value
	if t.rewritten {
		pattern = copyTree(pattern)
	}
	return validate.MatchPattern(discard, doc, pattern)
}

// holds reports whether every part of the selector holds for req, and if
// not, which part does not.
func (s *Selector) holds(req *Request, info *map[string]any) (bool, string) {
	if s.Operations != nil && !slices.Contains(s.Operations, req.Operation) {
		return false, "operation " + req.Operation + " is not one of " + strings.Join(s.Operations, ", ")
	}
	if s.UserInfo != nil {
		if *info == nil {
			*info = userInfoDoc(req.UserInfo)
		}
		if !matches(s.UserInfo, *info) {
			return false, "userInfo does not match"
		}
	}
	if s.OldObject != nil {
		if req.OldObject == nil {
			return false, "the request has no oldObject"
		}
		if !matches(s.OldObject, req.OldObject) {
			return false, "oldObject does not match"
		}
	}
	return true, ""
}

// matches treats a skipped pattern (its conditions do not apply) as a
// match: a selector pattern narrows only where it has something to check.
func matches(t *Tree, doc any) bool {
	err := t.match(doc)
	var pe *validate.PatternError
	return err == nil || errors.As(err, &pe) && pe.Skip
}

// userInfoDoc is request.userInfo as JSON has it (empty fields omitted).
func userInfoDoc(u authenticationv1.UserInfo) map[string]any {
	doc := make(map[string]any, 4)
	if u.Username != "" {
		doc["username"] = u.Username
	}
	if u.UID != "" {
		doc["uid"] = u.UID
	}
	if len(u.Groups) > 0 {
		groups := make([]any, len(u.Groups))
		for i, g := range u.Groups {
			groups[i] = g
		}
		doc["groups"] = groups
	}
	if len(u.Extra) > 0 {
		extra := make(map[string]any, len(u.Extra))
		for k, vals := range u.Extra {
			l := make([]any, len(vals))
			for i, x := range vals {
				l[i] = x
			}
			extra[k] = l
		}
		doc["extra"] = extra
	}
	return doc
}

func (t *Tree) failure(err error) Failure {
	f := Failure{Pattern: t.Label, Detail: err.Error(), Line: t.Line}
	var pe *validate.PatternError
	if errors.As(err, &pe) && pe.Path != "" {
		f.Path = pe.Path
		f.Line = t.lineOf(pe.Path)
	}
	f.Detail = readable(f.Detail, f.Path)
	return f
}

// message is the deny or warn entry: the policy's sentence, then which
// pattern failed and where, in the style of the Rego rules' messages.
func (p *Policy) message(failures []Failure) string {
	var b strings.Builder
	b.WriteString(p.Message)
	b.WriteString(" (pattern ")
	b.WriteString(p.Name)
	if !p.AnyPattern && len(failures) == 1 {
		writeFailure(&b, failures[0])
	} else {
		b.WriteString(": no alternative matched")
		for i, f := range failures {
			if i == 0 {
				b.WriteString(": ")
			} else {
				b.WriteString("; ")
			}
			b.WriteString(f.Pattern)
			writeFailure(&b, f)
		}
	}
	b.WriteString(")")
	return b.String()
}

func writeFailure(b *strings.Builder, f Failure) {
	if f.Path != "" {
		b.WriteString(" failed at ")
		b.WriteString(f.Path)
		b.WriteString(": ")
	} else {
		b.WriteString(" failed: ")
	}
	b.WriteString(f.Detail)
}

// readable trims what the path already says from Kyverno's explanation and
// names types as a policy author knows them, not as Go does.
func readable(detail, path string) string {
	if path != "" {
		detail = strings.TrimSuffix(detail, " at path "+path)
		detail = strings.Replace(detail, ". Path: "+path+".", ":", 1)
	}
	if want, ok := strings.CutPrefix(detail, "resource value '<nil>' does not match "); ok {
		return "no value; the pattern wants " + want
	}
	if missing, ok := strings.CutSuffix(detail, " not found"); ok {
		// Kyverno's "*" check writes the path with a doubled slash.
		return strings.ReplaceAll(missing, "//", "/") + " is required (pattern \"*\")"
	}
	detail = goTypes.Replace(detail)
	if want, ok := strings.CutPrefix(detail, "pattern and resource have different structures: expected "); ok {
		if w, found := strings.CutSuffix(want, ", found null"); found {
			return "no value; the pattern wants " + w
		}
	}
	return detail
}

var goTypes = strings.NewReplacer(
	"map[string]interface {}", "a mapping",
	"[]interface {}", "a list",
	"<nil>", "null",
	"Expected ", "expected ",
)
