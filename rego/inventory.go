package rego

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
)

// The cluster inventory: stored objects that policies read as
// data.inventory, in Gatekeeper's shape
// (data.inventory.cluster[groupVersion][kind][name] and
// data.inventory.namespace[namespace][groupVersion][kind][name]). It
// changes between evaluations, so it is not part of the compiled set's
// data: a caller hands the current document to each evaluation of a
// query that reads it (WithInventory), and the prepared query, planned or
// not, reads it from there. A query that does not read it is evaluated
// exactly as before.

// InventoryKey is the member of data that holds the inventory.
const InventoryKey = "inventory"

// inventoryRef is data.inventory.
var inventoryRef = ast.DefaultRootRef.Append(ast.StringTerm(InventoryKey))

type inventoryCtxKey struct{}

// WithInventory gives the evaluations under ctx the inventory document
// inv (an object with the members cluster and namespace). Evaluations of
// queries that read data.inventory see it there; without it data.inventory
// is undefined.
func WithInventory(ctx context.Context, inv ast.Object) context.Context {
	return context.WithValue(ctx, inventoryCtxKey{}, inv)
}

func inventoryFrom(ctx context.Context) ast.Object {
	inv, _ := ctx.Value(inventoryCtxKey{}).(ast.Object)
	return inv
}

// ReadsInventory reports whether an evaluation of the query may read
// data.inventory: one of its rules, or a rule or function they may
// evaluate, refers to it or to a document above it (data itself, a
// variable key below data). A query that does not is evaluated without
// the inventory, at no cost.
func (q *Query) ReadsInventory() bool { return q.inventory }

// planData is the base data document of a planned evaluation under ctx:
// the set's data, with the inventory when the query reads it and ctx
// carries one. The merged document is kept for the last inventory seen,
// so a new one costs a copy of data's top level once, not per request.
func (q *Query) planData(ctx context.Context) *ast.Term {
	if !q.inventory {
		return nil
	}
	inv := inventoryFrom(ctx)
	if inv == nil {
		return nil
	}
	return q.set.dataWith(inv)
}

// mergedData is the set's data with one inventory document.
type mergedData struct {
	inv  ast.Object
	data *ast.Term
}

// dataWith is the set's data with inv as data.inventory.
func (c *Compiled) dataWith(inv ast.Object) *ast.Term {
	if m := c.inventory.merged.Load(); m != nil && m.inv == inv {
		return m.data
	}
	obj := ast.NewObject()
	if base, ok := c.data.(ast.Object); ok {
		base.Foreach(func(k, v *ast.Term) { obj.Insert(k, v) })
	}
	obj.Insert(ast.StringTerm(InventoryKey), ast.NewTerm(inv))
	m := &mergedData{inv: inv, data: ast.NewTerm(obj)}
	c.inventory.merged.Store(m)
	return m.data
}

// inventoryStore is the set's data store, which topdown reads, with the
// inventory of the evaluation's context under data.inventory.
type inventoryStore struct {
	storage.Store
}

// Read answers paths under data.inventory from the context's inventory,
// the rest from the store.
func (s inventoryStore) Read(ctx context.Context, txn storage.Transaction, path storage.Path) (any, error) {
	inv := inventoryFrom(ctx)
	if inv == nil || len(path) > 0 && path[0] != InventoryKey {
		return s.Store.Read(ctx, txn, path)
	}
	if len(path) == 0 {
		base, err := s.Store.Read(ctx, txn, path)
		if err != nil {
			return nil, err
		}
		v, err := ast.InterfaceToValue(base)
		if err != nil {
			return nil, err
		}
		obj, ok := v.(ast.Object)
		if !ok {
			return v, nil
		}
		obj = obj.Copy()
		obj.Insert(ast.StringTerm(InventoryKey), ast.NewTerm(inv))
		return obj, nil
	}
	var v ast.Value = inv
	for _, key := range path[1:] {
		obj, ok := v.(ast.Object)
		if !ok {
			return nil, notFound(path)
		}
		t := obj.Get(ast.StringTerm(key))
		if t == nil {
			return nil, notFound(path)
		}
		v = t.Value
	}
	return v, nil
}

// reachesInventory reports whether evaluating the documents at roots
// (data.<pkg>.<rule>) may read data.inventory.
func (c *Compiled) reachesInventory(roots []ast.Ref) bool {
	rules := c.ruleIndex()
	seen := map[*ast.Rule]bool{}
	var visit func(ref ast.Ref) bool
	visit = func(ref ast.Ref) bool {
		if meetsInventory(ref) {
			return true
		}
		prefix := ref.GroundPrefix()
		for _, at := range rules {
			if !at.path.HasPrefix(prefix) && !prefix.HasPrefix(at.path) || seen[at.rule] {
				continue
			}
			seen[at.rule] = true
			if reads := readsOfRule(at.rule); len(reads.exists) > 0 || slices.ContainsFunc(reads.data, visit) {
				return true
			}
		}
		return false
	}
	return slices.ContainsFunc(roots, visit)
}

// PackageReadsInventory reports whether the deny, warn or patch rules of
// package pkg may read data.inventory (themselves or through the rules
// and functions they may evaluate).
func (c *Compiled) PackageReadsInventory(pkg string) bool {
	var roots []ast.Ref
	for _, rule := range AllRules {
		if c.definesRule(pkg, rule) {
			roots = append(roots, ast.MustParseRef("data."+pkg+"."+rule))
		}
	}
	return c.reachesInventory(roots)
}

// sharedRule says whether the planned function name ("g0.data.p.r") is a
// rule whose value depends on the inventory and nothing of the request:
// every definition reads data.inventory, no input and calls no
// non-deterministic built-in, itself or through what it evaluates. Its
// value is then kept across evaluations with the same inventory
// (planeval.Program.ShareAcrossEvaluations): an index of the inventory
// costs once per published document, not per request.
func (c *Compiled) sharedRule(name string) bool {
	path, ok := strings.CutPrefix(name, "g0.data.")
	if !ok {
		return false
	}
	ref, err := ast.ParseRef("data." + path)
	if err != nil {
		return false
	}
	var defs []*ast.Rule
	for _, at := range c.ruleIndex() {
		if at.path.Equal(ref) {
			defs = append(defs, at.rule)
		}
	}
	if len(defs) == 0 || !c.reachesInventory([]ast.Ref{ref}) {
		return false
	}
	t := &transitiveReads{rules: c.ruleIndex(), memo: map[*ast.Rule][][]string{}, active: map[*ast.Rule]bool{}}
	for _, r := range defs {
		if len(t.of(r)) > 0 || c.nondeterministic(r, map[*ast.Rule]bool{}) {
			return false
		}
	}
	return true
}

// nondeterministic reports whether rule, or a rule it may evaluate, calls
// a built-in whose answer may change between calls (time.now_ns,
// rand.intn, ...), or reads input as a whole.
func (c *Compiled) nondeterministic(rule *ast.Rule, seen map[*ast.Rule]bool) bool {
	if seen[rule] {
		return false
	}
	seen[rule] = true
	found := false
	ast.WalkRefs(rule, func(r ast.Ref) bool {
		if b, ok := ast.BuiltinMap[r.String()]; ok && b.Nondeterministic {
			found = true
		}
		return found
	})
	ast.WalkExprs(rule, func(e *ast.Expr) bool {
		if e.IsCall() {
			if b, ok := ast.BuiltinMap[e.Operator().String()]; ok && b.Nondeterministic {
				found = true
			}
		}
		return found
	})
	if found {
		return true
	}
	for _, ref := range readsOfRule(rule).data {
		prefix := ref.GroundPrefix()
		for _, at := range c.ruleIndex() {
			if (at.path.HasPrefix(prefix) || prefix.HasPrefix(at.path)) && at.rule != rule && c.nondeterministic(at.rule, seen) {
				return true
			}
		}
	}
	return false
}

// meetsInventory reports whether ref may name data.inventory or something
// in it: its ground prefix is on data.inventory's way or below it.
func meetsInventory(ref ast.Ref) bool {
	prefix := ref.GroundPrefix()
	return prefix.HasPrefix(inventoryRef) || inventoryRef.HasPrefix(prefix)
}

// ruleIndex is every rule of the set with the document it defines.
func (c *Compiled) ruleIndex() []ruleAt {
	c.inventory.rulesOnce.Do(func() {
		for _, mod := range c.compiler.Modules {
			for _, rule := range mod.Rules {
				c.inventory.rules = append(c.inventory.rules, ruleAt{path: mod.Package.Path.Extend(rule.Head.Ref().GroundPrefix()), rule: rule})
			}
		}
	})
	return c.inventory.rules
}

// InventoryKind names one kind of the inventory as policies index it: its
// group/version ("v1", "qn.dev/v1alpha1") and kind. An empty field is any.
type InventoryKind struct {
	GroupVersion, Kind string
}

// InventoryReads is what the set's policies may read of the inventory's
// objects, by kind: the paths below an object (["spec", "nodeName"]), an
// empty path meaning the whole object. A kind no policy reads has none.
type InventoryReads struct {
	byKind map[InventoryKind][][]string
}

// Fields lists the paths the policies may read of objects of the given
// kind, sorted; an empty path among them means the whole object.
func (r InventoryReads) Fields(groupVersion, kind string) [][]string {
	var out [][]string
	for k, paths := range r.byKind {
		if (k.GroupVersion == "" || k.GroupVersion == groupVersion) && (k.Kind == "" || k.Kind == kind) {
			out = append(out, paths...)
		}
	}
	return sortedPaths(out)
}

// Any reports whether a policy of the set reads the inventory at all.
func (r InventoryReads) Any() bool { return len(r.byKind) > 0 }

// InventoryReads finds what the set's policies read of the inventory's
// objects, so an inventory keeps only those fields. A reference the
// analysis cannot place (a kind or group/version chosen by a variable)
// counts for every kind; one that takes an object, or a collection of
// them, as a whole (a function argument, count, a comprehension over the
// objects) reads whole objects.
func (c *Compiled) InventoryReads() InventoryReads {
	c.inventory.inventoryOnce.Do(func() {
		r := InventoryReads{byKind: map[InventoryKind][][]string{}}
		for _, mod := range c.compiler.Modules {
			for _, rule := range mod.Rules {
				reads := readsOfRule(rule)
				for _, ref := range reads.data {
					if !meetsInventory(ref) {
						continue
					}
					kind, fields := inventoryPath(ref)
					r.byKind[kind] = append(r.byKind[kind], fields)
				}
				for _, ref := range reads.exists {
					// A test of a field reads it; a test of an object, or
					// of a kind, only that it exists.
					kind, fields := inventoryPath(ref)
					if len(fields) == 0 {
						fields = []string{"metadata", "name"}
					}
					r.byKind[kind] = append(r.byKind[kind], fields)
				}
			}
		}
		c.inventory.inventoryReads = r
	})
	return c.inventory.inventoryReads
}

// inventoryPath places a reference into data.inventory: the kind it
// reads (empty fields where a variable or nothing stands) and the
// constant path it reads below an object (empty: the whole object).
func inventoryPath(ref ast.Ref) (InventoryKind, []string) {
	str := func(i int) string {
		if i < len(ref) {
			if s, ok := ref[i].Value.(ast.String); ok {
				return string(s)
			}
		}
		return ""
	}
	var gv, kind, name int // positions in data.inventory.<scope>...
	switch str(2) {
	case "cluster":
		gv, kind, name = 3, 4, 5
	case "namespace":
		gv, kind, name = 4, 5, 6
	default:
		return InventoryKind{}, []string{}
	}
	k := InventoryKind{GroupVersion: str(gv), Kind: str(kind)}
	if len(ref) <= name+1 {
		return k, []string{}
	}
	return k, constantPrefix(ref[name:])
}

// String names the kind for messages ("qn.dev/v1alpha1 QuantumNode").
func (k InventoryKind) String() string {
	parts := []string{k.GroupVersion, k.Kind}
	for i, p := range parts {
		if p == "" {
			parts[i] = "*"
		}
	}
	return strings.Join(parts, " ")
}

// Kinds lists the kinds with reads, sorted (an empty field is any).
func (r InventoryReads) Kinds() []InventoryKind {
	out := make([]InventoryKind, 0, len(r.byKind))
	for k := range r.byKind {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// compiledInventory is the Compiled state of the inventory: the merged
// data of the last inventory seen and the analyses done once.
type compiledInventory struct {
	merged         atomic.Pointer[mergedData]
	rulesOnce      sync.Once
	rules          []ruleAt
	inventoryOnce  sync.Once
	inventoryReads InventoryReads
}

// reserveInventory refuses a set that defines data.inventory itself (a
// package inventory, or a data member): the inventory is the cluster's.
func reserveInventory(modules map[string]*ast.Module, data map[string]any) error {
	var errs ast.Errors
	for _, mod := range modules {
		if mod.Package.Path.HasPrefix(inventoryRef) {
			errs = append(errs, ast.NewError(ast.CompileErr, mod.Package.Location,
				"package %s: data.inventory is reserved for the cluster inventory; name the package otherwise", PackageName(mod)))
		}
	}
	if _, ok := data[InventoryKey]; ok {
		errs = append(errs, ast.NewError(ast.CompileErr, &ast.Location{File: "data"},
			"data member %q is reserved for the cluster inventory; rename it", InventoryKey))
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// notFound is the store's error for a path with no document.
func notFound(path storage.Path) error {
	return &storage.Error{Code: storage.NotFoundErr, Message: path.String() + ": document does not exist"}
}
