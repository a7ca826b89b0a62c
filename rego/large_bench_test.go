package rego

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
)

// largeNodeInput is the Rego input of a CREATE of a QuantumNode with n
// services. With clashing set, every name and every port is declared twice:
// the worst case of the duplicate rules, which must stay linear.
func largeNodeInput(n int, clashing bool) ast.Value {
	services := make([]any, n)
	for i := range services {
		k := i
		if clashing {
			k = i / 2
		}
		services[i] = map[string]any{"name": fmt.Sprintf("service-%d", k), "port": 1024 + k}
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

// BenchmarkQuantumNodeRules evaluates the quantumnode package on the largest
// object the CRD admits (256 services) and on far larger crafted ones that a
// schema-less install would pass through.
func BenchmarkQuantumNodeRules(b *testing.B) {
	mods, err := ReadModules(Bundled())
	if err != nil {
		b.Fatal(err)
	}
	c, err := Compile(mods, map[string]any{"roles": map[string]any{}}, CompileOptions{})
	if err != nil {
		b.Fatal(err)
	}
	q, err := c.Prepare(context.Background(), []string{"qn.quantumnode"}, []string{"deny", "warn"}, time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{256, 4096} {
		for _, clashing := range []bool{false, true} {
			input := largeNodeInput(n, clashing)
			b.Run(fmt.Sprintf("services=%d/clashing=%v", n, clashing), func(b *testing.B) {
				for b.Loop() {
					res, err := q.Eval(context.Background(), input)
					if err != nil {
						b.Fatal(err)
					}
					if clashing != (len(res.Deny) > 0) {
						b.Fatalf("clashing=%v but %d denials", clashing, len(res.Deny))
					}
				}
			})
		}
	}
}

// TestDuplicateRulesStayLinear counts evaluation steps (trace events, which
// do not depend on the machine's load) for objects of n and 4n services: a
// quadratic rule would take about 16 times the steps, a linear one 4.
func TestDuplicateRulesStayLinear(t *testing.T) {
	c := compileBundled(t)
	q, err := c.Prepare(context.Background(), []string{"qn.quantumnode"}, []string{"deny", "warn"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	steps := func(t *testing.T, n int, clashing bool) int {
		t.Helper()
		_, events, err := q.EvalTraced(context.Background(), largeNodeInput(n, clashing))
		if err != nil {
			t.Fatal(err)
		}
		return len(events)
	}
	for name, clashing := range map[string]bool{
		"every name and port declared twice": true,
		"every name and port unique":         false,
	} {
		t.Run(name, func(t *testing.T) {
			small, large := steps(t, 256, clashing), steps(t, 1024, clashing)
			if ratio := float64(large) / float64(small); ratio > 5 {
				t.Fatalf("4 times the services took %.1f times the evaluation steps (%d → %d): a rule over services is no longer linear", ratio, small, large)
			}
		})
	}
}
