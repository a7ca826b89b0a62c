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

// scanLoop is a scan over an object or a set, whose members come to a
// callback: its state in one allocation rather than one per variable.
type scanLoop struct {
	s        *state
	l        []*ast.Term
	body     block
	key, val int
	stop     bool
	n        uint32
	err      error
}

func (sl *scanLoop) each(k, v *ast.Term) bool {
	if sl.err = sl.s.check(); sl.err != nil {
		return true
	}
	sl.l[sl.key], sl.l[sl.val] = k, v
	sl.stop, sl.n, sl.err = sl.body.run(sl.s, sl.l)
	return sl.stop || sl.err != nil
}

func (sl *scanLoop) member(e *ast.Term) bool { return sl.each(e, e) }

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
		switch coll := termValue(l[src]).(type) {
		case *ast.Array:
			// A loop of its own, without the closure the object and set
			// cases need: its state then stays on the stack.
			for i := 0; i < coll.Len(); i++ {
				if err = s.check(); err != nil {
					break
				}
				l[key], l[val] = ast.InternedTerm(i), coll.Elem(i)
				if stop, n, err = body.run(s, l); stop || err != nil {
					break
				}
			}
		case ast.Object:
			sl := &scanLoop{s: s, l: l, body: body, key: key, val: val}
			coll.Until(sl.each)
			stop, n, err = sl.stop, sl.n, sl.err
		case ast.Set:
			sl := &scanLoop{s: s, l: l, body: body, key: key, val: val}
			coll.Until(sl.member)
			stop, n, err = sl.stop, sl.n, sl.err
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
