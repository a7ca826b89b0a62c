package planeval

import (
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"
)

// resultSetAdd adds a defined value to the query's results.
func (c *compiler) resultSetAdd(x *ir.ResultSetAddStmt) (stmt, error) {
	v := c.use(x.Value)
	return func(s *state, l []*ast.Term) (bool, uint32, error) {
		if l[v] != nil {
			s.results = append(s.results, l[v])
		}
		return false, 0, nil
	}, nil
}

// returnLocal ends a function whose return local is set.
// The function's return local already holds the value; reaching
// the statement is all it says.
func (c *compiler) returnLocal(x *ir.ReturnLocalStmt) (stmt, error) {
	c.use(x.Source)
	return func(*state, []*ast.Term) (bool, uint32, error) { return false, 0, nil }, nil
}

// blockStmt runs its blocks in turn until one stops.
func (c *compiler) blockStmt(x *ir.BlockStmt) (stmt, error) {
	blocks, err := c.blocks(x.Blocks)
	if err != nil {
		return nil, err
	}
	return func(s *state, l []*ast.Term) (bool, uint32, error) {
		for _, b := range blocks {
			stop, n, err := b.run(s, l)
			if err != nil || stop {
				// A BlockStmt is not a block level of its own.
				return stop, n, err
			}
		}
		return false, 0, nil
	}, nil
}

// breakStmt leaves Index enclosing blocks.
func (c *compiler) breakStmt(x *ir.BreakStmt) (stmt, error) {
	index := x.Index
	return func(*state, []*ast.Term) (bool, uint32, error) { return true, index, nil }, nil
}

// notStmt holds when its block is undefined.
func (c *compiler) notStmt(x *ir.NotStmt) (stmt, error) {
	body, err := c.block(x.Block)
	if err != nil {
		return nil, err
	}
	return func(s *state, l []*ast.Term) (bool, uint32, error) {
		for _, st := range body {
			stop, index, err := st(s, l)
			if err != nil {
				return false, 0, err
			}
			if stop {
				if index == 0 {
					return false, 0, nil // the negated block is undefined: not holds
				}
				return true, index - 1, nil
			}
		}
		return true, 0, nil
	}, nil
}

// scan runs its block for each key and value of an array, object or set.
func (c *compiler) scan(x *ir.ScanStmt) (stmt, error) {
	src, key, val := c.use(x.Source), c.use(x.Key), c.use(x.Value)
	body, err := c.block(x.Block)
	if err != nil {
		return nil, err
	}
	return func(s *state, l []*ast.Term) (bool, uint32, error) {
		var stop bool
		var n uint32
		var err error
		each := func(k, v *ast.Term) bool {
			if err = s.check(); err != nil {
				return true
			}
			l[key], l[val] = k, v
			stop, n, err = body.run(s, l)
			return stop || err != nil
		}
		switch coll := termValue(l[src]).(type) {
		case *ast.Array:
			for i := 0; i < coll.Len(); i++ {
				if each(ast.InternedTerm(i), coll.Elem(i)) {
					break
				}
			}
		case ast.Object:
			coll.Until(func(k, v *ast.Term) bool { return each(k, v) })
		case ast.Set:
			coll.Until(func(e *ast.Term) bool { return each(e, e) })
		}
		if err != nil {
			return false, 0, err
		}
		if stop && n > 0 {
			return true, n - 1, nil
		}
		return false, 0, nil
	}, nil
}
