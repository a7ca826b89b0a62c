package rego

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestMemoryGuardStopsLongEvaluations: while the heap is above the guard's
// threshold (here one byte, so always), an evaluation that runs past a
// quarter of a second is stopped with ErrEvalMemory well before its
// deadline, and a quick one is not touched.
func TestMemoryGuardStopsLongEvaluations(t *testing.T) {
	c, err := Compile([]Module{
		{Path: "slow.rego", Source: "package slow\ndeny contains \"never\" if { count(numbers.range(1, 20000000)) == 0 }\n"},
		{Path: "quick.rego", Source: "package quick\ndeny contains \"always\" if { input.x == 1 }\n"},
	}, nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slow, err := c.Prepare(context.Background(), []string{"slow"}, AllRules, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	quick, err := c.Prepare(context.Background(), []string{"quick"}, AllRules, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		GuardMemory(ctx, 1)
		close(stopped)
	}()
	defer func() {
		cancel()
		<-stopped
	}()
	for !guard.running.Load() {
		time.Sleep(time.Millisecond)
	}
	before := StoppedForMemory()
	res, err := quick.Eval(context.Background(), mustInput(t, `{"x": 1}`))
	if err != nil || len(res.Deny) != 1 {
		t.Fatalf("a quick evaluation under the guard: %v %v", res, err)
	}
	if _, err := slow.program(); err != nil {
		t.Fatalf("the slow query must run on the planned path: %v", err)
	}
	// The planned path reads the guard's cut at its steps (planeval.Bounds);
	// topdown, which a traced request takes, registers its context.
	for name, eval := range bothEvaluators(slow, mustInput(t, `{}`)) {
		t.Run(name, func(t *testing.T) {
			before := StoppedForMemory()
			began := time.Now()
			err := eval()
			took := time.Since(began)
			if !errors.Is(err, ErrEvalMemory) {
				t.Fatalf("want ErrEvalMemory, got %v after %s", err, took)
			}
			if took > 10*time.Second {
				t.Fatalf("stopped only after %s", took)
			}
			if got := StoppedForMemory() - before; got != 1 {
				t.Fatalf("StoppedForMemory grew by %d, want 1", got)
			}
			t.Logf("stopped after %s: %v", took, err)
		})
	}
	// A quick evaluation that begins after a cut is not touched by it.
	res, err = quick.Eval(context.Background(), mustInput(t, `{"x": 1}`))
	if err != nil || len(res.Deny) != 1 {
		t.Fatalf("a quick evaluation after the guard stopped others: %v %v", res, err)
	}
	if got := StoppedForMemory() - before; got != 2 {
		t.Fatalf("StoppedForMemory grew by %d over both paths, want 2", got)
	}
}
