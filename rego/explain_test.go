package rego

import (
	"context"
	"reflect"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

func TestFiringsAttributeEveryEntryToItsRule(t *testing.T) {
	src := `package p

deny contains msg if {
	some msg in violation
}

violation contains "a is missing" if not input.a

violation contains sprintf("b is %v", [input.b]) if input.b > 1

warn contains {"msg": "look"} if ok(input.b)

ok(x) if x > 0

patch contains {"op": "add", "path": "/x", "value": 1} if true

limit := 3
`
	c, err := Compile([]Module{{Path: "p.rego", Source: src}}, nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Prepare(context.Background(), []string{"p"}, AllRules, 0)
	if err != nil {
		t.Fatal(err)
	}
	input := ast.MustParseTerm(`{"b": 2}`).Value
	res, events, err := q.EvalTraced(context.Background(), input)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := q.Eval(context.Background(), input)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res, plain) {
		t.Fatalf("a traced evaluation must give the same result: %+v vs %+v", res, plain)
	}
	got := map[string][]any{}
	for _, f := range Firings(events) {
		if f.Entry || f.Function {
			got[f.Rule+" "+f.Location()] = append(got[f.Rule+" "+f.Location()], f.Value)
		}
	}
	want := map[string][]any{
		"deny p.rego:3":      {"a is missing", "b is 2"},
		"violation p.rego:7": {"a is missing"},
		"violation p.rego:9": {"b is 2"},
		"warn p.rego:11":     {map[string]any{"msg": "look"}},
		"ok p.rego:13":       {nil},
		"patch p.rego:15":    {map[string]any{"op": "add", "path": "/x", "value": float64(1)}},
	}
	for k, v := range want {
		if !sameValues(got[k], v) {
			t.Errorf("%s: got %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("unexpected firings: %v", got)
	}
}

func sameValues(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			if reflect.DeepEqual(normalizeNumber(x), normalizeNumber(y)) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// normalizeNumber compares json.Number and float64 alike.
func normalizeNumber(v any) any {
	if m, ok := v.(map[string]any); ok {
		out := map[string]any{}
		for k, x := range m {
			out[k] = normalizeNumber(x)
		}
		return out
	}
	if n, ok := v.(interface{ Float64() (float64, error) }); ok {
		f, _ := n.Float64()
		return f
	}
	return v
}
