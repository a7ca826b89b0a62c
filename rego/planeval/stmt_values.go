package planeval

import (
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// dotStmt reads one key of a value.
func (c *compiler) dotStmt(x *ir.DotStmt) (stmt, error) {
	src, err := c.operand(x.Source)
	if err != nil {
		return nil, err
	}
	key, err := c.operand(x.Key)
	if err != nil {
		return nil, err
	}
	target := c.use(x.Target)
	if src.local >= 0 && c.dataRefs[src.local] {
		// data.a[2] reads the base document's key "2", as topdown reads
		// the store by path; obj[2] after obj := data.a does not.
		c.dataRefs[target] = true
		return func(_ *state, l []*ast.Term) (bool, uint32, error) {
			v := dotData(src.get(l), key.get(l))
			l[target] = v
			return v == nil, 0, nil
		}, nil
	}
	return func(_ *state, l []*ast.Term) (bool, uint32, error) {
		v := dot(src.get(l), key.get(l))
		l[target] = v
		return v == nil, 0, nil
	}, nil
}

// dotData is dot on a document reached from data: an object's number key
// also matches the key that is its string form.
func dotData(src, key *ast.Term) *ast.Term {
	v := dot(src, key)
	if v != nil || src == nil || key == nil {
		return v
	}
	if n, ok := key.Value.(ast.Number); ok {
		if _, isObject := src.Value.(ast.Object); isObject {
			return dot(src, ast.StringTerm(n.String()))
		}
	}
	return nil
}

// length is count: of a collection's elements or a string's runes.
func (c *compiler) length(x *ir.LenStmt) (stmt, error) {
	src, err := c.operand(x.Source)
	if err != nil {
		return nil, err
	}
	target := c.use(x.Target)
	loc := x.Location
	return func(_ *state, l []*ast.Term) (bool, uint32, error) {
		v := src.get(l)
		if v == nil {
			return true, 0, nil
		}
		var n int
		switch x := v.Value.(type) {
		case *ast.Array:
			n = x.Len()
		case ast.Object:
			n = x.Len()
		case ast.Set:
			n = x.Len()
		case ast.String:
			n = len([]rune(string(x)))
		default:
			return false, 0, &topdown.Error{Code: topdown.TypeErr, Message: fmt.Sprintf("length of %s", ast.ValueName(v.Value)), Location: c.prog.location(loc)}
		}
		l[target] = ast.InternedTerm(n)
		return false, 0, nil
	}, nil
}

// equality compares two operands (EqualStmt, or NotEqualStmt negated).
func (c *compiler) equality(x ir.Stmt) (stmt, error) {
	var a, b ir.Operand
	neg := false
	if e, ok := x.(*ir.EqualStmt); ok {
		a, b = e.A, e.B
	} else {
		ne := x.(*ir.NotEqualStmt)
		a, b, neg = ne.A, ne.B, true
	}
	oa, err := c.operand(a)
	if err != nil {
		return nil, err
	}
	ob, err := c.operand(b)
	if err != nil {
		return nil, err
	}
	return func(_ *state, l []*ast.Term) (bool, uint32, error) {
		va, vb := oa.get(l), ob.get(l)
		var stop bool
		switch {
		case va == nil && vb == nil:
			stop = false
		case va == nil || vb == nil:
			stop = true
		default:
			stop = va.Value.Compare(vb.Value) != 0
		}
		if neg {
			stop = !stop
		}
		return stop, 0, nil
	}, nil
}

// isDefined holds when its local is set.
func (c *compiler) isDefined(x *ir.IsDefinedStmt) (stmt, error) {
	src := c.use(x.Source)
	return func(_ *state, l []*ast.Term) (bool, uint32, error) { return l[src] == nil, 0, nil }, nil
}

// isUndefined holds when its local is not set.
func (c *compiler) isUndefined(x *ir.IsUndefinedStmt) (stmt, error) {
	src := c.use(x.Source)
	return func(_ *state, l []*ast.Term) (bool, uint32, error) { return l[src] != nil, 0, nil }, nil
}

// makeNumberRef sets a number written as one of the plan's strings.
func (c *compiler) makeNumberRef(x *ir.MakeNumberRefStmt) (stmt, error) {
	if x.Index >= len(c.prog.strings) {
		return nil, fmt.Errorf("number string index %d out of range", x.Index)
	}
	target := c.use(x.Target)
	return c.set(target, ast.NewTerm(ast.Number(c.prog.strings[x.Index].Value.(ast.String)))), nil
}

// resetLocal unsets a local.
func (c *compiler) resetLocal(x *ir.ResetLocalStmt) (stmt, error) {
	target := c.use(x.Target)
	return func(_ *state, l []*ast.Term) (bool, uint32, error) {
		l[target] = nil
		return false, 0, nil
	}, nil
}

// assignVar copies an operand into a local.
func (c *compiler) assignVar(x *ir.AssignVarStmt) (stmt, error) {
	src, err := c.operand(x.Source)
	if err != nil {
		return nil, err
	}
	target := c.use(x.Target)
	return func(_ *state, l []*ast.Term) (bool, uint32, error) {
		l[target] = src.get(l)
		return false, 0, nil
	}, nil
}

// assignVarOnce sets a complete rule's value; a second, different one is a conflict.
func (c *compiler) assignVarOnce(x *ir.AssignVarOnceStmt) (stmt, error) {
	src, err := c.operand(x.Source)
	if err != nil {
		return nil, err
	}
	target, loc := c.use(x.Target), x.Location
	return func(_ *state, l []*ast.Term) (bool, uint32, error) {
		v := src.get(l)
		if cur := l[target]; cur != nil {
			if v == nil || cur.Value.Compare(v.Value) != 0 {
				return false, 0, conflict(c.prog, loc, "complete rules must not produce multiple outputs")
			}
			return false, 0, nil
		}
		l[target] = v
		return false, 0, nil
	}, nil
}

// set sets a local to a constant.
func (c *compiler) set(target int, v *ast.Term) stmt {
	return func(_ *state, l []*ast.Term) (bool, uint32, error) {
		l[target] = v
		return false, 0, nil
	}
}

// typeCheck holds when an operand is defined and of the kind is accepts
// (IsArrayStmt, IsObjectStmt, IsSetStmt).
func (c *compiler) typeCheck(src ir.Operand, is func(ast.Value) bool) (stmt, error) {
	o, err := c.operand(src)
	if err != nil {
		return nil, err
	}
	return func(_ *state, l []*ast.Term) (bool, uint32, error) {
		v := o.get(l)
		return v == nil || !is(v.Value), 0, nil
	}, nil
}
