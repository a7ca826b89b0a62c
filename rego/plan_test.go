package rego

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// Planned evaluation (rego/planeval) answers as OPA's own evaluation of
// the same query: results, and whether and how it fails. Each case is a
// Rego feature the planner compiles to its own IR statements.
func TestPlannedEvaluationMatchesReference(t *testing.T) {
	inputs := []string{
		`{}`,
		`{"x": 1, "name": "edge-1", "labels": {"team": "a", "tier": "gold"}, "ports": [80, 443, 80], "tags": ["a", "b"]}`,
		`{"x": 2, "name": "EDGE", "labels": {"team": "b"}, "ports": [8080], "tags": []}`,
		`{"x": "one", "name": 7, "labels": [], "ports": {"a": 1}, "tags": "t"}`,
		`{"x": 1, "labels": {"team": "a", "tier": "gold", "zone": "z1"}, "ports": [1, 2, 3, 65536], "services": [{"name": "a", "port": 1}, {"name": "a", "port": 2}, {"name": "b", "port": 1}]}`,
	}
	cases := map[string]string{
		"negation": `
deny contains "no name" if not input.name
deny contains "not both" if { not input.x == 1; not input.x == 2 }
deny contains "negated call" if not startswith(input.name, "edge")`,
		"every and some": `
deny contains "a port out of range" if { some p in input.ports; not p <= 65535 }
deny contains "all ports small" if { count(input.ports) > 0; every p in input.ports { p < 1000 } }
deny contains sprintf("label %s=%s", [k, v]) if { some k, v in input.labels; k != "team" }`,
		"comprehensions": `
deny contains sprintf("duplicate port %v", [p]) if { some p in input.ports; count([q | some q in input.ports; q == p]) > 1 }
warn contains sprintf("keys %v", [ks]) if { ks := {k | input.labels[k]}; count(ks) > 1 }
warn contains sprintf("by name %v", [m]) if { m := {s.name: ports | some s in input.services; ports := [t.port | some t in input.services; t.name == s.name]}; count(m) > 0 }`,
		"functions, else and defaults": `
tier(labels) := t if t := labels.tier
else := "none"
big(n) if n > 100
big(n) if n == "big"
default level := "low"
level := "high" if input.x == 1
deny contains sprintf("tier %s level %s", [tier(input.labels), level]) if true
warn contains sprintf("big %v", [p]) if { some p in input.ports; big(p) }`,
		"with": `
named if input.name
x_is_one if input.x == 1
deny contains "named under with" if named with input.name as "forced"
deny contains "x one under with" if x_is_one with input.x as 1
deny contains "never: x is not one under with" if x_is_one with input.x as 2
deny contains "never: an equality false under with" if input.x == 1 with input.x as 2
warn contains "x not one under with" if not x_is_one with input.x as 3
z9_allowed if { some z in data.zones; z == "z9" }
warn contains "zones from with data" if z9_allowed with data.zones as ["z9"]`,
		"partial objects, sets and patches": `
label_set[k] := v if { some k, v in input.labels }
ports_seen contains p if { some p in input.ports }
patch contains {"op": "add", "path": sprintf("/metadata/labels/%s", [k]), "value": upper(v)} if { some k, v in label_set; is_string(v) }
warn contains sprintf("%d distinct ports", [count(ports_seen)]) if count(ports_seen) > 0`,
		"types, arithmetic and built-ins": `
deny contains "x not a number" if not is_number(input.x)
deny contains "x arithmetic" if { is_number(input.x); input.x * 0.9 + 1 > 1.5 }
deny contains msg if { is_string(input.name); regex.match("^[a-z0-9-]+$", input.name) == false; msg := sprintf("name %q is not a DNS label", [input.name]) }
warn contains sprintf("tags %s", [concat(",", input.tags)]) if is_array(input.tags)
warn contains sprintf("walked %d", [count([p | walk(input.labels, [p, _])])]) if is_object(input.labels)
warn contains sprintf("object.get %v", [object.get(input.labels, "zone", "none")]) if is_object(input.labels)`,
		"built-in errors are errors": `
deny contains msg if msg := sprintf("%s", input.labels)`,
		"complete rule conflict": `
one := v if some v in input.ports
deny contains sprintf("one %v", [one]) if true`,
		"object key conflict": `
by_name := {s.name: s.port | some s in input.services}
deny contains sprintf("%v", [by_name]) if true`,
		"the data document": `
deny contains sprintf("zone %s not allowed", [z]) if { z := input.labels.zone; not z in data.zones }
warn contains sprintf("limit %d", [data.limits.gold]) if input.labels.tier == "gold"`,
	}
	data := map[string]any{"zones": []any{"z2"}, "limits": map[string]any{"gold": 10}}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := Compile([]Module{{Path: "p.rego", Source: "package p\n" + body + "\n"}}, data, CompileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			q, err := c.Prepare(context.Background(), []string{"p"}, AllRules, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if planned, why := q.Planned(); !planned {
				t.Fatalf("not planned: %s", why)
			}
			answered := 0
			for _, in := range inputs {
				got, gotErr := q.Eval(context.Background(), mustInput(t, in))
				want, wantErr := q.EvalReference(context.Background(), mustAny(t, in))
				if (gotErr != nil) != (wantErr != nil) {
					t.Fatalf("input %s: planned error %v, reference error %v", in, gotErr, wantErr)
				}
				if gotErr != nil {
					if code(gotErr) != code(wantErr) {
						t.Fatalf("input %s: planned error %v, reference error %v: codes differ", in, gotErr, wantErr)
					}
					continue
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("input %s: planned %+v, reference %+v", in, got, want)
				}
				if len(got.Deny)+len(got.Warn)+len(got.Patch) > 0 {
					answered++
				}
			}
			// Each case must say something on some input, or it tests nothing.
			if answered == 0 && !strings.Contains(name, "error") && !strings.Contains(name, "conflict") {
				t.Fatalf("no input made a rule fire")
			}
		})
	}
}

// A query the planned evaluator cannot run (a rule chosen by a variable:
// the planner's dynamic call) stays on topdown and still answers.
func TestUnplannableQueryStaysOnTopdown(t *testing.T) {
	c, err := Compile([]Module{
		{Path: "a.rego", Source: "package lib.a\nmsg := \"from a\"\n"},
		{Path: "p.rego", Source: "package p\ndeny contains m if { some pkg in input.libs; m := data.lib[pkg].msg }\n"},
	}, nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Prepare(context.Background(), []string{"p"}, AllRules, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if planned, why := q.Planned(); planned || !strings.Contains(why, "dynamic") {
		t.Fatalf("planned %v (%q): want topdown, because of the dynamic call", planned, why)
	}
	res, err := q.Eval(context.Background(), mustInput(t, `{"libs": ["a", "b"]}`))
	if err != nil || !reflect.DeepEqual(res.Deny, []string{"from a"}) {
		t.Fatalf("got %+v, %v", res, err)
	}
}

// Conflicts inside planned evaluation carry OPA's conflict code, so the
// webhook reports them as it reports topdown's.
func TestPlannedConflictIsAConflictError(t *testing.T) {
	c, err := Compile([]Module{{Path: "p.rego", Source: "package p\none := v if some v in input.ports\ndeny contains \"x\" if one\n"}}, nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Prepare(context.Background(), []string{"p"}, AllRules, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = q.Eval(context.Background(), mustInput(t, `{"ports": [1, 2]}`))
	if code(err) != topdown.ConflictErr || !strings.Contains(err.Error(), "p.rego:2") {
		t.Fatalf("want a conflict error at p.rego:2, got %v", err)
	}
}

func code(err error) string {
	var te *topdown.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return ""
}

func mustAny(t *testing.T, js string) any {
	t.Helper()
	v := mustInput(t, js)
	out, err := astJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func astJSON(v ast.Value) (any, error) { return ast.JSON(v) }

// The shared binding of an empty output is the value ast.JSON gives it.
func TestAnEmptyOutputIsBoundAsASTJSONBindsIt(t *testing.T) {
	for _, empty := range []ast.Value{ast.NewSet(), ast.NewArray()} {
		want, err := astJSON(empty)
		if err != nil {
			t.Fatal(err)
		}
		if !isEmptyCollection(empty) || !reflect.DeepEqual(noEntries, want) {
			t.Errorf("%v: bound as %#v, ast.JSON gives %#v", empty, noEntries, want)
		}
	}
	for _, v := range []ast.Value{ast.NewSet(ast.StringTerm("x")), ast.NewObject(), ast.String("")} {
		if isEmptyCollection(v) {
			t.Errorf("%v is taken for an empty set or array", v)
		}
	}
}
