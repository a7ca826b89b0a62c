package rego

import (
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Kind is the group, version and kind of a request's object, as
// input.request.kind holds them.
type Kind struct {
	Group, Version, Kind string
}

// field is the member of input.request.kind named name.
func (k Kind) field(name string) (string, bool) {
	switch name {
	case "group":
		return k.Group, true
	case "version":
		return k.Version, true
	case "kind":
		return k.Kind, true
	}
	return "", false
}

// decisionRules are the rules a decision evaluates (ValidationRules and
// MutationRules); everything else a decision reads, it reads through them.
var decisionRules = append(slices.Clone(ValidationRules), MutationRules...)

// InputReadsBelowForKind is InputReadsBelow for requests of one kind: what
// the rules a decision evaluates (deny, warn, patch, and the rules and
// functions they may evaluate) may read below path when input.request.kind
// is kind.
//
// A rule body with a condition kind fails, before anything in it that may
// read the objects, contributes nothing: the body is a conjunction,
// evaluated in order, so for that kind it stops at the condition, having
// read nothing of the objects and raised no error from them (built-in
// errors are strict). A condition after such a read does not prune the
// body: with the objects decoded in part, the read could give another
// answer, or no error where whole objects raise one. The conditions
// recognised are the
// plain ones policies gate kinds with: input.request.kind.group, .version
// or .kind compared with a string (==, =, !=) or tested against a constant
// set or array (in), directly or through a local the compiler made, and a
// reference to a rule that no body of can hold for kind and that has no
// default (is_quantumnode in the bundled set). Anything else, a with
// modifier, a negation, a comparison through a rule's value, holds as far
// as this analysis knows, so the reads stay a superset of what a decision
// reads. The webhook decodes only these paths of a request's objects
// (policies.ObjectReads.ForKind).
func (c *Compiled) InputReadsBelowForKind(kind Kind, path ...string) [][]string {
	modules := c.compiler.Modules
	k := &kindPruning{kind: kind, rules: map[string][]*ast.Rule{}, undefined: map[string]bool{}, active: map[string]bool{},
		all: &transitiveReads{memo: map[*ast.Rule][][]string{}, active: map[*ast.Rule]bool{}}}
	t := &transitiveReads{memo: map[*ast.Rule][][]string{}, active: map[*ast.Rule]bool{}, live: k.live}
	var entries []*ast.Rule
	for _, mod := range modules {
		for _, rule := range mod.Rules {
			at := mod.Package.Path.Extend(rule.Head.Ref().GroundPrefix())
			t.rules = append(t.rules, ruleAt{path: at, rule: rule})
			k.rules[at.String()] = append(k.rules[at.String()], rule)
			if slices.Contains(decisionRules, rule.Head.Ref()[0].Value.String()) {
				entries = append(entries, rule)
			}
		}
	}
	k.all.rules = t.rules
	reads := &inputReads{}
	for _, rule := range entries {
		reads.prefixes = append(reads.prefixes, t.of(rule)...)
	}
	return reads.below(path)
}

// kindPruning removes from rules the bodies that cannot hold for one kind.
type kindPruning struct {
	kind Kind
	// rules are the definitions by the path they define (data.p.r).
	rules map[string][]*ast.Rule
	// undefined memoises which rule paths are undefined for the kind;
	// active marks those being decided, so a cycle counts as defined.
	undefined, active map[string]bool
	// all is what every rule may read, none pruned: whether evaluating a
	// reference may read the objects.
	all *transitiveReads
}

// live is rule with the bodies of its else chain that cannot hold for the
// kind left out, or nil when none can. A dead body passes evaluation on to
// its else, so a chain keeps its live bodies in order.
func (k *kindPruning) live(rule *ast.Rule) *ast.Rule {
	var chain []*ast.Rule
	changed := false
	for r := rule; r != nil; r = r.Else {
		if k.fails(r.Body) {
			changed = true
			continue
		}
		chain = append(chain, r)
	}
	if !changed {
		return rule
	}
	if len(chain) == 0 {
		return nil
	}
	var next *ast.Rule
	for i := len(chain) - 1; i >= 0; i-- {
		cp := *chain[i]
		cp.Else = next
		next = &cp
	}
	return next
}

// fails reports whether a body has a condition that fails for the kind
// before any expression that may read the objects.
func (k *kindPruning) fails(body ast.Body) bool {
	locals := map[ast.Var]ast.Ref{}
	for _, e := range body {
		if !e.Negated && len(e.With) == 0 {
			switch terms := e.Terms.(type) {
			case *ast.Term:
				if ref, ok := terms.Value.(ast.Ref); ok && k.undefinedRef(ref) {
					return true
				}
			case []*ast.Term:
				if k.callFails(terms, locals) {
					return true
				}
			}
		}
		if k.mayReadObjects(e, locals) {
			return false
		}
	}
	return false
}

// objectPaths are the members of input.request a projection may leave
// out of.
var objectPaths = [][]string{{"request", "object"}, {"request", "oldObject"}}

// readsObjects reports whether a read of input at path may read what
// decoding for a kind leaves out of the objects.
func readsObjects(path []string) bool {
	return slices.ContainsFunc(objectPaths, func(p []string) bool { return prefixesMeet(path, p) })
}

// mayReadObjects reports whether evaluating e may read the objects: a
// reference into them (through the compiler's locals too), the whole
// input, or a rule or function that may. Binding a compiler local to a
// reference reads nothing yet; its uses do.
func (k *kindPruning) mayReadObjects(e *ast.Expr, locals map[ast.Var]ast.Ref) bool {
	if call, ok := e.Terms.([]*ast.Term); ok && len(call) == 3 && call[0].Value.String() == "eq" {
		if v, ok := call[1].Value.(ast.Var); ok && strings.HasPrefix(string(v), "__local") {
			if _, ok := call[2].Value.(ast.Ref); ok {
				return false
			}
		}
	}
	found := false
	var visitor *ast.GenericVisitor
	visitor = ast.NewGenericVisitor(func(x any) bool {
		if found {
			return true
		}
		switch v := x.(type) {
		case ast.Ref:
			// The head is the document read; the other terms are keys,
			// which may read something themselves.
			r := v
			if head, ok := r[0].Value.(ast.Var); ok {
				if src, ok := locals[head]; ok {
					r = src.Concat(r[1:])
				}
			}
			switch {
			case r.HasPrefix(ast.InputRootRef):
				found = readsObjects(constantPrefix(r))
			case r.HasPrefix(ast.DefaultRootRef):
				found = k.dataMayReadObjects(r)
			}
			for _, t := range v[1:] {
				visitor.Walk(t)
			}
			return true
		case ast.Var:
			if src, ok := locals[v]; ok {
				found = readsObjects(constantPrefix(src))
			} else {
				found = v.Equal(ast.InputRootDocument.Value) || v.Equal(ast.DefaultRootDocument.Value)
			}
		}
		return found
	})
	visitor.Walk(e)
	return found
}

// dataMayReadObjects reports whether a data reference may evaluate a rule
// or function that may read the objects, in any of its bodies.
func (k *kindPruning) dataMayReadObjects(ref ast.Ref) bool {
	return slices.ContainsFunc(k.all.evaluatedBy(ref), func(r *ast.Rule) bool {
		return slices.ContainsFunc(k.all.of(r), readsObjects)
	})
}

// callFails reports whether one call expression fails for the kind, and
// records the locals the compiler binds to input.request.kind's members.
func (k *kindPruning) callFails(call []*ast.Term, locals map[ast.Var]ast.Ref) bool {
	op := call[0].Value.String()
	args := call[1:]
	switch {
	case (op == "eq" || op == "equal" || op == "neq") && len(args) == 2:
		a, b := args[0], args[1]
		if op == "eq" {
			if v, ok := a.Value.(ast.Var); ok {
				if ref, ok := b.Value.(ast.Ref); ok && ref.HasPrefix(ast.InputRootRef) {
					locals[v] = ref
					return false
				}
			}
		}
		value, ok := k.kindField(a, locals)
		other := b
		if !ok {
			value, ok = k.kindField(b, locals)
			other = a
		}
		s, isString := other.Value.(ast.String)
		if !ok || !isString {
			return false
		}
		if op == "neq" {
			return value == string(s)
		}
		return value != string(s)
	case op == "internal.member_2" && len(args) == 2:
		value, ok := k.kindField(args[0], locals)
		if !ok || !args[1].IsGround() {
			return false
		}
		var found, onlyStrings = false, true
		each := func(t *ast.Term) {
			s, isString := t.Value.(ast.String)
			onlyStrings = onlyStrings && isString
			found = found || (isString && string(s) == value)
		}
		switch c := args[1].Value.(type) {
		case ast.Set:
			c.Foreach(each)
		case *ast.Array:
			c.Foreach(each)
		default:
			return false
		}
		return onlyStrings && !found
	}
	return false
}

// kindField is the kind's value of the member of input.request.kind that t
// reads (directly or through a local), when it reads one.
func (k *kindPruning) kindField(t *ast.Term, locals map[ast.Var]ast.Ref) (string, bool) {
	var ref ast.Ref
	switch v := t.Value.(type) {
	case ast.Ref:
		ref = v
	case ast.Var:
		ref = locals[v]
	}
	if len(ref) != 4 || !ref.HasPrefix(kindRef) {
		return "", false
	}
	name, ok := ref[3].Value.(ast.String)
	if !ok {
		return "", false
	}
	return k.kind.field(string(name))
}

// kindRef is input.request.kind.
var kindRef = ast.MustParseRef("input.request.kind")

// undefinedRef reports whether a reference names (or reads into) a rule
// that is undefined for the kind: a complete rule without a default none
// of whose definitions has a body that can hold.
func (k *kindPruning) undefinedRef(ref ast.Ref) bool {
	if !ref.HasPrefix(ast.DefaultRootRef) {
		return false
	}
	for n := len(ref); n > 1; n-- {
		path := ref[:n]
		if !path.IsGround() {
			continue
		}
		key := path.String()
		if rules, ok := k.rules[key]; ok {
			return k.undefinedRules(key, rules)
		}
	}
	return false
}

func (k *kindPruning) undefinedRules(key string, rules []*ast.Rule) bool {
	if got, ok := k.undefined[key]; ok {
		return got
	}
	if k.active[key] {
		return false
	}
	k.active[key] = true
	undefined := true
	for _, r := range rules {
		if r.Default || len(r.Head.Args) > 0 || r.Head.RuleKind() != ast.SingleValue || !r.Head.Ref().IsGround() || k.live(r) != nil {
			undefined = false
			break
		}
	}
	delete(k.active, key)
	k.undefined[key] = undefined
	return undefined
}

// sortedPaths sorts and removes repeated paths.
func sortedPaths(paths [][]string) [][]string {
	slices.SortFunc(paths, func(a, b []string) int { return strings.Compare(strings.Join(a, "\x00"), strings.Join(b, "\x00")) })
	return slices.CompactFunc(paths, slices.Equal)
}
