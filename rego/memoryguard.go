package rego

import (
	"context"
	"errors"
	"fmt"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/quantumnode/qn-admission/rego/planeval"
)

// ErrEvalMemory is returned when an evaluation was stopped because the
// process neared its memory limit while it ran.
var ErrEvalMemory = errors.New("policy evaluation stopped: qn-webhook neared its memory limit while it ran")

// A deadline bounds an evaluation's time, not its memory: a built-in such
// as numbers.range(1, 1e7) allocates hundreds of megabytes within a one-second
// deadline, and a few at once push a container past its limit. The memory
// guard watches the heap and, past its threshold, stops the evaluations
// that have already run for a quarter of a second: ordinary ones take a
// millisecond and are left alone, the ones that allocate without end are
// the long ones. The heap it reads counts garbage not yet collected (the
// live heap is known only after a collection, too late here), so the
// threshold is crossed in ordinary operation too; the age keeps that from
// touching ordinary evaluations.
//
// It is one per process (the heap is), started by GuardMemory; without it
// evaluations register nowhere and cost nothing more.
var guard memoryGuard

// guardEpoch is what the guard's cut is measured from (monotonic).
var guardEpoch = time.Now()

// memoryGuardTick is how often the guard reads the live heap, and
// memoryGuardMinAge how long an evaluation runs before the guard may stop it.
const (
	memoryGuardTick   = 10 * time.Millisecond
	memoryGuardMinAge = 250 * time.Millisecond
)

type memoryGuard struct {
	running atomic.Bool
	stopped atomic.Int64
	// cut, while the heap is above the threshold, is the time (since
	// guardEpoch, in nanoseconds; 0: none) before which the evaluations
	// bounded without a context (planeval.Bounds) must have begun to be
	// stopped: they read it at their steps, and register nowhere.
	cut atomic.Int64

	mu     sync.Mutex
	active map[*guardedEval]struct{}
}

// guardedEval is one evaluation the guard may stop.
type guardedEval struct {
	started time.Time
	cancel  context.CancelFunc
	// byGuard is set before the guard cancels, so the evaluation reports
	// ErrEvalMemory rather than a deadline.
	byGuard atomic.Bool
}

// GuardMemory runs the memory guard until ctx ends: every 10ms it reads the
// heap's objects (live and not yet collected) and, when they are above
// threshold bytes, stops every policy evaluation that has run for 250ms or
// more. It returns at once when threshold is 0. StoppedForMemory counts
// what it stopped.
func GuardMemory(ctx context.Context, threshold uint64) {
	if threshold == 0 || !guard.running.CompareAndSwap(false, true) {
		return
	}
	defer guard.running.Store(false)
	defer guard.cut.Store(0)
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	ticker := time.NewTicker(memoryGuardTick)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticker.C:
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 && sample[0].Value.Uint64() > threshold {
				cut := now.Add(-memoryGuardMinAge)
				guard.cut.Store(max(1, cut.Sub(guardEpoch).Nanoseconds()))
				guard.stopOlderThan(cut)
			} else {
				guard.cut.Store(0)
			}
		}
	}
}

// StoppedForMemory counts the evaluations the memory guard has stopped.
func StoppedForMemory() int64 { return guard.stopped.Load() }

// track registers an evaluation whose context cancel is cancel; the
// returned func unregisters it. nil while the guard does not run.
func (g *memoryGuard) track(cancel context.CancelFunc) *guardedEval {
	if !g.running.Load() {
		return nil
	}
	e := &guardedEval{started: time.Now(), cancel: cancel}
	g.mu.Lock()
	if g.active == nil {
		g.active = map[*guardedEval]struct{}{}
	}
	g.active[e] = struct{}{}
	g.mu.Unlock()
	return e
}

func (g *memoryGuard) untrack(e *guardedEval) {
	if e == nil {
		return
	}
	g.mu.Lock()
	delete(g.active, e)
	g.mu.Unlock()
}

func (g *memoryGuard) stopOlderThan(t time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for e := range g.active {
		if e.started.Before(t) && e.byGuard.CompareAndSwap(false, true) {
			e.cancel()
			g.stopped.Add(1)
		}
	}
}

// evalBounds is what bounds one evaluation: its context's cancel (nil when
// nothing needs one) and its entry in the memory guard (nil when the
// guard does not run). A value, not closures: an evaluation takes a
// microsecond, and each closure was an allocation on every one.
type evalBounds struct {
	cancel context.CancelFunc
	entry  *guardedEval
}

// done releases the deadline and the guard's entry.
func (b evalBounds) done() {
	guard.untrack(b.entry)
	if b.cancel != nil {
		b.cancel()
	}
}

// stoppedForMemory says the memory guard stopped the evaluation.
func (b evalBounds) stoppedForMemory() bool { return b.entry != nil && b.entry.byGuard.Load() }

// evalPlannedWithinBounds evaluates a plan none of whose built-ins waits on
// its context, bounded by q's deadline and the memory guard's cut
// (planeval.Bounds) instead of a context of its own: a context with a
// deadline and a registration with the guard cost a timer, a channel and
// two locked map operations at every evaluation, several a request.
func (q *Query) evalPlannedWithinBounds(ctx context.Context, program *planeval.Program, input ast.Value) (map[string]any, error) {
	b := planeval.Bounds{Started: time.Now()}
	if q.timeout > 0 {
		b.Deadline = b.Started.Add(q.timeout)
	}
	if guard.running.Load() {
		b.Stop = stoppedForMemory
	}
	bindings, err := q.evalPlanned(ctx, program, input, b)
	if err == nil {
		return bindings, nil
	}
	switch {
	case errors.Is(err, planeval.ErrStopped):
		guard.stopped.Add(1)
		return nil, fmt.Errorf("%w (it ran %s or more while the heap passed the guard's threshold): %v", ErrEvalMemory, memoryGuardMinAge, err)
	case topdown.IsCancel(err) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, fmt.Errorf("%w (%s): %v", ErrEvalTimeout, q.timeout, err)
	}
	return nil, fmt.Errorf("evaluate packages %v: %w", q.packages, err)
}

// stoppedForMemory is the Bounds.Stop of an evaluation under the memory
// guard: it ends one that began before the guard's current cut.
func stoppedForMemory(started, _ time.Time) bool {
	cut := guard.cut.Load()
	return cut != 0 && started.Sub(guardEpoch).Nanoseconds() < cut
}

// guarded bounds one evaluation: q's deadline, and the memory guard when it
// runs. Without either, ctx is used as it is.
func (q *Query) guarded(ctx context.Context) (context.Context, evalBounds) {
	var cancel context.CancelFunc
	switch {
	case q.timeout > 0:
		ctx, cancel = context.WithTimeout(ctx, q.timeout)
	case guard.running.Load():
		ctx, cancel = context.WithCancel(ctx)
	default:
		return ctx, evalBounds{}
	}
	return ctx, evalBounds{cancel: cancel, entry: guard.track(cancel)}
}

// failure is the error of an evaluation that failed with err: the memory
// guard's, the deadline's, or the policies' own.
func (q *Query) failure(ctx context.Context, err error, bounds evalBounds) error {
	switch {
	case bounds.stoppedForMemory():
		return fmt.Errorf("%w (it ran %s or more while the heap passed the guard's threshold): %v", ErrEvalMemory, memoryGuardMinAge, err)
	case topdown.IsCancel(err) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%w (%s): %v", ErrEvalTimeout, q.timeout, err)
	}
	return fmt.Errorf("evaluate packages %v: %w", q.packages, err)
}
