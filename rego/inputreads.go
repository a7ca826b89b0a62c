package rego

import (
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
)

// What a policy reads of input is answered here, once, for two callers:
// the input builder leaves out what no policy of the set reads
// (Compiled.MayReadInput), and the background audit skips the rules that
// read the requester, which a stored object does not have
// (Compiled.RuleInputReads). Both walk the compiled modules, where every
// reference is resolved to its full path.

// directReads is what one rule definition reads itself: the constant
// prefix of every path into input (input.request.object.spec for
// input.request.object.spec.services[i]), and the data references it makes
// (the rules and functions it may evaluate).
type directReads struct {
	input [][]string
	data  []ast.Ref
	// exists are references into data.inventory that stand alone as an
	// expression: a test that a stored object (or a kind of them) exists,
	// which reads none of its fields.
	exists []ast.Ref
}

// readsOfRule walks one compiled rule: its head, its body and its else
// chain. Aliases of data.inventory's documents are followed the same way,
// so a stored object's fields read through a variable are known
// (InventoryReads).
//
// The compiler moves a reference used as an argument into a local variable
// (__local1__ = input.request; object.get(__local1__, ["object", "spec"],
// {}, __local2__)), so such aliases of input are followed to what they
// name: a use of the alias reads below its source, and an alias never used
// still reads its source (the rule needs it defined). object.get with a
// constant path reads only that path below its object; any other use of a
// reference (a function argument, a bare variable) reads the whole subtree
// under its constant prefix, and a bare input everything. A with modifier
// replaces input rather than reading it, so its target is not a read.
func readsOfRule(rule *ast.Rule) directReads {
	var out directReads
	alias := map[ast.Var]ast.Ref{}
	aliasExprs := map[*ast.Expr]bool{}
	used := map[ast.Var]bool{}
	resolve := func(r ast.Ref) ast.Ref {
		if v, ok := r[0].Value.(ast.Var); ok {
			if src, ok := alias[v]; ok {
				used[v] = true
				return src.Concat(r[1:])
			}
		}
		return r
	}
	ast.WalkExprs(rule, func(e *ast.Expr) bool {
		if !e.IsEquality() && !e.IsAssignment() {
			return false
		}
		terms := e.Terms.([]*ast.Term)
		a, b := terms[1], terms[2]
		if asRef(a) != nil {
			a, b = b, a
		}
		v, isVar := a.Value.(ast.Var)
		r := asRef(b)
		if !isVar || r == nil {
			return false
		}
		if r = resolve(r); r.HasPrefix(ast.InputRootRef) || r.HasPrefix(inventoryRef) {
			alias[v] = r
			aliasExprs[e] = true
		}
		return false
	})
	record := func(r ast.Ref) {
		switch {
		case r.HasPrefix(ast.InputRootRef):
			out.input = append(out.input, constantPrefix(r))
		case r.HasPrefix(ast.DefaultRootRef):
			out.data = append(out.data, r)
		}
	}
	var visitor *ast.GenericVisitor
	objectGet := func(call []*ast.Term) bool {
		if len(call) < 4 || call[0].Value.Compare(ast.ObjectGet.Ref()) != 0 {
			return false
		}
		var base ast.Ref
		switch b := call[1].Value.(type) {
		case ast.Ref:
			base = resolve(b)
		case ast.Var:
			src, ok := alias[b]
			if !ok {
				return false
			}
			used[b], base = true, src
		default:
			return false
		}
		keys, ok := constantKeys(call[2])
		if !ok || !base.HasPrefix(ast.InputRootRef) && !base.HasPrefix(inventoryRef) {
			return false
		}
		record(base.Concat(keys))
		for _, t := range call[3:] {
			visitor.Walk(t)
		}
		return true
	}
	visitor = ast.NewGenericVisitor(func(x any) bool {
		switch x := x.(type) {
		case *ast.Expr:
			if aliasExprs[x] {
				return true
			}
			if len(x.With) > 0 {
				for _, w := range x.With {
					visitor.Walk(w.Value)
				}
				stripped := x.Copy()
				stripped.With = nil
				visitor.Walk(stripped)
				return true
			}
			if call, ok := x.Terms.([]*ast.Term); ok && x.IsCall() {
				return objectGet(call)
			}
			if t, ok := x.Terms.(*ast.Term); ok {
				if r := asRef(t); r != nil {
					if r = resolve(r); r.HasPrefix(inventoryRef) {
						out.exists = append(out.exists, r)
						for _, t := range r[1:] {
							visitor.Walk(t)
						}
						return true
					}
				}
			}
		case ast.Call:
			return objectGet(x)
		case ast.Ref:
			record(resolve(x))
			for _, t := range x[1:] {
				visitor.Walk(t)
			}
			return true
		case ast.Var:
			if src, ok := alias[x]; ok {
				used[x] = true
				record(src) // the whole aliased document
			} else if x.Equal(ast.InputRootDocument.Value) {
				record(ast.InputRootRef)
			} else if x.Equal(ast.DefaultRootDocument.Value) {
				record(ast.DefaultRootRef)
			}
		}
		return false
	})
	visitor.Walk(rule)
	for v, src := range alias {
		if !used[v] {
			record(src)
		}
	}
	return out
}

// asRef is t as a reference, reading the bare root documents input and
// data as references to them; nil for anything else.
func asRef(t *ast.Term) ast.Ref {
	switch v := t.Value.(type) {
	case ast.Ref:
		return v
	case ast.Var:
		switch {
		case v.Equal(ast.InputRootDocument.Value):
			return ast.InputRootRef
		case v.Equal(ast.DefaultRootDocument.Value):
			return ast.DefaultRootRef
		}
	}
	return nil
}

// inputReads is what a compiled policy set may read of input: the
// constant prefixes every rule reads. A path no prefix reaches, and that
// reaches no prefix, is read by no policy, so the engine may leave it out
// of the input it builds.
type inputReads struct {
	prefixes [][]string
}

// analyseInputReads gathers what every rule of the compiled modules reads.
func analyseInputReads(modules map[string]*ast.Module) *inputReads {
	r := &inputReads{}
	for _, mod := range modules {
		for _, rule := range mod.Rules {
			r.prefixes = append(r.prefixes, readsOfRule(rule).input...)
		}
	}
	return r
}

// mayRead reports whether a policy may read path or anything under it.
func (r *inputReads) mayRead(path []string) bool {
	for _, p := range r.prefixes {
		if prefixesMeet(p, path) {
			return true
		}
	}
	return false
}

// below is what the prefixes that meet path read below it (InputReadsBelow).
func (r *inputReads) below(path []string) [][]string {
	var out [][]string
	for _, p := range r.prefixes {
		if prefixesMeet(p, path) {
			out = append(out, slices.Clone(p[min(len(p), len(path)):]))
		}
	}
	return out
}

// prefixesMeet reports whether one path lies on the other's way: one is a
// prefix of the other.
func prefixesMeet(a, b []string) bool {
	n := min(len(a), len(b))
	return slices.Equal(a[:n], b[:n])
}

// RuleInputReads is one rule definition and what it may read of input.
type RuleInputReads struct {
	// Package is the module's package as roles.yaml names it.
	Package string
	// Name is the rule's name (deny, warn, ...).
	Name string
	// Location is where the definition is, the same in the parsed modules
	// (Without's drop function sees those).
	Location *ast.Location
	// Input are the constant paths below input it may read, itself or
	// through the rules and functions it may evaluate, sorted.
	Input [][]string
}

// Reads reports whether the definition may read path (below input) or
// anything under it.
func (r RuleInputReads) Reads(path []string) bool {
	return slices.ContainsFunc(r.Input, func(p []string) bool { return prefixesMeet(p, path) })
}

// RuleInputReads lists every definition of the rules named in names, module
// by module in file order, with what each may read of input: its own reads
// and those of every rule and function it may evaluate (a data reference
// may evaluate each rule whose path starts with the reference's ground
// prefix or is a prefix of it).
func (c *Compiled) RuleInputReads(names ...string) []RuleInputReads {
	modules := c.compiler.Modules
	t := &transitiveReads{memo: map[*ast.Rule][][]string{}, active: map[*ast.Rule]bool{}}
	paths := make([]string, 0, len(modules))
	for path, mod := range modules {
		paths = append(paths, path)
		for _, rule := range mod.Rules {
			t.rules = append(t.rules, ruleAt{path: mod.Package.Path.Extend(rule.Head.Ref().GroundPrefix()), rule: rule})
		}
	}
	slices.Sort(paths)
	var out []RuleInputReads
	for _, path := range paths {
		mod := modules[path]
		for _, rule := range mod.Rules {
			name := rule.Head.Ref()[0].Value.String()
			if !slices.Contains(names, name) {
				continue
			}
			out = append(out, RuleInputReads{Package: PackageName(mod), Name: name, Location: rule.Location, Input: t.of(rule)})
		}
	}
	return out
}

// transitiveReads follows data references from rule to rule.
type transitiveReads struct {
	rules []ruleAt
	memo  map[*ast.Rule][][]string
	// active marks rules being walked, to end recursion through cycles
	// (the compiler refuses recursion, but functions can be mutual).
	active map[*ast.Rule]bool
	// live, when set, is what of a rule may hold (InputReadsBelowForKind):
	// a rule without its dead bodies, nil when none is left.
	live func(*ast.Rule) *ast.Rule
}

// ruleAt is a rule with the ground prefix of the document it defines.
type ruleAt struct {
	path ast.Ref
	rule *ast.Rule
}

// evaluatedBy lists the rules a data reference may evaluate: each whose
// path starts with the reference's ground prefix or is a prefix of it.
func (t *transitiveReads) evaluatedBy(ref ast.Ref) []*ast.Rule {
	prefix := ref.GroundPrefix()
	var out []*ast.Rule
	for _, at := range t.rules {
		if at.path.HasPrefix(prefix) || prefix.HasPrefix(at.path) {
			out = append(out, at.rule)
		}
	}
	return out
}

func (t *transitiveReads) of(rule *ast.Rule) [][]string {
	if got, ok := t.memo[rule]; ok {
		return got
	}
	if t.active[rule] {
		return nil
	}
	live := rule
	if t.live != nil {
		if live = t.live(rule); live == nil {
			t.memo[rule] = nil
			return nil
		}
	}
	t.active[rule] = true
	direct := readsOfRule(live)
	found := slices.Clone(direct.input)
	for _, ref := range direct.data {
		for _, r := range t.evaluatedBy(ref) {
			if r != rule {
				found = append(found, t.of(r)...)
			}
		}
	}
	delete(t.active, rule)
	found = sortedPaths(found)
	t.memo[rule] = found
	return found
}

// constantPrefix is the leading constant string keys of an input reference.
func constantPrefix(ref ast.Ref) []string {
	out := []string{}
	for _, t := range ref[1:] {
		s, ok := t.Value.(ast.String)
		if !ok {
			break
		}
		out = append(out, string(s))
	}
	return out
}

// constantKeys turns object.get's key argument into reference terms: a
// string, or an array of strings.
func constantKeys(t *ast.Term) ([]*ast.Term, bool) {
	switch v := t.Value.(type) {
	case ast.String:
		return []*ast.Term{t}, true
	case *ast.Array:
		keys := make([]*ast.Term, 0, v.Len())
		for i := range v.Len() {
			if _, ok := v.Elem(i).Value.(ast.String); !ok {
				return nil, false
			}
			keys = append(keys, v.Elem(i))
		}
		return keys, true
	}
	return nil, false
}
