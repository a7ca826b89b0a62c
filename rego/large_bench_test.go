package rego

import (
	"context"
	"fmt"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// serviceShape is how the n services of a large QuantumNode repeat their
// names and ports: the duplicate rules must stay near linear in each.
type serviceShape struct {
	// name and port give service i's name and port.
	name func(i int) string
	port func(i int) int
	// clashing says the shape declares some name or port twice.
	clashing bool
}

// serviceShapes are the shapes the duplicate rules are held to.
var serviceShapes = map[string]serviceShape{
	"every name and port unique": {
		name: func(i int) string { return fmt.Sprintf("service-%d", i) }, port: func(i int) int { return 1024 + i },
	},
	"every name and port declared twice": {
		name: func(i int) string { return fmt.Sprintf("service-%d", i/2) }, port: func(i int) int { return 1024 + i/2 }, clashing: true,
	},
	"one port for every service": {
		name: func(i int) string { return fmt.Sprintf("service-%d", i) }, port: func(int) int { return 8080 }, clashing: true,
	},
	"one name for every service": {
		name: func(int) string { return "service" }, port: func(i int) int { return 1024 + i }, clashing: true,
	},
	"one name and one port for every service": {
		name: func(int) string { return "service" }, port: func(int) int { return 8080 }, clashing: true,
	},
}

// largeNodeInput is the Rego input of a CREATE of a QuantumNode with n
// services of the given shape.
func largeNodeInput(n int, shape serviceShape) ast.Value {
	services := make([]any, n)
	for i := range services {
		services[i] = map[string]any{"name": shape.name(i), "port": shape.port(i)}
	}
	in := map[string]any{"request": map[string]any{
		"kind":      map[string]any{"group": "qn.dev", "version": "v1alpha1", "kind": "QuantumNode"},
		"operation": "CREATE",
		"object": map[string]any{
			"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode",
			"metadata": map[string]any{"name": "big"},
			"spec":     map[string]any{"hardware": map[string]any{"arch": "arm64"}, "services": services},
		},
	}}
	v, err := ast.InterfaceToValue(in)
	if err != nil {
		panic(err)
	}
	return v
}

func prepareQuantumNodeRules(tb testing.TB) *Query {
	tb.Helper()
	mods, err := ReadModules(Bundled())
	if err != nil {
		tb.Fatal(err)
	}
	c, err := Compile(mods, map[string]any{"roles": map[string]any{}}, CompileOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	// No deadline: the tests count steps, and a loaded machine running the
	// race detector must not turn a count into a timeout.
	q, err := c.Prepare(context.Background(), []string{"qn.quantumnode"}, []string{"deny", "warn"}, 0)
	if err != nil {
		tb.Fatal(err)
	}
	return q
}

// BenchmarkQuantumNodeRules evaluates the quantumnode package on the largest
// object the CRD admits (256 services) and on far larger crafted ones that a
// schema-less install would pass through, in every shape of repetition.
func BenchmarkQuantumNodeRules(b *testing.B) {
	q := prepareQuantumNodeRules(b)
	for _, n := range []int{256, 1000, 5000} {
		for name, shape := range serviceShapes {
			input := largeNodeInput(n, shape)
			b.Run(fmt.Sprintf("services=%d/%s", n, name), func(b *testing.B) {
				for b.Loop() {
					res, err := q.Eval(context.Background(), input)
					if err != nil {
						b.Fatal(err)
					}
					if shape.clashing != (len(res.Deny) > 0) {
						b.Fatalf("clashing=%v but %d denials", shape.clashing, len(res.Deny))
					}
				}
			})
		}
	}
}

// TestDuplicateRulesStayLinear counts evaluation steps, which do not depend
// on the machine's load, for objects of n and 4n services in every shape:
// a quadratic rule would take about 16 times the steps, a linear one 4 (a
// sort, n log n, adds a little). Both evaluators are held to it: topdown's
// trace events and the planned evaluator's calls and loop steps.
func TestDuplicateRulesStayLinear(t *testing.T) {
	q := prepareQuantumNodeRules(t)
	program, err := q.program()
	if err != nil {
		t.Fatalf("the quantumnode rules must run on the planned path: %v", err)
	}
	evaluators := map[string]func(t *testing.T, input ast.Value) int{
		"topdown": func(t *testing.T, input ast.Value) int {
			var events eventCounter
			if _, err := q.evalDirect(context.Background(), input, &events); err != nil {
				t.Fatal(err)
			}
			return int(events)
		},
		"planned": func(t *testing.T, input ast.Value) int {
			_, steps, err := program.EvalSteps(context.Background(), input)
			if err != nil {
				t.Fatal(err)
			}
			return steps
		},
	}
	for name, shape := range serviceShapes {
		for evaluator, steps := range evaluators {
			t.Run(name+"/"+evaluator, func(t *testing.T) {
				small, large := steps(t, largeNodeInput(256, shape)), steps(t, largeNodeInput(1024, shape))
				if ratio := float64(large) / float64(small); ratio > 5 {
					t.Fatalf("4 times the services took %.1f times the evaluation steps (%d → %d): a rule over services is no longer linear", ratio, small, large)
				}
			})
		}
	}
}

// eventCounter is a topdown tracer that only counts events: the step count
// of TestDuplicateRulesStayLinear without keeping a trace in memory.
type eventCounter int

func (*eventCounter) Enabled() bool               { return true }
func (*eventCounter) Config() topdown.TraceConfig { return topdown.TraceConfig{} }
func (c *eventCounter) TraceEvent(topdown.Event)  { *c++ }
