package pattern

import (
	"context"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/quantumnode/qn-admission/rego"
)

// The batch role's rule both ways: the bundled Rego package qn.roles.batch
// and the same rule as a pattern. Each is measured on the work it does per
// request: the pattern on the decoded object, the Rego query on its parsed
// input (building that input is the engine's, measured in
// policies.BenchmarkInputValue).

const batchPattern = `kind: PatternPolicy
validate:
  message: batch QuantumNodes must carry label priority=low
  pattern:
    (apiVersion): qn.dev/*
    (kind): QuantumNode
    metadata:
      labels:
        priority: low
`

func batchObject(priority string) string {
	return `{"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode",
  "metadata": {"name": "edge-sh-1", "namespace": "edge", "labels": {"priority": "` + priority + `", "topology.kubernetes.io/zone": "cn-shanghai"}},
  "spec": {"hardware": {"arch": "arm64"}, "services": [{"name": "mqtt", "port": 8883}]}}`
}

func benchPattern(b *testing.B, priority string, wantDeny int) {
	p, err := Parse("batch-priority-low.pattern.yaml", []byte(batchPattern))
	if err != nil {
		b.Fatal(err)
	}
	policies := []*Policy{p}
	req := &Request{Operation: "CREATE", Object: decode(b, batchObject(priority))}
	b.ReportAllocs()
	for b.Loop() {
		deny, _ := Evaluate(policies, req, nil, nil)
		if len(deny) != wantDeny {
			b.Fatalf("deny %q", deny)
		}
	}
}

func BenchmarkBatchPatternAdmitted(b *testing.B) { benchPattern(b, "low", 0) }
func BenchmarkBatchPatternDenied(b *testing.B)   { benchPattern(b, "high", 1) }

func benchRego(b *testing.B, priority string, wantDeny int) {
	modules, err := rego.ReadModules(rego.Bundled())
	if err != nil {
		b.Fatal(err)
	}
	data := map[string]any{"roles": map[string]any{"batch": map[string]any{"priority": "low"}}}
	compiled, err := rego.Compile(modules, data, rego.CompileOptions{})
	if err != nil {
		b.Fatal(err)
	}
	q, err := compiled.Prepare(context.Background(), []string{"qn.roles.batch"}, rego.ValidationRules, 0)
	if err != nil {
		b.Fatal(err)
	}
	obj := decode(b, batchObject(priority))
	input, err := ast.InterfaceToValue(map[string]any{
		"request": map[string]any{
			"kind":      map[string]any{"group": "qn.dev", "version": "v1alpha1", "kind": "QuantumNode"},
			"operation": "CREATE",
			"object":    obj,
		},
		"context": map[string]any{"labels": obj["metadata"].(map[string]any)["labels"]},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := q.Eval(ctx, input)
		if err != nil || len(res.Deny) != wantDeny {
			b.Fatalf("deny %q, err %v", res.Deny, err)
		}
	}
}

func BenchmarkBatchRegoAdmitted(b *testing.B) { benchRego(b, "low", 0) }
func BenchmarkBatchRegoDenied(b *testing.B)   { benchRego(b, "high", 1) }
