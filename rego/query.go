package rego

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	oparego "github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// Result is what one evaluation of a role's policies produced.
type Result struct {
	// Deny holds the messages of every deny rule that fired, sorted.
	Deny []string
	// Warn holds the messages of every warn rule that fired, sorted.
	Warn []string
	// Patch holds JSONPatch operations (RFC 6902) proposed by patch rules.
	Patch []PatchOp
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
	prepared oparego.PreparedEvalQuery
	timeout  time.Duration
}

// ErrEvalTimeout is returned when an evaluation exceeds its deadline.
var ErrEvalTimeout = errors.New("policy evaluation exceeded its deadline")

// Prepare builds the query for packages. Every package must exist in the set.
// timeout bounds each evaluation (0 means only the caller's context bounds it).
func (c *Compiled) Prepare(ctx context.Context, packages []string, timeout time.Duration) (*Query, error) {
	for _, p := range packages {
		if !c.HasPackage(p) {
			return nil, fmt.Errorf("package %q is not declared by any policy module (known: %s)", p, strings.Join(c.Packages(), ", "))
		}
	}
	pq, err := oparego.New(
		oparego.Query(unionQuery(packages)),
		oparego.Compiler(c.compiler),
		oparego.Store(c.store),
		oparego.StrictBuiltinErrors(true),
	).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("prepare query for packages %v: %w", packages, err)
	}
	return &Query{packages: packages, prepared: pq, timeout: timeout}, nil
}

// unionQuery binds deny, warn and patch to the union of the packages' sets.
// A package that does not define one of them contributes nothing to it.
func unionQuery(packages []string) string {
	var b strings.Builder
	for i, out := range []string{"deny", "warn", "patch"} {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s := set()", out)
		for _, p := range packages {
			fmt.Fprintf(&b, " | {x | some x in data.%s.%s}", p, out)
		}
	}
	return b.String()
}

// Packages lists the packages this query evaluates.
func (q *Query) Packages() []string { return q.packages }

// Eval evaluates the query against input (the parsed {"request", "context"}
// document). An error means the decision is unknown: the caller applies its
// on-error policy.
func (q *Query) Eval(ctx context.Context, input ast.Value, opts ...oparego.EvalOption) (Result, error) {
	if q.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, q.timeout)
		defer cancel()
	}
	opts = append(opts, oparego.EvalParsedInput(input))
	rs, err := q.prepared.Eval(ctx, opts...)
	if err != nil {
		if topdown.IsCancel(err) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Result{}, fmt.Errorf("%w (%s): %v", ErrEvalTimeout, q.timeout, err)
		}
		return Result{}, fmt.Errorf("evaluate packages %v: %w", q.packages, err)
	}
	if len(rs) != 1 {
		return Result{}, fmt.Errorf("evaluate packages %v: expected one result, got %d", q.packages, len(rs))
	}
	b := rs[0].Bindings
	var res Result
	if res.Deny, err = messages(b["deny"], "deny"); err != nil {
		return Result{}, err
	}
	if res.Warn, err = messages(b["warn"], "warn"); err != nil {
		return Result{}, err
	}
	if res.Patch, err = patchOps(b["patch"]); err != nil {
		return Result{}, err
	}
	return res, nil
}

// messages accepts a rule's entries as strings or as objects with a "msg"
// field (the Gatekeeper convention), so policies from either style work.
func messages(v any, rule string) ([]string, error) {
	items, _ := v.([]any)
	out := make([]string, 0, len(items))
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
	return out, nil // OPA returns sets in sorted order already
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
