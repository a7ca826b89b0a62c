package rego

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	oparego "github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/quantumnode/qn-admission/rego/planeval"
)

// Result is what one evaluation of a role's policies produced.
type Result struct {
	// Deny holds the messages of every deny rule that fired, sorted.
	Deny []string
	// Warn holds the messages of every warn rule that fired, sorted.
	Warn []string
	// Patch holds JSONPatch operations (RFC 6902) proposed by patch rules.
	Patch []PatchOp
	// DenyBy and WarnBy say which package produced each deny and warn
	// entry, in package order; set only when such a rule fired, so an
	// admitted request without warnings pays nothing for them.
	DenyBy []Entry
	WarnBy []Entry
}

// Entry is one deny or warn message with the package (or, added by the
// engine, the pattern policy) that produced it.
type Entry struct {
	Source  string
	Message string
	// Pattern says Source names a pattern policy, not a Rego package.
	Pattern bool
}

// PatchOp is one JSONPatch operation a policy proposes.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
	From  string `json:"from,omitempty"`
}

// Query is the prepared query of one set of packages: it evaluates their
// deny, warn and patch rules in a single pass. Safe for concurrent use.
type Query struct {
	packages []string
	prepared func() (oparego.PreparedEvalQuery, error)
	timeout  time.Duration
	outputs  []output
	// compiled is the same query compiled once for topdown, which Eval runs
	// directly when the query is not planned, and which traced and timed
	// evaluations use: no per-evaluation metrics, result set or cancel
	// goroutine.
	compiled *compiledQuery
	// program plans the query to OPA's IR on first use and prepares it for
	// planeval, which Eval runs when planning succeeded (plan.go). Lazy:
	// the planner walks every module of the set, so planning all of a
	// large set's roles at load would cost seconds for roles that may
	// never be asked.
	program func() (*planeval.Program, error)
	// outputKeys are the outputs' variable names as keys of a planned result.
	outputKeys []*ast.Term
	// set is the compiled set the query belongs to; inventory says the
	// query may read data.inventory (inventory.go).
	set       *Compiled
	inventory bool
}

// compiledQuery is a query compiled against the policy set, with what a
// direct topdown evaluation needs.
type compiledQuery struct {
	body     ast.Body
	compiler *ast.Compiler
	queryC   ast.QueryCompiler
	store    storage.Store
	// vars maps each output variable to its name after query rewriting.
	vars map[string]ast.Var
}

// ErrEvalTimeout is returned when an evaluation exceeds its deadline.
var ErrEvalTimeout = errors.New("policy evaluation exceeded its deadline")

// Rule sets a query can evaluate.
var (
	// ValidationRules are what a validating decision needs.
	ValidationRules = []string{"deny", "warn"}
	// MutationRules are what a mutating decision needs.
	MutationRules = []string{"patch"}
	// AllRules evaluates everything a package contributes.
	AllRules = []string{"deny", "warn", "patch"}
)

// Prepare builds the query that evaluates the given rules (deny, warn,
// patch) of packages. Every package must exist in the set. timeout bounds
// each evaluation (0 means only the caller's context bounds it).
func (c *Compiled) Prepare(ctx context.Context, packages []string, rules []string, timeout time.Duration) (*Query, error) {
	if err := c.declared(packages); err != nil {
		return nil, err
	}
	query, outputs := c.bindingQuery(packages, rules, nil)
	return c.prepareBindings(packages, query, outputs, timeout)
}

// declared checks that every package exists in the set.
func (c *Compiled) declared(packages []string) error {
	for _, p := range packages {
		if !c.HasPackage(p) {
			return fmt.Errorf("package %q is not declared by any policy module (known: %s)", p, strings.Join(c.Packages(), ", "))
		}
	}
	return nil
}

// prepareBindings prepares a binding query (bindingQuery) of packages.
func (c *Compiled) prepareBindings(packages []string, query string, outputs []output, timeout time.Duration) (*Query, error) {
	cq, err := c.compileQuery(query, outputs)
	if err != nil {
		return nil, fmt.Errorf("prepare query for packages %v: %w", packages, err)
	}
	// rego's prepared query serves only traced and reference evaluations;
	// it is built on first use, so a set of many roles keeps one compiled
	// form per query, not two.
	prepared := sync.OnceValues(func() (oparego.PreparedEvalQuery, error) {
		c.evalModeMu.Lock()
		defer c.evalModeMu.Unlock()
		return oparego.New(
			oparego.Query(query),
			oparego.Compiler(c.compiler),
			oparego.Store(c.store),
			oparego.StrictBuiltinErrors(true),
		).PrepareForEval(context.Background())
	})
	q := &Query{packages: packages, prepared: prepared, timeout: timeout, outputs: outputs, compiled: cq, set: c}
	roots := make([]ast.Ref, 0, len(outputs))
	for _, out := range outputs {
		roots = append(roots, ast.MustParseRef("data."+out.pkg+"."+out.rule))
	}
	q.inventory = c.reachesInventory(roots)
	for _, out := range outputs {
		q.outputKeys = append(q.outputKeys, ast.StringTerm(out.variable))
	}
	q.program = sync.OnceValues(func() (*planeval.Program, error) { return c.planProgram(query) })
	return q, nil
}

// compileQuery compiles the binding query the way rego.PrepareForEval does
// and records the rewritten name of each output variable.
func (c *Compiled) compileQuery(query string, outputs []output) (*compiledQuery, error) {
	parsed, err := ast.ParseBodyWithOpts(query, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		return nil, err
	}
	c.evalModeMu.Lock() // the query compiler's stages follow the evaluation mode
	qc := c.compiler.QueryCompiler()
	body, err := qc.Compile(parsed)
	c.evalModeMu.Unlock()
	if err != nil {
		return nil, err
	}
	vars := make(map[string]ast.Var, len(outputs))
	for _, out := range outputs {
		vars[out.variable] = ast.Var(out.variable)
	}
	for rewritten, original := range qc.RewrittenVars() {
		if _, ok := vars[string(original)]; ok {
			vars[string(original)] = rewritten
		}
	}
	return &compiledQuery{body: body, compiler: c.compiler, queryC: qc, store: c.store, vars: vars}, nil
}

// output is one binding of the prepared query: which rule of which package.
type output struct {
	variable string
	rule     string
	// pkg is the package whose rule the output binds.
	pkg string
}

// bindingQuery binds every deny, warn and patch rule the packages define
// to a variable of its own ("d0 := data.qn.quantumnode.deny; ..."); Eval
// merges them. Referencing the rules directly, and only those that exist,
// is about twice as fast as unioning set comprehensions in Rego. keep,
// when set, binds only the rules it keeps; the variables are named the
// same either way, by the package's place in packages.
func (c *Compiled) bindingQuery(packages, rules []string, keep func(pkg, rule string) bool) (string, []output) {
	var parts []string
	var outputs []output
	for i, p := range packages {
		for _, rule := range rules {
			if !c.definesRule(p, rule) || keep != nil && !keep(p, rule) {
				continue
			}
			v := fmt.Sprintf("%c%d", rule[0], i)
			parts = append(parts, fmt.Sprintf("%s := data.%s.%s", v, p, rule))
			outputs = append(outputs, output{variable: v, rule: rule, pkg: p})
		}
	}
	if len(parts) == 0 {
		return "true", nil
	}
	return strings.Join(parts, "; "), outputs
}

// definesRule reports whether package pkg has a rule named name.
func (c *Compiled) definesRule(pkg, name string) bool {
	for _, mod := range c.modules {
		if PackageName(mod) != pkg {
			continue
		}
		for _, r := range mod.Rules {
			if ref := r.Head.Ref(); len(ref) > 0 && ref[0].Value.Compare(ast.Var(name)) == 0 {
				return true
			}
		}
	}
	return false
}

// Packages lists the packages this query evaluates.
func (q *Query) Packages() []string { return q.packages }

// Eval evaluates the query against input (the parsed {"request", "context"}
// document). An error means the decision is unknown: the caller applies its
// on-error policy.
func (q *Query) Eval(ctx context.Context, input ast.Value, opts ...oparego.EvalOption) (Result, error) {
	if len(opts) == 0 {
		bindings, err := q.evalBindings(ctx, input)
		if err != nil {
			return Result{}, err
		}
		return q.result(bindings)
	}
	ctx, bounds := q.guarded(ctx)
	defer bounds.done()
	bindings, err := q.evalPrepared(ctx, input, opts)
	if err != nil {
		return Result{}, q.failure(ctx, err, bounds)
	}
	return q.result(bindings)
}

// result merges the bindings of one evaluation into a Result.
func (q *Query) result(bindings map[string]any) (Result, error) {
	return resultOf(q.outputs, bindings)
}

// resultOf merges bindings of outputs, in their order, into a Result.
func resultOf(outputs []output, bindings map[string]any) (Result, error) {
	var res Result
	var err error
	for _, out := range outputs {
		v := bindings[out.variable]
		switch out.rule {
		case "deny":
			n := len(res.Deny)
			if res.Deny, err = appendMessages(res.Deny, v, "deny"); err != nil {
				return Result{}, err
			}
			res.DenyBy = attribute(res.DenyBy, out.pkg, res.Deny[n:])
		case "warn":
			n := len(res.Warn)
			if res.Warn, err = appendMessages(res.Warn, v, "warn"); err != nil {
				return Result{}, err
			}
			res.WarnBy = attribute(res.WarnBy, out.pkg, res.Warn[n:])
		case "patch":
			ops, err := patchOps(v)
			if err != nil {
				return Result{}, err
			}
			res.Patch = append(res.Patch, ops...)
		}
	}
	res.Deny, res.Warn = sortedUnique(res.Deny), sortedUnique(res.Warn)
	return res, nil
}

// EvalReference evaluates the same query the plain way: OPA's prepared
// query with input as a Go value (what json.Unmarshal gives), converted by
// OPA itself. Tests hold Eval's answers equal to it.
func (q *Query) EvalReference(ctx context.Context, input any) (Result, error) {
	pq, err := q.prepared()
	if err != nil {
		return Result{}, fmt.Errorf("prepare query for packages %v: %w", q.packages, err)
	}
	rs, err := pq.Eval(ctx, oparego.EvalInput(input))
	if err != nil {
		return Result{}, fmt.Errorf("evaluate packages %v: %w", q.packages, err)
	}
	if len(rs) != 1 {
		return Result{}, fmt.Errorf("evaluate packages %v: expected one result, got %d", q.packages, len(rs))
	}
	return q.result(rs[0].Bindings)
}

// evalPrepared evaluates through rego's prepared query, which takes
// evaluation options (a tracer for explanations).
func (q *Query) evalPrepared(ctx context.Context, input ast.Value, opts []oparego.EvalOption) (map[string]any, error) {
	opts = append(opts, oparego.EvalParsedInput(input))
	pq, err := q.prepared()
	if err != nil {
		return nil, err
	}
	rs, err := pq.Eval(ctx, opts...)
	if err != nil {
		return nil, err
	}
	if len(rs) != 1 {
		return nil, fmt.Errorf("expected one result, got %d", len(rs))
	}
	return rs[0].Bindings, nil
}

// evalDirect evaluates the compiled query with topdown, as rego's prepared
// query does with the same options (strict built-in errors, indexing,
// early exit), without its per-evaluation bookkeeping. Cancellation rides
// on context.AfterFunc instead of a goroutine per evaluation.
func (q *Query) evalDirect(ctx context.Context, input ast.Value, tracer topdown.QueryTracer) (map[string]any, error) {
	cq := q.compiled
	txn, err := cq.store.NewTransaction(ctx)
	if err != nil {
		return nil, err
	}
	defer cq.store.Abort(ctx, txn)
	cancel := topdown.NewCancel()
	stop := context.AfterFunc(ctx, cancel.Cancel)
	defer stop()
	tq := topdown.NewQuery(cq.body).
		WithQueryCompiler(cq.queryC).
		WithCompiler(cq.compiler).
		WithStore(cq.store).
		WithTransaction(txn).
		WithIndexing(true).
		WithEarlyExit(true).
		WithStrictBuiltinErrors(true).
		WithCancel(cancel).
		WithInput(ast.NewTerm(input))
	if tracer != nil {
		tq = tq.WithQueryTracer(tracer)
	}
	var bindings map[string]any
	results := 0
	err = tq.Iter(ctx, func(qr topdown.QueryResult) error {
		results++
		bindings = make(map[string]any, len(q.outputs))
		for _, out := range q.outputs {
			term, ok := qr[cq.vars[out.variable]]
			if !ok {
				continue
			}
			v, err := ast.JSON(term.Value)
			if err != nil {
				return err
			}
			bindings[out.variable] = v
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if results != 1 {
		return nil, fmt.Errorf("expected one result, got %d", results)
	}
	return bindings, nil
}

// attribute records that source produced msgs, sorted and once each, so
// the planned and the reference evaluation attribute alike.
func attribute(by []Entry, source string, msgs []string) []Entry {
	n := len(by)
	for _, m := range msgs {
		by = append(by, Entry{Source: source, Message: m})
	}
	added := by[n:]
	slices.SortFunc(added, func(a, b Entry) int { return strings.Compare(a.Message, b.Message) })
	return append(by[:n], slices.Compact(added)...)
}

// sortedUnique makes the union of several packages' sets a set again, in
// a stable order for messages and tests.
func sortedUnique(list []string) []string {
	if len(list) < 2 {
		return list
	}
	sort.Strings(list)
	return slices.Compact(list)
}

// appendMessages accepts a rule's entries as strings or as objects with a
// "msg" field (the Gatekeeper convention), so policies from either style work.
func appendMessages(out []string, v any, rule string) ([]string, error) {
	items, _ := v.([]any)
	for _, it := range items {
		switch m := it.(type) {
		case string:
			out = append(out, m)
		case map[string]any:
			s, ok := m["msg"].(string)
			if !ok {
				return nil, fmt.Errorf("a %s entry is an object without a string \"msg\" field: %v", rule, m)
			}
			out = append(out, s)
		default:
			return nil, fmt.Errorf("a %s entry must be a string or an object with \"msg\", got %T: %v", rule, it, it)
		}
	}
	return out, nil
}

func patchOps(v any) ([]PatchOp, error) {
	items, _ := v.([]any)
	out := make([]PatchOp, 0, len(items))
	for _, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("a patch entry must be a JSONPatch operation object, got %T: %v", it, it)
		}
		op := PatchOp{Value: m["value"]}
		op.Op, _ = m["op"].(string)
		op.Path, _ = m["path"].(string)
		op.From, _ = m["from"].(string)
		switch op.Op {
		case "add", "replace", "test":
			if _, has := m["value"]; !has {
				return nil, fmt.Errorf("patch operation %q on %q has no value", op.Op, op.Path)
			}
		case "remove":
		case "move", "copy":
			if op.From == "" {
				return nil, fmt.Errorf("patch operation %q on %q has no from", op.Op, op.Path)
			}
		default:
			return nil, fmt.Errorf("patch entry has unknown op %q (want add, remove, replace, move, copy or test): %v", op.Op, m)
		}
		if !strings.HasPrefix(op.Path, "/") {
			return nil, fmt.Errorf("patch operation %q has path %q; a JSON pointer starts with /", op.Op, op.Path)
		}
		out = append(out, op)
	}
	return out, nil
}
