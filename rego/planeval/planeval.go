// Package planeval evaluates a Rego query in the form OPA's planner gives it
// (the IR of `opa build -t plan`): blocks of statements over numbered locals,
// each rule a function, with no unification search and no bindings at run
// time. It evaluates the same policies as topdown, faster; built-in
// functions are topdown's own, so their results are the same.
//
// Semantics follow OPA's IR documentation and its WebAssembly compiler: a
// statement that is undefined ends the block it is in; BreakStmt{Index: n}
// leaves n enclosing blocks more; a NotStmt succeeds when its block ends
// undefined; a ScanStmt runs its block once per element; functions with only
// the input and data parameters are memoized for one evaluation (and afresh
// inside a WithStmt).
package planeval

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/builtins"
)

// Program is one planned query, ready to evaluate. Safe for concurrent use.
type Program struct {
	plan     []block
	nlocals  int
	funcs    []*function
	memoized int
	strings  []*ast.Term
	files    []string // file names by index, for error locations
	data     *ast.Term
	pool     sync.Pool
	// contextBuiltins names the built-ins it calls that wait on their
	// context (EvalBounded's callers keep a context deadline for those).
	contextBuiltins []string
	capabilities    *ast.Capabilities
	// shared holds, for the data document last seen, the values of the
	// functions ShareAcrossEvaluations marked (shared.go).
	shared atomic.Pointer[sharedValues]
}

// builtinsThatWaitOnTheContext may do I/O bounded by the built-in
// context's deadline (a schema's remote reference) rather than by polling
// Cancelled.
var builtinsThatWaitOnTheContext = []string{ast.JSONSchemaVerify.Name, ast.JSONMatchSchema.Name}

// builtinsForTopdown need more of topdown's built-in context than a plan's
// evaluation gives (http.send its metrics and inter-query cache): a plan
// that calls one is left to topdown, as its network calls dwarf what
// planning saves.
var builtinsForTopdown = []string{ast.HTTPSend.Name, ast.NetLookupIPAddr.Name, ast.InternalPrint.Name, ast.Trace.Name}

// Unsupported is returned by New when a plan uses something this evaluator
// does not run; the caller evaluates the query with topdown instead.
type Unsupported struct{ Reason string }

func (u *Unsupported) Error() string { return "plan not supported: " + u.Reason }

// New prepares the plan named name of policy. data is the base data
// document (what `data` holds beside the rules); it is fixed for the
// program's life, as a loaded policy set's data is.
func New(policy *ir.Policy, name string, data ast.Value) (*Program, error) {
	return NewWithCapabilities(policy, name, data, nil)
}

// NewWithCapabilities is New for a policy set compiled against caps: the
// built-ins see them as under topdown, which takes them from the compiler
// (allow_net bounds the hosts a JSON schema's remote reference may be
// fetched from; nil permits any).
func NewWithCapabilities(policy *ir.Policy, name string, data ast.Value, caps *ast.Capabilities) (*Program, error) {
	if policy == nil || policy.Plans == nil || policy.Static == nil {
		return nil, &Unsupported{Reason: "empty policy"}
	}
	if data == nil {
		data = ast.NewObject()
	}
	p := &Program{data: ast.NewTerm(data), capabilities: caps}
	for _, s := range policy.Static.Strings {
		p.strings = append(p.strings, ast.StringTerm(s.Value))
	}
	for _, f := range policy.Static.Files {
		p.files = append(p.files, f.Value)
	}
	c := &compiler{prog: p, funcIndex: map[string]int{}}
	for _, b := range policy.Static.BuiltinFuncs {
		impl := topdown.GetBuiltin(b.Name)
		decl := ast.BuiltinMap[b.Name]
		if impl == nil || decl == nil {
			return nil, &Unsupported{Reason: fmt.Sprintf("built-in %s has no implementation", b.Name)}
		}
		if slices.Contains(builtinsForTopdown, b.Name) {
			// print and trace need the evaluator's hooks, the network
			// built-ins its metrics and caches: topdown runs them.
			return nil, &Unsupported{Reason: "built-in " + b.Name}
		}
		if slices.Contains(builtinsThatWaitOnTheContext, b.Name) {
			p.contextBuiltins = append(p.contextBuiltins, b.Name)
		}
		c.funcIndex[b.Name] = len(p.funcs)
		p.funcs = append(p.funcs, &function{name: b.Name, builtin: impl, relation: decl.Relation, memo: -1})
	}
	if policy.Funcs != nil {
		// Declare every function first: bodies call each other in any order.
		for _, f := range policy.Funcs.Funcs {
			c.funcIndex[f.Name] = len(p.funcs)
			fn := &function{name: f.Name, memo: -1}
			if len(f.Params) == 2 {
				fn.memo = p.memoized
				p.memoized++
			}
			p.funcs = append(p.funcs, fn)
		}
		for _, f := range policy.Funcs.Funcs {
			fn := p.funcs[c.funcIndex[f.Name]]
			c.startFunction(int(f.Return))
			c.ret = int(f.Return)
			for _, l := range f.Params {
				c.use(l)
				fn.params = append(fn.params, int(l))
			}
			blocks, err := c.blocks(f.Blocks)
			if err != nil {
				return nil, fmt.Errorf("function %s: %w", f.Name, err)
			}
			fn.blocks, fn.ret, fn.nlocals, fn.rehash = blocks, int(f.Return), c.maxLocal+1, c.setsInPlace
		}
	}
	for _, pl := range policy.Plans.Plans {
		if pl.Name != name {
			continue
		}
		c.startFunction(1)
		blocks, err := c.blocks(pl.Blocks)
		if err != nil {
			return nil, fmt.Errorf("plan %s: %w", pl.Name, err)
		}
		p.plan, p.nlocals = blocks, c.maxLocal+1
		p.pool.New = func() any {
			s := &state{prog: p}
			s.collect = s.collectResult
			return s
		}
		return p, nil
	}
	return nil, &Unsupported{Reason: fmt.Sprintf("no plan named %q", name)}
}

// Eval evaluates the plan with input and returns its result set: one value
// per ResultSetAddStmt reached (a query's bindings object).
func (p *Program) Eval(ctx context.Context, input ast.Value) ([]*ast.Term, error) {
	results, _, err := p.EvalSteps(ctx, input)
	return results, err
}

// EvalSteps is Eval that also counts the steps taken (function calls and
// loop iterations): a measure of a policy's work that does not depend on
// the machine's load, for tests that hold a rule's cost to its input size.
func (p *Program) EvalSteps(ctx context.Context, input ast.Value) ([]*ast.Term, int, error) {
	return p.EvalBounded(ctx, input, Bounds{})
}

// Bounds end one evaluation without a context of its own: a context with
// a deadline costs a timer, a channel and a registration with its parent
// at every evaluation, where these are read at the evaluation's steps and
// by the long built-ins that poll Cancelled, every boundsPollEvery polls.
type Bounds struct {
	// Started is when the evaluation began, Deadline when it must end
	// (zero: no deadline).
	Started, Deadline time.Time
	// Stop, when set, is asked at those polls whether the evaluation must
	// end for a reason of the caller's (the memory guard); a package
	// function, so that bounding an evaluation allocates nothing.
	Stop func(started, now time.Time) bool
}

// boundsPollEvery is how many polls pass between two readings of the
// clock: a step takes well under a microsecond, a clock reading tens of
// nanoseconds.
const boundsPollEvery = 16

// ContextBuiltins lists the built-ins the plan calls that may wait on
// their context rather than poll Cancelled (the JSON schema built-ins,
// fetching a remote reference): an evaluation of such a plan needs its
// deadline in the context, not only in Bounds.
func (p *Program) ContextBuiltins() []string { return p.contextBuiltins }

// EvalBounded is EvalSteps within b, on top of ctx's own end.
func (p *Program) EvalBounded(ctx context.Context, input ast.Value, b Bounds) ([]*ast.Term, int, error) {
	return p.EvalBoundedData(ctx, input, nil, b)
}

// EvalBoundedData is EvalBounded with data as the base data document of
// this evaluation instead of the program's (nil: the program's). It lets
// a caller give a document that changes between evaluations (the cluster
// inventory) without preparing the plan again; data must hold what the
// program's holds.
func (p *Program) EvalBoundedData(ctx context.Context, input ast.Value, data *ast.Term, b Bounds) ([]*ast.Term, int, error) {
	if data == nil {
		data = p.data
	}
	s := p.pool.Get().(*state)
	defer s.release()
	s.steps = 0
	s.ctx = ctx
	s.yield, _ = ctx.Value(yieldKey{}).(func())
	s.done = ctx.Done()
	s.bounds, s.bounded, s.polls, s.stoppedByBounds = b, !b.Deadline.IsZero() || b.Stop != nil, 0, false
	s.cancelled.Store(false)
	s.memoReset()
	s.now = nil
	locals := s.frame(p.nlocals)
	if input != nil { // nil: no input document (input is undefined)
		locals[0] = ast.NewTerm(input)
	}
	locals[1] = data
	for _, b := range p.plan {
		if _, _, err := b.run(s, locals); err != nil {
			if s.stoppedByBounds {
				// The built-in or step that saw it may say only that it
				// was cancelled: say why.
				err = fmt.Errorf("%w: %w", ErrStopped, err)
			}
			return nil, s.steps, err
		}
	}
	// The state (and its results slice) goes back to the pool on return.
	return slices.Clone(s.results), s.steps, nil
}

// A function is a planned rule or function, or a built-in.
type function struct {
	name    string
	params  []int
	ret     int
	nlocals int
	blocks  []block
	memo    int // slot of its memoized value, -1 when not memoized
	// shared says its value depends on the data document alone: it is
	// kept across evaluations with the same data (shared.go).
	shared bool
	// rehash says its value (an object of sets grown in place) is built
	// again on return, with its hash (stmt_collections.go).
	rehash   bool
	builtin  topdown.BuiltinFunc
	relation bool
}

// A block is a sequence of statements; a stmt answers whether execution
// stops (undefined or a break) and how many enclosing blocks it leaves.
type (
	block []stmt
	stmt  func(s *state, l []*ast.Term) (stop bool, index uint32, err error)
)

func (b block) run(s *state, l []*ast.Term) (bool, uint32, error) {
	for _, st := range b {
		stop, index, err := st(s, l)
		if err != nil {
			return false, 0, err
		}
		if stop {
			if index == 0 {
				return false, 0, nil
			}
			return true, index - 1, nil
		}
	}
	return false, 0, nil
}

// state is one evaluation's mutable part, pooled between evaluations.
type state struct {
	prog *Program
	ctx  context.Context
	// done is the context's Done, polled at every step and by long
	// built-ins (Cancelled): a poll costs less than registering a callback
	// on the context at each evaluation, and sees the deadline at once.
	// cancelled is set by Cancel.
	done      <-chan struct{}
	cancelled atomic.Bool
	// bounds, when bounded, are read every boundsPollEvery polls.
	bounds  Bounds
	bounded bool
	polls   uint32
	// stoppedByBounds says Bounds.Stop (not the deadline) ended it.
	stoppedByBounds bool

	stack   []*ast.Term
	memo    []*ast.Term // per memoized function: its value, or undefinedMemo
	results []*ast.Term
	now     *ast.Term
	steps   int
	// yield, when set (WithYield), is called at every step.
	yield func()
	// A built-in call's results (collectResult) and its cache, shared by
	// the evaluation's calls as topdown shares one.
	collect     func(*ast.Term) error
	out         *ast.Term
	relation    bool
	relationOut *ast.Array
	cache       builtins.Cache
}

// undefinedMemo marks a memoized function whose value is undefined.
var undefinedMemo = ast.NullTerm()

func (s *state) memoReset() {
	if cap(s.memo) < s.prog.memoized {
		s.memo = make([]*ast.Term, s.prog.memoized)
	}
	s.memo = s.memo[:s.prog.memoized]
	clear(s.memo)
}

// frame returns n cleared locals from the state's stack.
func (s *state) frame(n int) []*ast.Term {
	if len(s.stack)+n > cap(s.stack) {
		// A fresh array of the same length: frames handed out before keep
		// the old one (their slots here stay unused), and pop still
		// counts lengths.
		s.stack = make([]*ast.Term, len(s.stack), max(2*cap(s.stack), len(s.stack)+n, 64))
	}
	f := s.stack[len(s.stack) : len(s.stack)+n]
	s.stack = s.stack[:len(s.stack)+n]
	clear(f)
	return f
}

func (s *state) pop(n int) { s.stack = s.stack[:len(s.stack)-n] }

func (s *state) release() {
	s.done = nil
	s.bounds = Bounds{}
	clear(s.stack[:cap(s.stack)])
	s.stack = s.stack[:0]
	clear(s.results)
	s.results = s.results[:0]
	clear(s.memo)
	s.ctx = nil
	s.yield = nil
	s.now = nil
	clear(s.cache) // a built-in cache per evaluation, as topdown keeps one
	s.prog.pool.Put(s)
}

// errCancelled carries topdown's cancel code, so callers treat a deadline
// met inside the plan as they treat one met inside topdown.
var errCancelled = &topdown.Error{Code: topdown.CancelErr, Message: "caller cancelled query execution"}

// check is called on every function call and loop step: it ends the
// evaluation once its context is done, and gives way where the context
// says to (WithYield).
func (s *state) check() error {
	s.steps++
	if s.Cancelled() {
		return errCancelled
	}
	if s.yield != nil {
		s.yield()
		// A wait may outlast the deadline: stop at once, not a step later.
		if s.Cancelled() || s.bounded && s.outOfBounds() {
			return errCancelled
		}
	}
	return nil
}

type yieldKey struct{}

// WithYield returns a context under which a plan's evaluation calls yield
// at each of its steps (function calls and loop iterations). Work that must
// not delay more urgent work (the shadow policy set, judging beside served
// requests) passes a yield that waits while that work is in progress; a
// deadline still ends the evaluation at the step after it passes.
func WithYield(ctx context.Context, yield func()) context.Context {
	return context.WithValue(ctx, yieldKey{}, yield)
}

// Cancelled reports whether this evaluation's context has ended. The state
// is the topdown.Cancel of the built-ins it calls: long ones (numbers.range,
// concat, regex.replace, net.cidr_expand) poll it and stop at the deadline,
// as they do under topdown.
// Built-ins call it on the evaluating goroutine.
func (s *state) Cancelled() bool {
	if s.cancelled.Load() {
		return true
	}
	select {
	case <-s.done:
		return true
	default:
	}
	if s.bounded {
		s.polls++
		if s.polls%boundsPollEvery == 0 && s.outOfBounds() {
			return true
		}
	}
	return false
}

// outOfBounds reads the clock and says whether the evaluation's bounds
// have ended it; once they have, it stays cancelled.
func (s *state) outOfBounds() bool {
	now := time.Now()
	if !s.bounds.Deadline.IsZero() && !now.Before(s.bounds.Deadline) {
		s.cancelled.Store(true)
		return true
	}
	if s.bounds.Stop != nil && s.bounds.Stop(s.bounds.Started, now) {
		s.stoppedByBounds = true
		s.cancelled.Store(true)
		return true
	}
	return false
}

// ErrStopped wraps the error of an evaluation its Bounds.Stop ended. The
// error it wraps is a cancellation (topdown.IsCancel).
var ErrStopped = errors.New("stopped by its bounds")

// Cancel ends the current evaluation; part of topdown.Cancel, called only
// from the evaluating goroutine.
func (s *state) Cancel() { s.cancelled.Store(true) }

// call runs function fn with args (undefined args as nil) and returns its
// value, or nil when undefined.
func (s *state) call(fn *function, args []*ast.Term, loc *ast.Location) (*ast.Term, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if fn.builtin != nil {
		return s.callBuiltin(fn, args, loc)
	}
	if fn.memo >= 0 {
		v := s.memo[fn.memo]
		if v == nil && fn.shared {
			if v = s.prog.sharedValue(fn.memo, args[1]); v != nil {
				s.memo[fn.memo] = v
			}
		}
		if v != nil {
			if v == undefinedMemo {
				return nil, nil
			}
			return v, nil
		}
	}
	locals := s.frame(fn.nlocals)
	defer s.pop(fn.nlocals)
	for i, p := range fn.params {
		locals[p] = args[i]
	}
	for _, b := range fn.blocks {
		if _, _, err := b.run(s, locals); err != nil {
			return nil, err
		}
	}
	v := locals[fn.ret]
	if fn.rehash && v != nil {
		v = rehashed(v)
	}
	if fn.memo >= 0 {
		if v == nil {
			s.memo[fn.memo] = undefinedMemo
		} else {
			s.memo[fn.memo] = v
		}
		if fn.shared {
			s.prog.keepShared(fn.memo, args[1], s.memo[fn.memo])
		}
	}
	return v, nil
}

func (s *state) callBuiltin(fn *function, args []*ast.Term, loc *ast.Location) (*ast.Term, error) {
	for _, a := range args {
		if a == nil {
			return nil, nil
		}
	}
	if s.now == nil {
		s.now = ast.UIntNumberTerm(uint64(time.Now().UnixNano()))
	}
	if s.cache == nil {
		s.cache = builtins.Cache{}
	}
	bctx := topdown.BuiltinContext{
		Context:      s.ctx,
		Cancel:       s,
		Seed:         rand.Reader,
		Time:         s.now,
		Cache:        s.cache,
		Location:     loc,
		Capabilities: s.prog.capabilities,
	}
	s.out, s.relation = nil, fn.relation
	if fn.relation {
		s.relationOut = ast.NewArray()
	}
	err := fn.builtin(bctx, args, s.collect)
	if err != nil {
		// As topdown reports a built-in's error (strict built-in errors):
		// the evaluation's error, with the built-in's name and location.
		switch e := err.(type) {
		//lint:ignore SA1019 topdown still treats it as undefined; so do we
		case topdown.BuiltinEmpty:
			return nil, nil
		case *topdown.Error, topdown.Halt:
			return nil, err
		case builtins.ErrOperand:
			return nil, (&topdown.Error{Code: topdown.TypeErr, Message: fn.name + ": " + e.Error(), Location: bctx.Location}).Wrap(err)
		}
		return nil, (&topdown.Error{Code: topdown.BuiltinErr, Message: fn.name + ": " + err.Error(), Location: bctx.Location}).Wrap(err)
	}
	if fn.relation {
		out := ast.NewTerm(s.relationOut)
		s.relationOut = nil
		return out, nil
	}
	out := s.out
	s.out = nil
	return out, nil
}

// collectResult is the iterator every built-in call reports to: built-ins
// do not call back into the plan, so one slot per state is enough.
func (s *state) collectResult(t *ast.Term) error {
	if s.relation {
		s.relationOut = s.relationOut.Append(t)
		return nil
	}
	s.out = t
	return nil
}

// conflict is the error of a complete rule or function with two values, or
// an object with two values under one key.
func conflict(p *Program, loc ir.Location, what string) error {
	return &topdown.Error{Code: topdown.ConflictErr, Message: what, Location: p.location(loc)}
}

// compiler turns IR statements into closures once, at New.
type compiler struct {
	prog      *Program
	funcIndex map[string]int
	maxLocal  int
	// dataRefs marks the locals of the function being compiled that hold
	// a document reached from data by dots alone (data.a.b): a number key
	// read there is a base document path, as topdown reads the store.
	dataRefs map[int]bool
	// ret is the return local of the function being compiled (-1 in a
	// plan), and setsInPlace says an ObjectInsertStmt into it may leave
	// its hash to be rebuilt on return (stmt_collections.go).
	ret         int
	setsInPlace bool
}

// dataLocal is where the planner passes data to every plan and function
// (input is local 0).
const dataLocal = 1

// startFunction resets what the compiler knows of one function's locals.
func (c *compiler) startFunction(maxLocal int) {
	c.maxLocal = maxLocal
	c.dataRefs = map[int]bool{dataLocal: true}
	c.ret, c.setsInPlace = -1, false
}

func (c *compiler) use(l ir.Local) int {
	if int(l) > c.maxLocal {
		c.maxLocal = int(l)
	}
	return int(l)
}

// operand is a local (index >= 0) or a constant term.
type operand struct {
	local int
	value *ast.Term
}

func (o operand) get(l []*ast.Term) *ast.Term {
	if o.local >= 0 {
		return l[o.local]
	}
	return o.value
}

func (c *compiler) operand(op ir.Operand) (operand, error) {
	switch v := op.Value.(type) {
	case ir.Local:
		return operand{local: c.use(v)}, nil
	case ir.Bool:
		return operand{local: -1, value: ast.BooleanTerm(bool(v))}, nil
	case ir.StringIndex:
		if int(v) >= len(c.prog.strings) {
			return operand{}, fmt.Errorf("string index %d out of range", v)
		}
		return operand{local: -1, value: c.prog.strings[v]}, nil
	}
	return operand{}, &Unsupported{Reason: fmt.Sprintf("operand %T", op.Value)}
}

func (c *compiler) blocks(in []*ir.Block) ([]block, error) {
	out := make([]block, 0, len(in))
	for i, b := range in {
		cb, err := c.block(b)
		if err != nil {
			return nil, fmt.Errorf("block %d: %w", i, err)
		}
		out = append(out, cb)
	}
	return out, nil
}

func (c *compiler) block(b *ir.Block) (block, error) {
	out := make(block, 0, len(b.Stmts))
	for _, st := range b.Stmts {
		f, err := c.stmt(st)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// stmt compiles one IR statement into its closure, once, at New. Each
// kind of statement compiles in a method of its own: control flow in
// stmt_control.go, values in stmt_values.go, collections in
// stmt_collections.go, calls and with in stmt_calls.go.
func (c *compiler) stmt(st ir.Stmt) (stmt, error) {
	switch x := st.(type) {
	case *ir.NopStmt:
		return func(*state, []*ast.Term) (bool, uint32, error) { return false, 0, nil }, nil
	case *ir.ResultSetAddStmt:
		return c.resultSetAdd(x)
	case *ir.ReturnLocalStmt:
		return c.returnLocal(x)
	case *ir.BlockStmt:
		return c.blockStmt(x)
	case *ir.BreakStmt:
		return c.breakStmt(x)
	case *ir.NotStmt:
		return c.notStmt(x)
	case *ir.ScanStmt:
		return c.scan(x)
	case *ir.WithStmt:
		return c.with(x)
	case *ir.CallStmt:
		return c.callStmt(x)
	case *ir.CallDynamicStmt:
		return nil, &Unsupported{Reason: "dynamic call (a rule reference with a variable)"}
	case *ir.DotStmt:
		return c.dotStmt(x)
	case *ir.LenStmt:
		return c.length(x)
	case *ir.EqualStmt, *ir.NotEqualStmt:
		return c.equality(x)
	case *ir.IsArrayStmt:
		return c.typeCheck(x.Source, func(v ast.Value) bool { _, ok := v.(*ast.Array); return ok })
	case *ir.IsObjectStmt:
		return c.typeCheck(x.Source, func(v ast.Value) bool { _, ok := v.(ast.Object); return ok })
	case *ir.IsSetStmt:
		return c.typeCheck(x.Source, func(v ast.Value) bool { _, ok := v.(ast.Set); return ok })
	case *ir.IsDefinedStmt:
		return c.isDefined(x)
	case *ir.IsUndefinedStmt:
		return c.isUndefined(x)
	case *ir.AssignIntStmt:
		target, v := c.use(x.Target), ast.IntNumberTerm(int(x.Value))
		return c.set(target, v), nil
	case *ir.MakeNumberIntStmt:
		target, v := c.use(x.Target), ast.IntNumberTerm(int(x.Value))
		return c.set(target, v), nil
	case *ir.MakeNumberRefStmt:
		return c.makeNumberRef(x)
	case *ir.MakeNullStmt:
		return c.set(c.use(x.Target), ast.NullTerm()), nil
	case *ir.MakeArrayStmt:
		return c.makeArray(x)
	case *ir.MakeObjectStmt:
		return c.makeObject(x)
	case *ir.MakeSetStmt:
		return c.makeSet(x)
	case *ir.ResetLocalStmt:
		return c.resetLocal(x)
	case *ir.AssignVarStmt:
		return c.assignVar(x)
	case *ir.AssignVarOnceStmt:
		return c.assignVarOnce(x)
	case *ir.ArrayAppendStmt:
		return c.arrayAppend(x)
	case *ir.SetAddStmt:
		return c.setAdd(x)
	case *ir.ObjectInsertStmt, *ir.ObjectInsertOnceStmt:
		return c.objectInsert(x)
	case *ir.ObjectMergeStmt:
		return c.objectMerge(x)
	}
	return nil, &Unsupported{Reason: fmt.Sprintf("statement %T", st)}
}

// dot looks key up in src: an object's value, an array's element, a set's
// member; nil when undefined.
func dot(src, key *ast.Term) *ast.Term {
	if src == nil || key == nil {
		return nil
	}
	switch x := src.Value.(type) {
	case ast.Object:
		return x.Get(key)
	case *ast.Array:
		return x.Get(key)
	case ast.Set:
		if x.Contains(key) {
			return key
		}
	}
	return nil
}

func termValue(t *ast.Term) ast.Value {
	if t == nil {
		return nil
	}
	return t.Value
}

// Describe names the plan's functions and built-ins, for diagnostics.
func (p *Program) Describe() string {
	var b strings.Builder
	for _, f := range p.funcs {
		kind := "func"
		if f.builtin != nil {
			kind = "builtin"
		}
		fmt.Fprintf(&b, "%s %s\n", kind, f.name)
	}
	return b.String()
}

// location turns an IR location into the ast one topdown's errors carry.
func (p *Program) location(loc ir.Location) *ast.Location {
	l := &ast.Location{Row: loc.Row, Col: loc.Col}
	if loc.File >= 0 && loc.File < len(p.files) {
		l.File = p.files[loc.File]
	}
	return l
}
