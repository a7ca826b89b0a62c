package planeval

import (
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Values kept across evaluations. A rule that reads only the data
// document (no input, no non-deterministic built-in) has one value per
// data document; when the data changes between evaluations (the cluster
// inventory, EvalBoundedData), such a rule (an index of the inventory,
// say, every claimed Node with its claimants) is evaluated once per
// document instead of once per request. Which rules qualify is the
// caller's to say (ShareAcrossEvaluations): it knows what each reads.

// sharedValues are the shared functions' values for one data document.
type sharedValues struct {
	data   *ast.Term
	values []atomic.Pointer[ast.Term]
}

// ShareAcrossEvaluations marks the memoized functions (rules of input
// and data alone) whose names shared accepts as depending on the data
// document only: their value is kept for later evaluations with the same
// data term. Call it before the first evaluation.
func (p *Program) ShareAcrossEvaluations(shared func(name string) bool) {
	for _, fn := range p.funcs {
		if fn.memo >= 0 && fn.builtin == nil && shared(fn.name) {
			fn.shared = true
		}
	}
}

// sharedValue is the kept value of memo slot for data, or nil.
func (p *Program) sharedValue(slot int, data *ast.Term) *ast.Term {
	if sv := p.shared.Load(); sv != nil && sv.data == data {
		return sv.values[slot].Load()
	}
	return nil
}

// keepShared keeps v (undefinedMemo for undefined) as slot's value for
// data; values of an older document are dropped.
func (p *Program) keepShared(slot int, data, v *ast.Term) {
	sv := p.shared.Load()
	if sv == nil || sv.data != data {
		fresh := &sharedValues{data: data, values: make([]atomic.Pointer[ast.Term], p.memoized)}
		if !p.shared.CompareAndSwap(sv, fresh) {
			if sv = p.shared.Load(); sv == nil || sv.data != data {
				return // another document won meanwhile
			}
		} else {
			sv = fresh
		}
	}
	sv.values[slot].Store(v)
}
