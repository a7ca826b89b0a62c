package policies

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
)

// Stage benchmarks: a regression points at its stage.

func benchInput() (*Input, Facts) {
	in := node{role: "realtime", labels: shanghai, annotations: fast, uid: "u"}.input()
	c := in.Facts
	c.Role = "realtime"
	c.Window = &WindowState{Key: "user", Count: 3, Limit: 120, PeriodSeconds: 60, Remaining: 117}
	return in, c
}

func BenchmarkInputValue(b *testing.B) {
	in, c := benchInput()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := inputValue(in, c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInputWithWindow is the second stage's input of a deny-first
// validation: the first stage's input with the window added (withWindow).
func BenchmarkInputWithWindow(b *testing.B) {
	in, c := benchInput()
	w := c.Window
	c.Window = nil
	first, err := inputValue(in, c)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = withWindow(nil, first, w)
	}
}

func BenchmarkRoleLookup(b *testing.B) {
	set, err := Load(context.Background(), rego.Bundled(), LoadOptions{SkipTests: true})
	if err != nil {
		b.Fatal(err)
	}
	in, _ := benchInput()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if p := set.plan(in, PathValidate); p.Spec == nil {
			b.Fatal("no role")
		}
	}
}

func BenchmarkEvalRealtime(b *testing.B) {
	set, err := Load(context.Background(), rego.Bundled(), LoadOptions{SkipTests: true})
	if err != nil {
		b.Fatal(err)
	}
	q := set.validate["realtime"]
	in, c := benchInput()
	v, err := inputValue(in, c)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := q.Eval(context.Background(), v)
		if err != nil || len(res.Deny) != 0 {
			b.Fatalf("%v %v", res, err)
		}
	}
}

func BenchmarkEngineValidateRealtime(b *testing.B) {
	set, err := Load(context.Background(), rego.Bundled(), LoadOptions{SkipTests: true})
	if err != nil {
		b.Fatal(err)
	}
	clk := clocktesting.NewFakePassiveClock(t0)
	benchmarkValidateRealtime(b, NewEngine(set, EngineOptions{Windows: window.NewMemoryStore(clk, window.MemoryOptions{})}), clk)
}

// benchmarkValidateRealtime validates the realtime node with e, a second
// apart on clk, so every change has room in its window.
func benchmarkValidateRealtime(b *testing.B, e interface {
	Validate(context.Context, *Input) Decision
}, clk *clocktesting.FakePassiveClock) {
	in, _ := benchInput()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clk.SetTime(clk.Now().Add(time.Second))
		if d := e.Validate(context.Background(), in); !d.Allowed {
			b.Fatal(d.Message)
		}
	}
	b.StopTimer()
}

// BenchmarkEvalPerPackage evaluates each bundled package alone, so a slow
// policy shows by name.
func BenchmarkEvalPerPackage(b *testing.B) {
	set, _ := Load(context.Background(), rego.Bundled(), LoadOptions{SkipTests: true})
	in, c := benchInput()
	v, _ := inputValue(in, c)
	for _, p := range []string{"qn.quantumnode", "qn.roles.realtime", "qn.window", "qn.mutate.managedby"} {
		q, err := set.Compiled.Prepare(context.Background(), []string{p}, rego.AllRules, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				q.Eval(context.Background(), v)
			}
		})
	}
}

// BenchmarkEngineMutateRealtime is the engine's mutating call for the
// realtime node, which gets the managed-by label: role lookup, the
// mutation query, and the patch.
func BenchmarkEngineMutateRealtime(b *testing.B) {
	set, err := Load(context.Background(), rego.Bundled(), LoadOptions{SkipTests: true})
	if err != nil {
		b.Fatal(err)
	}
	e := NewEngine(set, EngineOptions{Windows: window.NewMemoryStore(clocktesting.NewFakePassiveClock(t0), window.MemoryOptions{})})
	in, _ := benchInput()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d := e.Mutate(context.Background(), in); !d.Allowed || d.PatchOps != 1 {
			b.Fatalf("%+v", d)
		}
	}
}

// BenchmarkPatchManagedBy is the patch step alone: the bundled managed-by
// label added to the realtime node.
func BenchmarkPatchManagedBy(b *testing.B) {
	in, _ := benchInput()
	ops := []rego.PatchOp{{Op: "add", Path: "/metadata/labels/qn.dev~1managed-by", Value: "qn-admission"}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, n, err := diffPatch(in.Object, ops); err != nil || n != 1 {
			b.Fatal(n, err)
		}
	}
}
