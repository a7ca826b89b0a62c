package rego

import (
	"context"
	"reflect"
	"testing"
)

// TestStagesAnswerAsOneQuery: a query split in two stages (PrepareStages),
// both evaluated on the same input, gives the one query's Result: every
// message, the sorted merge across stages, a message both stages produce
// once, and the attribution to packages in the role's package order,
// however the rules are split.
func TestStagesAnswerAsOneQuery(t *testing.T) {
	modules := []Module{
		{Path: "a.rego", Source: "package a\n\ndeny contains \"a: no\" if input.n > 2\n\nwarn contains \"z: from a\" if input.n > 0\n\nwarn contains \"shared\" if input.n > 1\n"},
		{Path: "b.rego", Source: "package b\n\nwarn contains \"m: from b\" if input.w > 0\n\nwarn contains \"shared\" if input.w > 1\n\ndeny contains \"b: no\" if input.w > 3\n"},
		{Path: "c.rego", Source: "package c\n\nwarn contains \"a: from c\" if input.n > 0\n"},
	}
	c, err := Compile(modules, nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	packages := []string{"a", "b", "c"}
	whole, err := c.Prepare(context.Background(), packages, ValidationRules, 0)
	if err != nil {
		t.Fatal(err)
	}
	splits := map[string]func(pkg, rule string) bool{
		"b's warn second":    func(pkg, rule string) bool { return pkg == "b" && rule == "warn" },
		"a's and c's second": func(pkg, rule string) bool { return pkg != "b" },
		"every warn second":  func(_, rule string) bool { return rule == "warn" },
		"nothing second":     func(string, string) bool { return false },
		"everything second":  func(string, string) bool { return true },
	}
	inputs := []string{`{"n": 0, "w": 0}`, `{"n": 1, "w": 1}`, `{"n": 2, "w": 2}`, `{"n": 3, "w": 4}`, `{"n": 5, "w": 0}`}
	for name, second := range splits {
		t.Run(name, func(t *testing.T) {
			s, err := c.PrepareStages(context.Background(), packages, ValidationRules, second, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, js := range inputs {
				in := mustInput(t, js)
				want, err := whole.Eval(context.Background(), in)
				if err != nil {
					t.Fatal(err)
				}
				first, err := s.EvalFirst(context.Background(), in)
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.EvalSecond(context.Background(), in, first)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("input %s: two stages\n%+v\none query\n%+v", js, got, want)
				}
			}
		})
	}
}
