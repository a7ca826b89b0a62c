package controller

import (
	"context"
	"time"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// Effects are what a step of the QuantumNode reconcile (the audit, the
// health step, the rollout) hands back besides what it wrote into the
// status it was given: the reconcile writes that status once, then runs
// every step's After in order.
type Effects struct {
	// Urgent marks status changes that must not wait for quiescence: they
	// record what is done (health, a step, a binding, a rollback).
	Urgent bool
	// RequeueAfter is when the step wants to look again; 0 is never.
	RequeueAfter time.Duration
	// After run once the status is stored, in order, with the QuantumNode
	// as stored: events, metrics, and the effects the status records.
	After []func(ctx context.Context, qn *qnv1alpha1.QuantumNode) error
}

// Requeue asks to look again after d at the latest (d <= 0 asks nothing).
func (e *Effects) Requeue(d time.Duration) {
	e.RequeueAfter = Earliest(e.RequeueAfter, d)
}

// Then adds f to run once the status is stored.
func (e *Effects) Then(f func(ctx context.Context, qn *qnv1alpha1.QuantumNode) error) {
	e.After = append(e.After, f)
}

// Add joins another step's effects to e, after e's own.
func (e *Effects) Add(o Effects) {
	e.Urgent = e.Urgent || o.Urgent
	e.Requeue(o.RequeueAfter)
	e.After = append(e.After, o.After...)
}

// Run runs the effects' After in order, stopping at the first error, and
// returns the soonest look-again any of them asked for with LookAgain
// (their wish comes after the reconcile's result was computed, so it
// must travel back this way).
func (e *Effects) Run(ctx context.Context, qn *qnv1alpha1.QuantumNode) (time.Duration, error) {
	wish := new(time.Duration)
	ctx = context.WithValue(ctx, lookAgainKey{}, wish)
	for _, f := range e.After {
		if err := f(ctx, qn); err != nil {
			return *wish, err
		}
	}
	return *wish, nil
}

type lookAgainKey struct{}

// LookAgain asks, from inside an After, that the reconcile look at the
// node again after d at the latest: e.g. an eviction a
// PodDisruptionBudget refused is tried again.
func LookAgain(ctx context.Context, d time.Duration) {
	if wish, ok := ctx.Value(lookAgainKey{}).(*time.Duration); ok {
		*wish = Earliest(*wish, d)
	}
}

// Earliest is the sooner of two waits, where a wait of 0 or less is none.
func Earliest(a, b time.Duration) time.Duration {
	switch {
	case b <= 0:
		return a
	case a <= 0 || b < a:
		return b
	}
	return a
}

// Clip bounds a condition or record message to what the schema allows.
func Clip(s string) string {
	const limit = 1024
	if len(s) <= limit {
		return s
	}
	return s[:limit-3] + "..."
}
