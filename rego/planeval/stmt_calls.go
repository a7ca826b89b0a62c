package planeval

import (
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"
)

// callStmt calls a planned function or a built-in, with its arguments
// on the state's stack.
func (c *compiler) callStmt(x *ir.CallStmt) (stmt, error) {
	i, ok := c.funcIndex[x.Func]
	if !ok {
		return nil, &Unsupported{Reason: "call of unknown function " + x.Func}
	}
	fn := c.prog.funcs[i]
	args := make([]operand, len(x.Args))
	for i, a := range x.Args {
		o, err := c.operand(a)
		if err != nil {
			return nil, err
		}
		args[i] = o
	}
	result, loc := c.use(x.Result), c.prog.location(x.Location)
	return func(s *state, l []*ast.Term) (bool, uint32, error) {
		// The arguments live on the state's stack: a built-in may keep
		// their terms, never the slice.
		in := s.frame(len(args))
		for i, a := range args {
			in[i] = a.get(l)
		}
		v, err := s.call(fn, in, loc)
		s.pop(len(args))
		if err != nil {
			return false, 0, err
		}
		l[result] = v
		return v == nil, 0, nil
	}, nil
}

// with runs its block with a local (input or data) replaced, in whole or
// under a path, and with memoized values of its own.
func (c *compiler) with(x *ir.WithStmt) (stmt, error) {
	local := c.use(x.Local)
	val, err := c.operand(x.Value)
	if err != nil {
		return nil, err
	}
	path := make([]*ast.Term, len(x.Path))
	for i, p := range x.Path {
		if p >= len(c.prog.strings) {
			return nil, fmt.Errorf("with path string index %d out of range", p)
		}
		path[i] = c.prog.strings[p]
	}
	body, err := c.block(x.Block)
	if err != nil {
		return nil, err
	}
	return func(s *state, l []*ast.Term) (bool, uint32, error) {
		saved := l[local]
		savedMemo := s.memo
		s.memo = make([]*ast.Term, len(savedMemo))
		defer func() { l[local], s.memo = saved, savedMemo }()
		v := val.get(l)
		if len(path) == 0 {
			l[local] = v
		} else {
			l[local] = upsert(saved, path, v)
		}
		for _, st := range body {
			stop, index, err := st(s, l)
			if err != nil {
				return false, 0, err
			}
			if stop {
				// Undefined (or a break out of the with block itself) ends
				// the enclosing block; a longer break leaves one level less.
				return true, max(index, 1) - 1, nil
			}
		}
		return false, 0, nil
	}, nil
}

// upsert copies doc (an object, or a new one) with v under path, copying
// each object on the way down.
func upsert(doc *ast.Term, path []*ast.Term, v *ast.Term) *ast.Term {
	var root ast.Object
	if o, ok := termValue(doc).(ast.Object); ok {
		root = o.Copy()
	} else {
		root = ast.NewObject()
	}
	cur := root
	for _, k := range path[:len(path)-1] {
		var next ast.Object
		if o, ok := termValue(cur.Get(k)).(ast.Object); ok {
			next = o.Copy()
		} else {
			next = ast.NewObject()
		}
		cur.Insert(k, ast.NewTerm(next))
		cur = next
	}
	cur.Insert(path[len(path)-1], v)
	return ast.NewTerm(root)
}
