package rego

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

var managedFields = []string{"request", "object", "metadata", "managedFields"}

func TestMayReadInput(t *testing.T) {
	cases := map[string]struct {
		source string
		want   bool
	}{
		"a rule reading labels leaves managedFields unread": {
			"package p\ndeny contains \"x\" if input.request.object.metadata.labels.team == \"a\"\n", false},
		"object.get with a constant path reads only that path": {
			"package p\nspec := object.get(input.request, [\"object\", \"spec\"], {})\ndeny contains \"x\" if spec.a\n", false},
		"a with modifier replaces input and reads nothing": {
			"package p\nallow if input.x\ntest_a if allow with input as {\"x\": true}\n", false},
		"a rule reading managedFields reads it": {
			"package p\ndeny contains \"x\" if count(input.request.object.metadata.managedFields) > 3\n", true},
		"a variable key under metadata may read managedFields": {
			"package p\ndeny contains k if input.request.object.metadata[k]\n", true},
		"the whole object passed to a function may be read": {
			"package p\nf(o) := o.metadata.managedFields\ndeny contains \"x\" if f(input.request.object)\n", true},
		"the whole input bound to a variable may be read": {
			"package p\ndeny contains \"x\" if { i := input; i.request.object.metadata.managedFields }\n", true},
		"object.get with a computed path may read anything under its object": {
			"package p\nk := \"managedFields\"\ndeny contains \"x\" if object.get(input.request.object.metadata, k, null)\n", true},
		"an import of input counts as a read of its subtree": {
			"package p\nimport input.request as req\ndeny contains \"x\" if req.object.metadata.managedFields\n", true},
		"a variable bound to a path and never used still reads it (the rule needs it defined)": {
			"package p\ndeny contains \"x\" if { m := input.request.object.metadata.managedFields }\n", true},
		"a print statement reads nothing (the compiler drops it)": {
			"package p\ndeny contains \"x\" if { print(input.request.object.metadata.managedFields); input.request.object.spec }\n", false},
		"walk over the object may read managedFields": {
			"package p\ndeny contains \"x\" if { walk(input.request, [p, v]); v == \"x\" }\n", true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			compiled, err := Compile([]Module{{Path: "p.rego", Source: c.source}}, nil, CompileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := compiled.MayReadInput(managedFields...); got != c.want {
				t.Errorf("MayReadInput(managedFields) = %v, want %v (prefixes %v)", got, c.want, compiled.reads.prefixes)
			}
		})
	}
	if compileBundled(t).MayReadInput(managedFields...) {
		t.Error("the bundled policies read no managedFields, but the analysis says they may")
	}
}

func TestRuleInputReadsFollowsCalls(t *testing.T) {
	src := `package p

user := input.context.user

deny contains "a" if user == "alice"

deny contains "b" if input.context.labels.team == "a"

deny contains "c" if data.p.f(input.request.object) with input.context.user as "bob"

f(o) := o.spec
`
	compiled, err := Compile([]Module{{Path: "p.rego", Source: src}}, nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]string{}
	for _, r := range compiled.RuleInputReads("deny") {
		if r.Package != "p" || r.Name != "deny" {
			t.Errorf("unexpected rule %s.%s", r.Package, r.Name)
		}
		got[r.Location.Row] = fmt.Sprint(r.Input)
	}
	want := map[int]string{
		5: "[[context user]]",        // through the rule it reads
		7: "[[context labels team]]", // its own read
		9: "[[request object]]",      // the function's argument; a with target is no read
	}
	if !maps.Equal(got, want) {
		t.Errorf("reads by line = %v, want %v", got, want)
	}
}

func TestInputReadsBelow(t *testing.T) {
	object := []string{"request", "object"}
	cases := map[string]struct {
		source string
		want   string
	}{
		"paths below the object, relative to it": {
			"package p\ndeny contains \"x\" if { input.request.object.metadata.labels.team == \"a\"; input.request.object.spec.hardware.arch }\n", "[[metadata labels team] [spec hardware arch]]"},
		"object.get with a constant path": {
			"package p\ndeny contains \"x\" if object.get(input.request.object, [\"spec\", \"a\"], 1) == 2\n", "[[spec a]]"},
		"the whole object passed to a function reads everything": {
			"package p\nf(o) := o.spec\ndeny contains \"x\" if f(input.request.object)\n", "[[]]"},
		"json.marshal of the object reads everything": {
			"package p\ndeny contains s if s := json.marshal(input.request.object)\n", "[[]]"},
		"walk(input) reads everything": {
			"package p\ndeny contains \"x\" if { walk(input, [p, v]); v == \"x\" }\n", "[[]]"},
		"the whole request read reads the object whole": {
			"package p\ndeny contains \"x\" if count(input.request) > 3\n", "[[]]"},
		"a variable key stops the path": {
			"package p\ndeny contains k if input.request.object.metadata[k]\n", "[[metadata]]"},
		"a read of something else reads nothing below": {
			"package p\ndeny contains \"x\" if input.context.user == \"a\"\n", "[]"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			compiled, err := Compile([]Module{{Path: "p.rego", Source: c.source}}, nil, CompileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := compiled.InputReadsBelow(object...)
			slices.SortFunc(got, func(a, b []string) int { return strings.Compare(strings.Join(a, "."), strings.Join(b, ".")) })
			got = slices.CompactFunc(got, slices.Equal)
			if fmt.Sprint(got) != c.want {
				t.Errorf("InputReadsBelow(request.object) = %v, want %s", got, c.want)
			}
		})
	}
}
