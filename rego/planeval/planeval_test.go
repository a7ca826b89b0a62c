package planeval

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// The statements of the planner's IR, each through the smallest policy that
// makes the planner emit it, evaluated by planeval and by OPA's own
// evaluation: the answer is stated and both must give it. The parity tests
// of rego and policies (TestPlannedEvaluationMatchesReference,
// TestFastPathMatchesReferenceEvaluation, the fuzz targets) hold whole
// policy sets equal; these say which statement broke.

// captureTarget is the rego target whose plugin keeps the plan of a query
// (as rego.Compiled does) instead of evaluating it.
const captureTarget = "planeval-test-capture"

type planKey struct{}

type capture struct{}

func (capture) IsTarget(t string) bool { return t == captureTarget }

func (capture) PrepareForEval(ctx context.Context, policy *ir.Policy, _ ...rego.PrepareOption) (rego.TargetPluginEval, error) {
	*ctx.Value(planKey{}).(**ir.Policy) = policy
	return nil, nil
}

func init() { rego.RegisterPlugin(captureTarget, capture{}) }

// plan plans query over module with OPA's planner.
func plan(t *testing.T, module, query string) *ir.Policy {
	t.Helper()
	var policy *ir.Policy
	ctx := context.WithValue(context.Background(), planKey{}, &policy)
	_, err := rego.New(rego.Query(query), rego.Module("p.rego", module), rego.Target(captureTarget), rego.StrictBuiltinErrors(true)).PrepareForEval(ctx)
	if err != nil {
		t.Fatalf("plan %s: %v", query, err)
	}
	return policy
}

// reference is OPA's own evaluation of query: the value of x, or nil when
// undefined.
func reference(t *testing.T, module, query string, input any) (*ast.Term, error) {
	t.Helper()
	rs, err := rego.New(rego.Query(query), rego.Module("p.rego", module), rego.Input(input), rego.StrictBuiltinErrors(true)).Eval(context.Background())
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	v, err := ast.InterfaceToValue(rs[0].Bindings["x"])
	if err != nil {
		t.Fatal(err)
	}
	return ast.NewTerm(v), nil
}

// planned is planeval's evaluation of the same query: the value of x.
func planned(t *testing.T, module, query string, input any) (*ast.Term, error) {
	t.Helper()
	prog, err := New(plan(t, module, query), "eval", ast.NewObject())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	in, err := ast.InterfaceToValue(input)
	if err != nil {
		t.Fatal(err)
	}
	results, err := prog.Eval(context.Background(), in)
	if err != nil || len(results) == 0 {
		return nil, err
	}
	obj, ok := results[0].Value.(ast.Object)
	if !ok {
		t.Fatalf("result %v is not an object of bindings", results[0])
	}
	return obj.Get(ast.StringTerm("x")), nil
}

func TestStatements(t *testing.T) {
	input := map[string]any{
		"list": []any{1, 2, 3}, "obj": map[string]any{"a": 1, "b": 2}, "name": "edge-1",
		"labels": map[string]any{"team": "a"},
	}
	cases := map[string]struct {
		module string
		want   string // the value of x; "" for undefined
	}{
		"a dot into the input and an equality (DotStmt, EqualStmt)": {
			"package p\nr if input.labels.team == \"a\"\n", "true"},
		"a dot that finds nothing leaves the rule undefined": {
			"package p\nr if input.labels.owner == \"a\"\n", ""},
		"an inequality (NotEqualStmt)": {
			"package p\nr if input.labels.team != \"b\"\n", "true"},
		"not over an undefined body holds (NotStmt)": {
			"package p\nr if not input.labels.owner\n", "true"},
		"not over a defined body fails": {
			"package p\nr if not input.labels.team\n", ""},
		"a scan of an array (ScanStmt, SetAddStmt)": {
			"package p\nr contains v * 10 if some v in input.list\n", "{10, 20, 30}"},
		"a scan of an object's keys and values": {
			"package p\nr contains k if { some k, v in input.obj; v > 1 }\n", `{"b"}`},
		"a partial object (ObjectInsertOnceStmt)": {
			"package p\nr[k] := v + 1 if some k, v in input.obj\n", `{"a": 2, "b": 3}`},
		"an array comprehension (ArrayAppendStmt, MakeArrayStmt)": {
			"package p\nr := [v | some v in input.list; v > 1]\n", "[2, 3]"},
		"an object comprehension (ObjectInsertStmt)": {
			"package p\nr := {k: true | some k, _ in input.obj}\n", `{"a": true, "b": true}`},
		"count of a string (LenStmt or the built-in)": {
			"package p\nr := count(input.name)\n", "6"},
		"a number written with a fraction (MakeNumberRefStmt)": {
			"package p\nr := 1.5\n", "1.5"},
		"null (MakeNullStmt)": {
			"package p\nr := null\n", "null"},
		"a type check (IsObjectStmt) through is_object": {
			"package p\nr if is_object(input.obj)\n", "true"},
		"a function call with memoized rules (CallStmt)": {
			"package p\nf(x) := x * 2\nr := f(input.list[2])\n", "6"},
		"a with modifier replacing part of the input (WithStmt)": {
			"package p\nteam := input.labels.team\nr := t if { t := team with input.labels.team as \"b\" }\n", `"b"`},
		"a default over an undefined body (IsUndefinedStmt, AssignVarOnceStmt)": {
			"package p\ndefault r := \"none\"\nr := input.labels.owner\n", `"none"`},
		"partial objects of one rule merged (ObjectMergeStmt)": {
			"package p\nr.a := 1\nr.b := 2\n", `{"a": 1, "b": 2}`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var want *ast.Term
			if c.want != "" {
				want = ast.MustParseTerm(c.want)
			}
			ref, err := reference(t, c.module, "x := data.p.r", input)
			if err != nil {
				t.Fatalf("reference: %v", err)
			}
			if !equal(ref, want) {
				t.Fatalf("OPA's evaluation gives %v, the case says %v: fix the case", ref, want)
			}
			got, err := planned(t, c.module, "x := data.p.r", input)
			if err != nil {
				t.Fatalf("planned: %v", err)
			}
			if !equal(got, want) {
				t.Errorf("planned %v, want %v", got, want)
			}
		})
	}
}

// equal compares two answers in their JSON form, the form a query's
// bindings take (a set reads as an array).
func equal(a, b *ast.Term) bool {
	if a == nil || b == nil {
		return a == b
	}
	return jsonForm(a).Compare(jsonForm(b)) == 0
}

func jsonForm(t *ast.Term) ast.Value {
	j, err := ast.JSON(t.Value)
	if err != nil {
		return t.Value
	}
	v, err := ast.InterfaceToValue(j)
	if err != nil {
		return t.Value
	}
	return v
}

// Two values for one key, or for a complete rule, are conflict errors at
// the rule, with topdown's code (the webhook answers both alike), where
// OPA's evaluation refuses them too.
func TestConflictsAreTopdownConflictErrors(t *testing.T) {
	cases := map[string]struct{ module, message string }{
		"a complete rule with two values": {
			"package p\nr := 1 if input.a\nr := 2 if input.b\n", "complete rules must not produce multiple outputs"},
		"a partial object with two values for one key": {
			"package p\nr[k] := 1 if { k := \"k\"; input.a }\nr[k] := 2 if { k := \"k\"; input.b }\n", "object keys must be unique"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			input := map[string]any{"a": true, "b": true}
			_, refErr := reference(t, c.module, "x := data.p.r", input)
			var ref *topdown.Error
			if !errors.As(refErr, &ref) || ref.Code != topdown.ConflictErr {
				t.Fatalf("OPA's evaluation gives %v, not a conflict: fix the case", refErr)
			}
			_, err := planned(t, c.module, "x := data.p.r", input)
			var got *topdown.Error
			if !errors.As(err, &got) || got.Code != topdown.ConflictErr || got.Message != c.message || got.Location == nil || got.Location.Row == 0 {
				t.Errorf("planned error %v, want a conflict error %q at the rule", err, c.message)
			}
		})
	}
}

// A plan the evaluator cannot run is refused at New, saying why, so the
// query stays on topdown.
func TestUnsupportedPlansAreRefusedAtNew(t *testing.T) {
	module := "package p\nlib.a.msg := \"from a\"\nr contains m if { some k in input.libs; m := data.p.lib[k].msg }\n"
	_, err := New(plan(t, module, "x := data.p.r"), "eval", ast.NewObject())
	var u *Unsupported
	if !errors.As(err, &u) {
		t.Fatalf("New: %v, want Unsupported", err)
	}
}

// EvalSteps counts the statements of a scan's body once per element, so
// the cost of a policy over a large input is visible.
func TestEvalStepsGrowWithTheInput(t *testing.T) {
	module := "package p\nr contains v if some v in input.list\n"
	prog := programOf(t, module)
	steps := func(n int) int {
		_, s, err := prog.EvalSteps(context.Background(), listInput(t, n))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if small, large := steps(10), steps(1000); large <= small*10 {
		t.Errorf("steps over 10 elements %d, over 1,000 %d: want the count to grow with the elements", small, large)
	}
}

// Base documents (data beside the rules) read as topdown reads the store:
// a number in a path rooted at data is the key of its string form, and a
// value first bound to a variable is a plain value. OPA's conformance suite
// has these cases, and one where a rule and the base document give a key
// two values (the base document's is read; rego's own activation refuses
// that set, so only the suite's harness builds it): rego's
// TestPlannedEvaluationConformsToTopdown runs the whole suite.
func TestBaseDocumentsReadAsTopdownReadsThem(t *testing.T) {
	data := map[string]any{"nested": map[string]any{"2": "bar"}, "conf": map[string]any{"k": "foo"}}
	cases := map[string]struct {
		module, query, want string
	}{
		"a number key in a path from data (DotStmt)": {
			"package p\nr := data.nested[2]\n", "x := data.p.r", `"bar"`},
		"a number key into a variable bound to data": {
			"package p\nr := obj[2] if { obj := data.nested }\n", "x := data.p.r", ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var want *ast.Term
			if c.want != "" {
				want = ast.MustParseTerm(c.want)
			}
			rs, err := rego.New(rego.Query(c.query), rego.Module("p.rego", c.module), rego.Store(inmem.NewFromObject(data)), rego.StrictBuiltinErrors(true)).Eval(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var ref *ast.Term
			if len(rs) > 0 {
				ref = ast.NewTerm(ast.MustInterfaceToValue(rs[0].Bindings["x"]))
			}
			if !equal(ref, want) {
				t.Fatalf("OPA's evaluation gives %v, the case says %v: fix the case", ref, want)
			}
			var policy *ir.Policy
			ctx := context.WithValue(context.Background(), planKey{}, &policy)
			if _, err := rego.New(rego.Query(c.query), rego.Module("p.rego", c.module), rego.Store(inmem.NewFromObject(data)),
				rego.Target(captureTarget), rego.StrictBuiltinErrors(true)).PrepareForEval(ctx); err != nil {
				t.Fatal(err)
			}
			prog, err := New(policy, "eval", ast.MustInterfaceToValue(data))
			if err != nil {
				t.Fatal(err)
			}
			results, err := prog.Eval(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var got *ast.Term
			if len(results) > 0 {
				got = results[0].Value.(ast.Object).Get(ast.StringTerm("x"))
			}
			if !equal(got, want) {
				t.Errorf("planned %v, want %v", got, want)
			}
		})
	}
}

// Under WithYield the evaluation gives way at every step, and a deadline
// that passes while it waits still ends it.
func TestEvaluationYieldsAtEveryStep(t *testing.T) {
	module := "package p\nr contains v if some v in input.list\n"
	prog := programOf(t, module)
	in := listInput(t, 500)
	yields := 0
	_, steps, err := prog.EvalSteps(WithYield(context.Background(), func() { yields++ }), in)
	if err != nil {
		t.Fatal(err)
	}
	if yields != steps || steps < 500 {
		t.Errorf("the evaluation yielded %d times in %d steps over 500 elements: want once per step", yields, steps)
	}
	// The pooled state forgets the yield: a later evaluation without one
	// calls nothing.
	before := yields
	if _, _, err := prog.EvalSteps(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	if yields != before {
		t.Errorf("an evaluation without WithYield called the last evaluation's yield %d times", yields-before)
	}
	ctx, cancel := context.WithCancel(context.Background())
	waited := 0
	_, _, err = prog.EvalSteps(WithYield(ctx, func() {
		if waited++; waited == 3 {
			cancel() // the deadline passes while the evaluation gives way
		}
	}), in)
	var te *topdown.Error
	if !errors.As(err, &te) || te.Code != topdown.CancelErr {
		t.Fatalf("an evaluation whose context ended while it gave way: error %v, want topdown's cancel error", err)
	}
	if waited != 3 {
		t.Errorf("the evaluation gave way %d times, want it to stop at the step after its context ended (3)", waited)
	}
}

// Bounds end an evaluation without a context of their own: a deadline
// that passes mid-loop ends it with topdown's cancel error, a Stop that
// answers yes ends it with ErrStopped wrapping that error, and neither is
// left on the pooled state for the next evaluation.
func TestBoundsEndAnEvaluation(t *testing.T) {
	module := "package p\nr contains v if { some v in input.list; v >= 0 }\n"
	prog := programOf(t, module)
	in := listInput(t, 20000)
	_, whole, err := prog.EvalBounded(context.Background(), in, Bounds{Started: time.Now(), Deadline: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatalf("within a far deadline: %v", err)
	}

	_, steps, err := prog.EvalBounded(context.Background(), in, Bounds{Started: time.Now(), Deadline: time.Now().Add(-time.Millisecond)})
	if !topdown.IsCancel(err) || errors.Is(err, ErrStopped) {
		t.Fatalf("past its deadline: error %v, want topdown's cancel error and not ErrStopped", err)
	}
	if steps > boundsPollEvery {
		t.Errorf("past its deadline it ran %d steps, want at most %d (one clock reading)", steps, boundsPollEvery)
	}

	asked := 0
	stopAt := whole / 2
	stop := func(started, now time.Time) bool {
		asked++
		if started.IsZero() || now.Before(started) {
			t.Errorf("Stop asked with started %v, now %v", started, now)
		}
		return asked*boundsPollEvery >= stopAt
	}
	_, steps, err = prog.EvalBounded(context.Background(), in, Bounds{Started: time.Now(), Stop: stop})
	if !errors.Is(err, ErrStopped) || !topdown.IsCancel(err) {
		t.Fatalf("stopped by its bounds: error %v, want ErrStopped wrapping topdown's cancel error", err)
	}
	if steps < stopAt-boundsPollEvery || steps > stopAt+boundsPollEvery {
		t.Errorf("Stop said yes after %d polls, the evaluation ended after %d steps, want about %d of %d", asked, steps, stopAt, whole)
	}

	// The pooled state forgets both: the next evaluation runs to its end.
	if _, again, err := prog.EvalSteps(context.Background(), in); err != nil || again != whole {
		t.Fatalf("after bounded evaluations, an unbounded one: %d steps, %v; want %d, no error", again, err, whole)
	}
}

// A plan that calls a built-in waiting on its context says so, so that
// its callers keep their deadline in the context.
func TestContextBuiltinsAreListed(t *testing.T) {
	cases := map[string]struct {
		module string
		want   []string
	}{
		"none":     {"package p\nr := count(input.list)\n", nil},
		"a schema": {"package p\nr := json.match_schema(input.doc, {\"type\": \"object\"})\n", []string{"json.match_schema"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			prog, err := New(plan(t, tc.module, "x := data.p.r"), "eval", ast.NewObject())
			if err != nil {
				t.Fatal(err)
			}
			if got := prog.ContextBuiltins(); !slices.Equal(got, tc.want) {
				t.Errorf("ContextBuiltins() = %v, want %v", got, tc.want)
			}
		})
	}
}

// listInput is the input {"list": [0, 1, ..., n-1]}.
// programOf is module's data.p.r, planned and ready to evaluate.
func programOf(t *testing.T, module string) *Program {
	t.Helper()
	prog, err := New(plan(t, module, "x := data.p.r"), "eval", ast.NewObject())
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

func listInput(t *testing.T, n int) ast.Value {
	t.Helper()
	list := make([]any, n)
	for i := range list {
		list[i] = i
	}
	in, err := ast.InterfaceToValue(map[string]any{"list": list})
	if err != nil {
		t.Fatal(err)
	}
	return in
}
