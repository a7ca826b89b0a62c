package planeval

import (
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"
)

// makeArray sets an empty array.
func (c *compiler) makeArray(x *ir.MakeArrayStmt) (stmt, error) {
	target, capacity := c.use(x.Target), int(x.Capacity)
	return func(_ *state, l []*ast.Term) (bool, uint32, error) {
		l[target] = ast.NewTerm(ast.NewArrayWithCapacity(capacity))
		return false, 0, nil
	}, nil
}

// makeObject sets an empty object.
func (c *compiler) makeObject(x *ir.MakeObjectStmt) (stmt, error) {
	target := c.use(x.Target)
	return func(_ *state, l []*ast.Term) (bool, uint32, error) {
		l[target] = ast.NewTerm(ast.NewObject())
		return false, 0, nil
	}, nil
}

// makeSet sets an empty set.
func (c *compiler) makeSet(x *ir.MakeSetStmt) (stmt, error) {
	target := c.use(x.Target)
	return func(_ *state, l []*ast.Term) (bool, uint32, error) {
		l[target] = ast.NewTerm(ast.NewSet())
		return false, 0, nil
	}, nil
}

// arrayAppend appends a value to an array.
func (c *compiler) arrayAppend(x *ir.ArrayAppendStmt) (stmt, error) {
	val, err := c.operand(x.Value)
	if err != nil {
		return nil, err
	}
	arr := c.use(x.Array)
	return func(_ *state, l []*ast.Term) (bool, uint32, error) {
		a, ok := termValue(l[arr]).(*ast.Array)
		v := val.get(l)
		if !ok || v == nil {
			return false, 0, fmt.Errorf("array append: not an array or an undefined value")
		}
		l[arr] = ast.NewTerm(a.Append(v))
		return false, 0, nil
	}, nil
}

// setAdd adds a value to a set.
func (c *compiler) setAdd(x *ir.SetAddStmt) (stmt, error) {
	val, err := c.operand(x.Value)
	if err != nil {
		return nil, err
	}
	set := c.use(x.Set)
	return func(_ *state, l []*ast.Term) (bool, uint32, error) {
		st, ok := termValue(l[set]).(ast.Set)
		v := val.get(l)
		if !ok || v == nil {
			return false, 0, fmt.Errorf("set add: not a set or an undefined value")
		}
		st.Add(v)
		return false, 0, nil
	}, nil
}

// objectInsert inserts a key and value (ObjectInsertOnceStmt: a different value under a present key is a conflict).
func (c *compiler) objectInsert(x ir.Stmt) (stmt, error) {
	var k, v ir.Operand
	var obj ir.Local
	var loc ir.Location
	once := false
	if o, ok := x.(*ir.ObjectInsertStmt); ok {
		k, v, obj = o.Key, o.Value, o.Object
	} else {
		o := x.(*ir.ObjectInsertOnceStmt)
		k, v, obj, once, loc = o.Key, o.Value, o.Object, true, o.Location
	}
	ok, err := c.operand(k)
	if err != nil {
		return nil, err
	}
	ov, err := c.operand(v)
	if err != nil {
		return nil, err
	}
	target := c.use(obj)
	// A multi-value rule (r[k] contains v) grows the set of a key in place
	// and inserts it again; OPA's Insert of a present key hashes the whole
	// object again, so building the rule's value costs the square of its
	// keys. Into the function's return value, the insert of the same set
	// is skipped and the value is built again, hash and all, on return
	// (rehashed), once.
	inPlace := !once && target == c.ret
	if inPlace {
		c.setsInPlace = true
	}
	return func(_ *state, l []*ast.Term) (bool, uint32, error) {
		o, isObj := termValue(l[target]).(ast.Object)
		key, val := ok.get(l), ov.get(l)
		if !isObj || key == nil || val == nil {
			return false, 0, fmt.Errorf("object insert: not an object or an undefined key or value")
		}
		if inPlace {
			if _, isSet := val.Value.(ast.Set); isSet {
				if cur := o.Get(key); cur != nil && cur.Value == val.Value {
					return false, 0, nil
				}
			}
		}
		if once {
			if cur := o.Get(key); cur != nil && cur.Value.Compare(val.Value) != 0 {
				return false, 0, conflict(c.prog, loc, "object keys must be unique")
			}
		}
		o.Insert(key, val)
		return false, 0, nil
	}, nil
}

// objectMerge merges the base document A with the virtual document B (the
// planner's only use of it), recursively; where both hold a value that is
// not an object, the base document's wins, as topdown reads it.
func (c *compiler) objectMerge(x *ir.ObjectMergeStmt) (stmt, error) {
	a, b, target, loc := c.use(x.A), c.use(x.B), c.use(x.Target), x.Location
	return func(_ *state, l []*ast.Term) (bool, uint32, error) {
		va, vb := l[a], l[b]
		switch {
		case va == nil:
			l[target] = vb
			return false, 0, nil
		case vb == nil:
			l[target] = va
			return false, 0, nil
		}
		oa, okA := va.Value.(ast.Object)
		ob, okB := vb.Value.(ast.Object)
		if !okA || !okB {
			return false, 0, conflict(c.prog, loc, "object keys must be unique")
		}
		l[target] = ast.NewTerm(mergeBaseFirst(oa, ob))
		return false, 0, nil
	}, nil
}

// mergeBaseFirst merges objects recursively, base's value winning where
// the two hold different values that are not both objects.
func mergeBaseFirst(base, virtual ast.Object) ast.Object {
	m, _ := base.MergeWith(virtual, func(b, v *ast.Term) (*ast.Term, bool) {
		ob, okB := b.Value.(ast.Object)
		ov, okV := v.Value.(ast.Object)
		if okB && okV {
			return ast.NewTerm(mergeBaseFirst(ob, ov)), false
		}
		return b, false
	})
	return m
}

// rehashed is an object of sets grown in place built again, so its hash
// holds its members' final hashes; any other value is returned as it is.
func rehashed(v *ast.Term) *ast.Term {
	o, ok := v.Value.(ast.Object)
	if !ok {
		return v
	}
	fresh := ast.NewObject()
	o.Foreach(func(k, v *ast.Term) { fresh.Insert(k, v) })
	return ast.NewTerm(fresh)
}
