package rego

import (
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
)

// inputReads is what a compiled policy set may read of input: the constant
// prefix of every reference into input (input.request.object.spec, or
// input.context.labels for input.context.labels[k]). A path no prefix
// reaches, and that reaches no prefix, is read by no policy, so the engine
// may leave it out of the input it builds.
type inputReads struct {
	prefixes [][]string
}

// analyseInputReads walks every module as parsed (the compiler moves
// references into generated variables, which hides the path object.get is
// given). object.get over an input reference with a constant path counts as
// a reference to that path; any other use of a reference (a function
// argument, an import) counts as a read of the whole subtree under its
// constant prefix, and a bare input as a read of everything. A with
// modifier replaces input rather than reading it, so its target is not a
// read.
func analyseInputReads(modules map[string]*ast.Module) *inputReads {
	r := &inputReads{}
	var visitor *ast.GenericVisitor
	objectGet := func(call []*ast.Term) bool {
		if len(call) < 4 || call[0].Value.Compare(ast.ObjectGet.Ref()) != 0 {
			return false
		}
		prefix, ok := constantInputPath(call[1])
		path, pathOK := constantPath(call[2])
		if !ok || !pathOK {
			return false
		}
		r.prefixes = append(r.prefixes, append(prefix, path...))
		for _, t := range call[3:] {
			visitor.Walk(t)
		}
		return true
	}
	visitor = ast.NewGenericVisitor(func(x any) bool {
		switch x := x.(type) {
		case *ast.Import:
			if ref, ok := x.Path.Value.(ast.Ref); ok && ref.HasPrefix(ast.InputRootRef) {
				r.prefixes = append(r.prefixes, constantPrefix(ref))
			}
			return true
		case *ast.Expr:
			if len(x.With) > 0 {
				for _, w := range x.With {
					visitor.Walk(w.Value)
				}
				stripped := x.Copy()
				stripped.With = nil
				visitor.Walk(stripped)
				return true
			}
			if call, ok := x.Terms.([]*ast.Term); ok {
				return objectGet(call)
			}
		case ast.Call:
			return objectGet(x)
		case ast.Ref:
			if x.HasPrefix(ast.InputRootRef) {
				r.prefixes = append(r.prefixes, constantPrefix(x))
				for _, t := range x[1:] {
					visitor.Walk(t)
				}
				return true
			}
		case ast.Var:
			if x.Equal(ast.InputRootDocument.Value) {
				r.prefixes = append(r.prefixes, []string{})
			}
		}
		return false
	})
	for _, mod := range modules {
		visitor.Walk(mod)
	}
	return r
}

// mayRead reports whether a policy may read path or anything under it.
func (r *inputReads) mayRead(path []string) bool {
	for _, p := range r.prefixes {
		n := min(len(p), len(path))
		if slices.Equal(p[:n], path[:n]) {
			return true
		}
	}
	return false
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

// constantInputPath is the path of an input reference made only of constant
// string keys.
func constantInputPath(t *ast.Term) ([]string, bool) {
	ref, ok := t.Value.(ast.Ref)
	if !ok || !ref.HasPrefix(ast.InputRootRef) {
		return nil, false
	}
	p := constantPrefix(ref)
	return p, len(p) == len(ref)-1
}

// constantPath is object.get's key argument when it is a constant string or
// an array of constant strings.
func constantPath(t *ast.Term) ([]string, bool) {
	switch v := t.Value.(type) {
	case ast.String:
		return []string{string(v)}, true
	case *ast.Array:
		out := make([]string, 0, v.Len())
		for i := 0; i < v.Len(); i++ {
			s, ok := v.Elem(i).Value.(ast.String)
			if !ok {
				return nil, false
			}
			out = append(out, string(s))
		}
		return out, true
	}
	return nil, false
}
