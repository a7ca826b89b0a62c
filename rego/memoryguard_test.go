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
	began := time.Now()
	_, err = slow.Eval(context.Background(), mustInput(t, `{}`))
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
}
