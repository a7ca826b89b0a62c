package admissionpolicy

import (
	"slices"
	"sort"
	"strings"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
)

// reads is what one expression refers to, from its parsed AST: the
// longest chains of field selections rooted at a variable
// ("request.userInfo.username", "namespaceObject.metadata.labels"), and
// the functions it calls ("image", "time.now").
type reads struct {
	paths []string
	calls []string
}

// readsOf parses expr (no type check) and lists what it reads; nil when
// it does not parse (the compiler then says why).
func readsOf(env *cel.Env, expr string) *reads {
	a, iss := env.Parse(expr)
	if iss != nil && iss.Err() != nil {
		return nil
	}
	r := &reads{}
	r.walk(a.NativeRep().Expr())
	sort.Strings(r.paths)
	r.paths = slices.Compact(r.paths)
	sort.Strings(r.calls)
	r.calls = slices.Compact(r.calls)
	return r
}

// chain is e as a selection path from a variable ("request.userInfo"),
// "" when e is anything else. An index by a constant string
// (request["userInfo"]) is a selection too.
func chain(e celast.Expr) string {
	switch e.Kind() {
	case celast.IdentKind:
		return e.AsIdent()
	case celast.SelectKind:
		if base := chain(e.AsSelect().Operand()); base != "" {
			return base + "." + e.AsSelect().FieldName()
		}
	case celast.CallKind:
		c := e.AsCall()
		if c.FunctionName() == "_[_]" && len(c.Args()) == 2 && c.Args()[1].Kind() == celast.LiteralKind {
			if s, ok := c.Args()[1].AsLiteral().(types.String); ok {
				if base := chain(c.Args()[0]); base != "" {
					return base + "." + string(s)
				}
			}
		}
	}
	return ""
}

func (r *reads) walk(e celast.Expr) {
	if e == nil {
		return
	}
	if p := chain(e); p != "" {
		r.paths = append(r.paths, p)
		return
	}
	switch e.Kind() {
	case celast.SelectKind:
		r.walk(e.AsSelect().Operand())
	case celast.CallKind:
		c := e.AsCall()
		name := c.FunctionName()
		if c.IsMemberFunction() {
			// time.now() is a call of now on the identifier time, until
			// the checker resolves the namespace.
			if t := c.Target(); t.Kind() == celast.IdentKind {
				r.calls = append(r.calls, t.AsIdent()+"."+name)
			}
			r.walk(c.Target())
		}
		r.calls = append(r.calls, name)
		for _, a := range c.Args() {
			r.walk(a)
		}
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		for _, x := range []celast.Expr{c.IterRange(), c.AccuInit(), c.LoopCondition(), c.LoopStep(), c.Result()} {
			r.walk(x)
		}
	case celast.ListKind:
		for _, x := range e.AsList().Elements() {
			r.walk(x)
		}
	case celast.MapKind:
		for _, x := range e.AsMap().Entries() {
			r.walk(x.AsMapEntry().Key())
			r.walk(x.AsMapEntry().Value())
		}
	case celast.StructKind:
		for _, x := range e.AsStruct().Fields() {
			r.walk(x.AsStructField().Value())
		}
	}
}

// has says the expression reads a path at or under prefix.
func (r *reads) has(prefix string) bool {
	for _, p := range r.paths {
		if p == prefix || strings.HasPrefix(p, prefix+".") {
			return true
		}
	}
	return false
}

// variables are the policy variables the expression reads.
func (r *reads) variables() []string {
	var out []string
	for _, p := range r.paths {
		if rest, ok := strings.CutPrefix(p, "variables."); ok {
			name, _, _ := strings.Cut(rest, ".")
			out = append(out, name)
		}
	}
	return out
}

// requesterParts are the parts of an admission request a stored object
// has none of: a rule reading one is skipped by the audit.
var requesterParts = []string{"request.userInfo", "request.dryRun", "authorizer"}

// requester lists the requester parts the expression reads.
func (r *reads) requester() []string {
	var out []string
	for _, part := range requesterParts {
		if r.has(part) {
			out = append(out, part)
		}
	}
	return out
}

// namespaceReads are what the expression reads of namespaceObject beyond
// its name: the webhook is not told the namespace's labels, annotations or
// status, so such an expression cannot be judged here.
func (r *reads) namespaceReads() []string {
	var out []string
	for _, p := range r.paths {
		if (p == "namespaceObject" || strings.HasPrefix(p, "namespaceObject.")) && p != "namespaceObject.metadata.name" {
			out = append(out, p)
		}
	}
	return out
}

// kyvernoLibrary names one of Kyverno's own CEL libraries and why
// qn-admission cannot offer it.
type kyvernoLibrary struct {
	name, why string
}

const (
	needsCluster = "needs a cluster: not supported offline"
	notOffered   = "is not supported offline: qn-admission judges with Kubernetes' CEL libraries only"
)

// kyvernoVariables are the variables Kyverno's CEL environment adds.
var kyvernoVariables = map[string]kyvernoLibrary{
	"resource":      {"resource library (resource.Get, resource.List, resource.Post)", needsCluster},
	"http":          {"http library (http.Get, http.Post)", "needs the network: not supported offline"},
	"globalContext": {"globalContext library", needsCluster},
	"image":         {"image data library (image.GetMetadata)", "needs an image registry: not supported offline"},
	"exceptions":    {"PolicyExceptions (exceptions)", needsCluster},
	"json":          {"json library", notOffered},
	"yaml":          {"yaml library", notOffered},
	"x509":          {"x509 library", notOffered},
}

// kyvernoFunctions are the functions Kyverno's CEL environment adds,
// namespaced or not.
var kyvernoFunctions = map[string]kyvernoLibrary{
	"image":               {"image library (image())", notOffered},
	"isImage":             {"image library (isImage())", notOffered},
	"time.now":            {"time library (time.now())", notOffered},
	"time.toCron":         {"time library (time.toCron())", notOffered},
	"time.truncate":       {"time library (time.truncate())", notOffered},
	"random":              {"random library (random())", notOffered},
	"random.random":       {"random library (random.random())", notOffered},
	"parseServiceAccount": {"user library (parseServiceAccount())", notOffered},
	"user.parseServiceAccount": {
		"user library (user.parseServiceAccount())", notOffered},
	"sha1": {"hash library (sha1())", notOffered}, "sha256": {"hash library (sha256())", notOffered}, "md5": {"hash library (md5())", notOffered},
	"hash.sha1": {"hash library (hash.sha1())", notOffered}, "hash.sha256": {"hash library (hash.sha256())", notOffered}, "hash.md5": {"hash library (hash.md5())", notOffered},
	"gzip.compress": {"gzip library", notOffered}, "gzip.decompress": {"gzip library", notOffered},
	"math.round":             {"math library (math.round())", notOffered},
	"listObjToMap":           {"transform library (listObjToMap())", notOffered},
	"transform.listObjToMap": {"transform library (transform.listObjToMap())", notOffered},
}

// kyverno names the first of Kyverno's own libraries the expression
// uses, nil when none. It is asked only of an expression that does not
// compile in Kubernetes' environment, so a name both define is never
// refused.
func (r *reads) kyverno() *kyvernoLibrary {
	for _, p := range r.paths {
		root, _, _ := strings.Cut(p, ".")
		if l, ok := kyvernoVariables[root]; ok {
			return &l
		}
	}
	for _, c := range r.calls {
		if l, ok := kyvernoFunctions[c]; ok {
			return &l
		}
	}
	return nil
}
